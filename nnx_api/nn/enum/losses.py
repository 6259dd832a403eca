"""NNx path ``nnx.nn.enum.losses``: a re-export module (nnx_api/nnx_paths.py)."""

from nnx_api.config.enums import Losses

__all__ = ["Losses"]
