"""NNx path ``nnx.nn.enum.activations``: a re-export module (nnx_api/nnx_paths.py)."""

from nnx_api.config.enums import Activations

__all__ = ["Activations"]
