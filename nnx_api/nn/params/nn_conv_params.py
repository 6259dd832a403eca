"""NNx path ``nnx.nn.params.nn_conv_params``: a re-export module (nnx_api/nnx_paths.py)."""

from nnx_api.config.nets import NNConvParams

__all__ = ["NNConvParams"]
