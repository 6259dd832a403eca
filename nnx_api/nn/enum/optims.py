"""NNx path ``nnx.nn.enum.optims``: a re-export module (nnx_api/nnx_paths.py)."""

from nnx_api.config.enums import Optims

__all__ = ["Optims"]
