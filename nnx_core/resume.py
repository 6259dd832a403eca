"""``ResumeStatus``: how a training session started, recorded on the run and in metadata.yaml.

``mode`` is ``"fresh"`` (no resume), ``"stateful"`` (weights, optimizer, schedules, RNG streams
and every component restored) or ``"weights_only"`` (weights only: the checkpoint held no training
state, or ``resume_mode="weights_only"`` asked for it). The source run, tag and epoch say where
it came from; ``restored_components`` / ``fresh_components`` name the checkpointed components
that were restored or kept their fresh state.

It reads as NNx's attributes (``status.mode``, ``status.source_run_id``, ...) and as the mapping
metadata.yaml holds (``status["source_epoch"]``, ``dict(status)``); it is truthy only when the
session resumed, so ``if run.resume_status:`` asks "was this resumed?".
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import attrs

from nnx_core.validate import check_choice

MODES = ("fresh", "stateful", "weights_only")


def _names(value: Any) -> tuple[str, ...]:
    return tuple(value or ())


@attrs.frozen(kw_only=True)
class ResumeStatus(Mapping[str, Any]):
    """How a training session started (module docstring)."""

    mode: str = attrs.field(default="fresh", validator=lambda _i, _a, v: check_choice("ResumeStatus.mode", v, MODES))
    source_run_id: str | None = None
    source_checkpoint: str | None = None
    source_epoch: int | None = None
    restored_components: tuple[str, ...] = attrs.field(default=(), converter=_names)
    fresh_components: tuple[str, ...] = attrs.field(default=(), converter=_names)

    def state(self) -> dict[str, Any]:
        """The plain record (what metadata.yaml's ``resume`` holds); an unknown epoch is left out."""
        out: dict[str, Any] = {
            "mode": self.mode,
            "source_run_id": self.source_run_id,
            "source_checkpoint": self.source_checkpoint,
            "restored_components": list(self.restored_components),
            "fresh_components": list(self.fresh_components),
        }
        if self.source_epoch is not None:
            out["source_epoch"] = self.source_epoch
        return out

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> ResumeStatus:
        """Rebuild from :meth:`state` (records written before it held ``source_run`` read too)."""
        return cls(
            mode=state.get("mode", "fresh"),
            source_run_id=state.get("source_run_id", state.get("source_run")),
            source_checkpoint=state.get("source_checkpoint"),
            source_epoch=state.get("source_epoch"),
            restored_components=state.get("restored_components"),
            fresh_components=state.get("fresh_components"),
        )

    @classmethod
    def coerce(cls, value: Any) -> ResumeStatus | None:
        """A status from a status, a mapping (its state) or None (None stays None)."""
        if value is None or isinstance(value, ResumeStatus):
            return value
        return cls.from_state(value)

    def __getitem__(self, key: str) -> Any:
        return self.state()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.state())

    def __len__(self) -> int:
        return len(self.state())

    def __bool__(self) -> bool:
        return self.mode != "fresh"


__all__ = ["MODES", "ResumeStatus"]
