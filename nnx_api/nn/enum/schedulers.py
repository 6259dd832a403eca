"""NNx path ``nnx.nn.enum.schedulers``: a re-export module (nnx_api/nnx_paths.py)."""

from nnx_api.config.enums import Schedulers

__all__ = ["Schedulers"]
