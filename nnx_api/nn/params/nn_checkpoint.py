"""``nnx.nn.params.nn_checkpoint``: ``NNCheckpoint``, ``NNCheckpointTransform``."""

from nnx_api.runs.checkpoint import NNCheckpointTransform
from nnx_api.runs.run import NNCheckpoint

__all__ = ["NNCheckpoint", "NNCheckpointTransform"]
