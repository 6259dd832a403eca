"""``ResolvedPrecision``: the precision a model runs at, as resolved on this machine.

A ``PrecisionPolicy`` (or NNx's legacy ``mixed_precision`` flag) *requests* a precision; the
device decides what is *effective*: fp16 needs CUDA, bf16 a CPU or a CUDA device of compute
capability 8.0+. A request the device cannot honour falls back to fp32 only when the policy says
so, and the record keeps why. It is written to the run's ``metadata.yaml`` (``precision``), never
part of the run id.

>>> ResolvedPrecision("fp16", "fp32", "cpu", "mixed_precision", "fp16 needs CUDA").fell_back
True
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from nnx_core.validate import check_choice

MODES = ("fp32", "fp16", "bf16")
SOURCES = ("default", "policy", "mixed_precision")


def _mode(_instance: Any, attribute: Any, value: Any) -> None:
    check_choice(f"ResolvedPrecision.{attribute.name}", value, MODES)


@attrs.frozen
class ResolvedPrecision:
    """``requested`` and ``effective`` mode, the ``device_type`` it was resolved for, its
    ``source`` (``"policy"``, NNx's ``"mixed_precision"`` flag, or ``"default"``) and, after a
    fallback, the ``fallback_reason``."""

    requested: str = attrs.field(validator=_mode)
    effective: str = attrs.field(validator=_mode)
    device_type: str
    source: str = attrs.field(default="default", validator=lambda _i, _a, v: check_choice("ResolvedPrecision.source", v, SOURCES))
    fallback_reason: str | None = None

    @property
    def fell_back(self) -> bool:
        """Whether the effective precision differs from the requested one."""
        return self.effective != self.requested

    def state(self) -> dict[str, Any]:
        """The plain record (``fallback_reason`` only when there is one)."""
        out = {"requested": self.requested, "effective": self.effective, "device_type": self.device_type,
               "source": self.source}
        if self.fallback_reason is not None:
            out["fallback_reason"] = self.fallback_reason
        return out

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> ResolvedPrecision:
        """Rebuild from :meth:`state`."""
        return cls(state["requested"], state["effective"], state["device_type"], state.get("source", "default"),
                   state.get("fallback_reason"))

    @classmethod
    def coerce(cls, value: Any) -> ResolvedPrecision | None:
        """A record from a record, a mapping (its state) or None."""
        if value is None or isinstance(value, ResolvedPrecision):
            return value
        return cls.from_state(value)
