"""``ResolvedPrecision``: the precision a model runs at, as resolved on this machine.

A ``PrecisionPolicy`` (or NNx's legacy ``mixed_precision`` flag) *requests* a precision; the
device decides what is *effective*: fp16 needs CUDA, bf16 a CPU or a CUDA device with native
bf16 (compute capability 8.0+). A request the device cannot honour falls back to fp32 only when
the policy says so, and the record keeps why. It is written to the run's ``metadata.yaml``
(``precision``), never part of the run id.

A run narrows the record to the surfaces it applied the precision to (``covers``, one of
``SURFACES``): the built-in step and objectives, ``evaluate`` and prediction. A step function is
called under the run's autocast, but what it does inside is its own, so no record claims it.

What needs torch — the autocast dtype and context, a ``GradScaler``, TF32 as torch is set — is
asked of the runtime an adapter registers (``register_precision_runtime``); the core decides
only which mode, device and surfaces.

>>> ResolvedPrecision("fp16", "fp32", "cpu", "mixed_precision", "fp16 needs CUDA").fell_back
True
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import attrs

from nnx_core.validate import check_choice

MODES = ("fp32", "fp16", "bf16")
SOURCES = ("default", "policy", "mixed_precision")
AUTOCAST_DTYPES: Mapping[str, str] = {"fp16": "float16", "bf16": "bfloat16"}
"""The dtype name a reduced mode autocasts to (fp32 runs without autocast)."""

TRAIN = "NNModel.train (default step and objectives)"
"""The surface of ``NNModel.train``'s built-in step and objectives."""
TRAINER_OBJECTIVE = "Trainer.train(objective=...)"
"""The surface of a ``Trainer`` objective."""
EVALUATE = "evaluate()"
"""The surface of validation and ``evaluate``."""
PREDICT = "predict() / predict_proba()"
"""The surface of prediction."""
SURFACES: tuple[str, ...] = (TRAIN, TRAINER_OBJECTIVE, EVALUATE, PREDICT)
"""Every surface a precision applies to, in the order a record lists them."""
NOT_COVERED: tuple[str, ...] = ("nnx.lr_finder", "nnx.diffusion.sampling", "generation")
"""What no precision record ever covers: those run in full precision whatever the policy."""
TF32_SETTINGS: tuple[str, ...] = ("cuda_matmul", "cudnn_conv", "cudnn_rnn")
"""The TF32 switches a record reports (read, never set)."""


def run_surfaces(*, trainer: bool, step_function: bool) -> tuple[str, ...]:
    """The surfaces a run applies its precision to: the built-in step and objectives of
    ``NNModel.train`` (``trainer``: a ``Trainer`` objective) unless a step function trains, and
    always ``evaluate`` and prediction."""
    trained = () if step_function else ((TRAINER_OBJECTIVE,) if trainer else (TRAIN,))
    return (*trained, EVALUATE, PREDICT)


class PrecisionRuntime(Protocol):
    """What an adapter provides for a resolved precision (``nnx_adapters.pytorch.precision``)."""

    def dtype(self, name: str) -> Any:
        """The framework dtype named ``name`` (``"bfloat16"``, ``"float16"``)."""
        ...

    def autocast(self, device_type: str, name: str) -> contextlib.AbstractContextManager[Any]:
        """An autocast context to the dtype ``name`` on ``device_type``."""
        ...

    def scaler(self, device_type: str) -> Any:
        """A fresh gradient scaler for ``device_type``."""
        ...

    def output(self, tensor: Any) -> Any:
        """``tensor`` in full precision when autocast made it half precision, else as it is."""
        ...

    def tf32(self) -> Mapping[str, bool | None]:
        """The ``TF32_SETTINGS`` as the framework is set now (None: unreadable)."""
        ...


_runtimes: list[PrecisionRuntime] = []


def register_precision_runtime(runtime: PrecisionRuntime) -> None:
    """Give :class:`ResolvedPrecision` the adapter that builds dtypes, autocast contexts and
    scalers (the last one registered wins)."""
    _runtimes.append(runtime)


def _runtime(what: str) -> PrecisionRuntime:
    if not _runtimes:
        raise RuntimeError(f"ResolvedPrecision.{what} needs a precision runtime: import nnx_adapters.pytorch.precision")
    return _runtimes[-1]


def _mode(_instance: Any, attribute: Any, value: Any) -> None:
    check_choice(f"ResolvedPrecision.{attribute.name}", value, MODES)


def _surfaces(value: Sequence[str] | None) -> tuple[str, ...] | None:
    return None if value is None else tuple(str(item) for item in value)


@attrs.frozen
class ResolvedPrecision:
    """``requested`` and ``effective`` mode, the ``device_type`` it was resolved for, its
    ``source`` (``"policy"``, NNx's ``"mixed_precision"`` flag, or ``"default"``), after a
    fallback the ``fallback_reason``, and the surfaces a run applied it to (``covers``; None
    until a run scopes it: every surface)."""

    requested: str = attrs.field(validator=_mode)
    effective: str = attrs.field(validator=_mode)
    device_type: str
    source: str = attrs.field(default="default", validator=lambda _i, _a, v: check_choice("ResolvedPrecision.source", v, SOURCES))
    fallback_reason: str | None = None
    covers: tuple[str, ...] | None = attrs.field(default=None, converter=_surfaces)

    @property
    def fell_back(self) -> bool:
        """Whether the effective precision differs from the requested one."""
        return self.effective != self.requested

    @property
    def reduced(self) -> bool:
        """Whether anything runs below full precision (the effective mode is not fp32)."""
        return self.effective != "fp32"

    @property
    def uses_scaler(self) -> bool:
        """Whether the update goes through a gradient scaler (fp16)."""
        return self.effective == "fp16"

    @property
    def applies_to(self) -> tuple[str, ...]:
        """The surfaces this precision applies to: ``covers``, else every surface."""
        return SURFACES if self.covers is None else self.covers

    def scoped(self, covers: Sequence[str]) -> ResolvedPrecision:
        """This record, applying to ``covers`` only (a run's routes)."""
        return attrs.evolve(self, covers=covers)

    @property
    def autocast_dtype(self) -> Any:
        """The dtype the forward autocasts to (``torch.bfloat16`` / ``torch.float16``); None in fp32."""
        name = AUTOCAST_DTYPES.get(self.effective)
        return None if name is None else _runtime("autocast_dtype").dtype(name)

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """The forward's context: autocast to the effective dtype, or nothing in fp32."""
        name = AUTOCAST_DTYPES.get(self.effective)
        return contextlib.nullcontext() if name is None else _runtime("autocast").autocast(self.device_type, name)

    def build_scaler(self) -> Any:
        """A fresh gradient scaler for fp16 (``torch.amp.GradScaler``); None otherwise."""
        return _runtime("build_scaler").scaler(self.device_type) if self.uses_scaler else None

    def output(self, tensor: Any) -> Any:
        """``tensor`` as a caller sees it: a half-precision output of a reduced forward in float32
        (the full-precision schema); anything else as it is."""
        return tensor if not self.reduced else _runtime("output").output(tensor)

    @property
    def tf32(self) -> dict[str, bool | None]:
        """TF32 as the framework is set when read (``TF32_SETTINGS``; None: unreadable or no
        runtime). Reported beside the precision, never set by it."""
        read = _runtimes[-1].tf32() if _runtimes else {}
        return {name: read.get(name) for name in TF32_SETTINGS}

    def record(self) -> dict[str, Any]:
        """The inspection mapping: requested, effective, source, device, fallback reason, the
        autocast dtype's name, whether a scaler runs, TF32 (apart), what it covers and what not."""
        applies = self.applies_to
        return {
            "requested": self.requested, "effective": self.effective, "source": self.source,
            "device": self.device_type, "fallback_reason": self.fallback_reason,
            "autocast_dtype": AUTOCAST_DTYPES.get(self.effective), "grad_scaler": self.uses_scaler,
            "tf32": self.tf32, "covers": list(applies),
            "not_covered": [item for item in SURFACES if item not in applies] + list(NOT_COVERED),
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> ResolvedPrecision:
        """Rebuild from :meth:`record` (TF32 is read afresh, never stored)."""
        return cls(record["requested"], record["effective"], record["device"], record.get("source", "default"),
                   record.get("fallback_reason"), record.get("covers"))

    def state(self) -> dict[str, Any]:
        """The plain record (``fallback_reason`` only when there is one, ``covers`` only once a
        run scoped it)."""
        out: dict[str, Any] = {"requested": self.requested, "effective": self.effective,
                               "device_type": self.device_type, "source": self.source}
        if self.fallback_reason is not None:
            out["fallback_reason"] = self.fallback_reason
        if self.covers is not None:
            out["covers"] = list(self.covers)
        return out

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> ResolvedPrecision:
        """Rebuild from :meth:`state`."""
        return cls(state["requested"], state["effective"], state["device_type"], state.get("source", "default"),
                   state.get("fallback_reason"), state.get("covers"))

    @classmethod
    def coerce(cls, value: Any) -> ResolvedPrecision | None:
        """A record from a record, a mapping (its state) or None."""
        if value is None or isinstance(value, ResolvedPrecision):
            return value
        return cls.from_state(value)
