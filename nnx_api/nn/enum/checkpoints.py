"""NNx path ``nnx.nn.enum.checkpoints``: a re-export module (nnx_api/nnx_paths.py)."""

from nnx_api.config.enums import Checkpoints, phase_tag

__all__ = ["Checkpoints", "phase_tag"]
