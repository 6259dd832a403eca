"""NNx path ``nnx.nn.params.nn_params``: a re-export module (nnx_api/nnx_paths.py)."""

from nnx_api.config.params import NNParams

__all__ = ["NNParams"]
