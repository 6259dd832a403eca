"""``nnx.nn.params.nn_conv_params``: ``NNConvParams``."""

from nnx_api.config.nets import NNConvParams

__all__ = ["NNConvParams"]
