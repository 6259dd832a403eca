"""``CompileRecord``: what ``train(compile=CompileSpec(...))`` did with the forward, on this attempt.

The status moves ``pending`` (wrapped, nothing compiled yet) → ``compiled`` (every compiled call so
far succeeded), or → ``eager`` (compilation failed and ``on_failure="eager"`` fell back to the eager
forward; ``reason`` says why) or ``failed`` (it failed and ``on_failure="error"`` stopped the run).
``capture`` names the forwards compiled (``"train_forward"``, ``"val_forward"``) and
``graph_breaks`` counts the graph breaks the compiler reported while compiling them. The record
lives in the run's ``metadata.yaml``, its checkpoints' payloads and ``attempt.json`` (each only
when compilation was asked for), never in the run id.

>>> CompileRecord("eager", "inductor", reason="no C++ compiler").state()["status"]
'eager'
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from nnx_core.validate import check_choice

PENDING, COMPILED, EAGER, FAILED = "pending", "compiled", "eager", "failed"
STATUSES = (PENDING, COMPILED, EAGER, FAILED)


@attrs.frozen
class CompileRecord:
    """One attempt's compilation: ``status`` (module docstring), the ``backend`` and options
    asked for (``mode``, ``fullgraph``, ``dynamic``), the forwards in ``capture``, the
    ``graph_breaks`` counted, and ``reason`` (the error) after a fallback or a failure."""

    status: str = attrs.field(validator=lambda _i, _a, v: check_choice("CompileRecord.status", v, STATUSES))
    backend: str
    capture: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    graph_breaks: int = 0
    mode: str | None = None
    fullgraph: bool = False
    dynamic: bool | None = None
    reason: str | None = None

    def state(self) -> dict[str, Any]:
        """The plain, YAML-safe record (``reason`` only when there is one)."""
        out = {"status": self.status, "backend": self.backend, "capture": list(self.capture),
               "graph_breaks": self.graph_breaks, "mode": self.mode, "fullgraph": self.fullgraph, "dynamic": self.dynamic}
        if self.reason is not None:
            out["reason"] = self.reason
        return out

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> CompileRecord:
        """Rebuild from :meth:`state`."""
        return cls(
            state["status"], state["backend"], tuple(state.get("capture", ())), int(state.get("graph_breaks", 0)),
            state.get("mode"), bool(state.get("fullgraph", False)), state.get("dynamic"), state.get("reason"),
        )

    @classmethod
    def coerce(cls, value: Any) -> CompileRecord | None:
        """A record from a record, a mapping (its state) or None."""
        if value is None or isinstance(value, CompileRecord):
            return value
        return cls.from_state(value)
