"""``Checkpoint``: a committed checkpoint tag of a run — its manifest, and lazy, verified access to
the payload blob it names (decoded with the safe loader only: ``nnx_api.runs.payload``).
``NNRun.checkpoint(tag)`` gives one; NNx's handle of it is ``NNCheckpoint.of(checkpoint)``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from nnx_core.commit import TagManifest
from nnx_api.runs.payload import Payload, decode_mapping, read_payload

if TYPE_CHECKING:
    import torch


@attrs.frozen(kw_only=True)
class Checkpoint:
    """A committed checkpoint tag of a run (``run``: the ``NNRun`` it belongs to): its manifest
    and lazy, verified access to its state."""

    run: Any
    manifest: TagManifest

    @property
    def tag(self) -> str:
        """The tag name (``last``, ``best``, ``q1``, ...)."""
        return self.manifest.tag

    @property
    def epoch(self) -> int:
        """The epoch this checkpoint holds."""
        return self.manifest.epoch

    def payload(self, *, verify: bool = True) -> dict[str, Any]:
        """The decoded payload (weights, optimizer, RNG, components), SHA-256-verified first, as
        the plain mapping it was written as (``contents`` reads it)."""
        data = self.run.files().read_blob(self.manifest.blobs["state"], verify=verify)
        return decode_mapping(data, where=self._where)

    def contents(self, *, verify: bool = True) -> Payload:
        """The payload read (``nnx_api.runs.payload``): a ``CheckpointPayload``, or a
        ``WeightsPayload`` for a weights-only tag; ``CorruptRunError`` names a malformed one."""
        return read_payload(self.payload(verify=verify), self._where)

    @property
    def _where(self) -> str:
        return f"run {self.run.id} tag {self.tag!r}"

    def weights(self) -> dict[str, torch.Tensor]:
        """The model's state dict."""
        return self.contents().weights  # type: ignore[return-value]  # the state dict as saved


__all__ = ["Checkpoint"]
