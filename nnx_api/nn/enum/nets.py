"""NNx path ``nnx.nn.enum.nets``: a re-export of ``nnx_api.config.enums`` (nnx_api/nnx_paths.py)."""

from nnx_api.config.enums import Nets

__all__ = ["Nets"]
