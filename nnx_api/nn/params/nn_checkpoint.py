"""``nnx.nn.params.nn_checkpoint``: ``NNCheckpoint``, ``NNCheckpointTransform``."""

from nnx_api.runs.checkpoint import NNCheckpoint, NNCheckpointTransform

__all__ = ["NNCheckpoint", "NNCheckpointTransform"]
