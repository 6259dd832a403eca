"""NNx path ``nnx.nn.params.nn_checkpoint``: a re-export module (nnx_api/nnx_paths.py)."""

from nnx_core.errors import ResumePointError
from nnx_api.runs.checkpoint import NNCheckpointTransform
from nnx_api.runs.run import NNCheckpoint

__all__ = ["NNCheckpoint", "NNCheckpointTransform", "ResumePointError"]
