"""NNx path ``nnx.nn.enum.nets``: a re-export module (nnx_api/nnx_paths.py)."""

from nnx_api.config.enums import Nets

__all__ = ["Nets"]
