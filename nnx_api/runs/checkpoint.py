"""``NNCheckpointTransform``: a recorded topology-change recipe, and the kind of a standalone
``NNCheckpoint.to_file`` file (its format: ``nnx_api.runs.standalone``). ``NNCheckpoint`` itself
lives beside ``NNRun`` (``nnx_api.runs.run``): each builds the other (``NNRun.checkpoints()``,
``NNCheckpoint.load(run)``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

STANDALONE_KIND = "nnx.checkpoint"


@attrs.frozen
class NNCheckpointTransform(Mapping[str, Any]):
    """A recipe for a topology change a callback made at ``on_train_end`` (its
    ``checkpoint_transforms()``), recorded with the checkpoint: ``name``, ``version``, ``options``.
    It is a read-only mapping of those three keys, which is how the checkpoint stores it."""

    name: str
    version: int = 1
    options: Mapping[str, Any] = attrs.field(factory=dict)

    def __getitem__(self, key: str) -> Any:
        if key not in ("name", "version", "options"):
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Any:
        return iter(("name", "version", "options"))

    def __len__(self) -> int:
        return 3

    def state(self) -> dict[str, Any]:
        """``{"name", "version", "options"}``."""
        return {"name": self.name, "version": self.version, "options": dict(self.options)}

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> NNCheckpointTransform:
        """Rebuild from :meth:`state` (``version`` / ``options`` may be absent)."""
        return cls(str(state["name"]), int(state.get("version", 1)), dict(state.get("options") or {}))


def transforms_of(states: Any) -> tuple[NNCheckpointTransform, ...]:
    """The recorded transforms of a checkpoint payload (their states), as ``NNCheckpointTransform``s."""
    return tuple(NNCheckpointTransform.from_state(t) for t in states or ())


__all__ = ["NNCheckpointTransform", "transforms_of"]
