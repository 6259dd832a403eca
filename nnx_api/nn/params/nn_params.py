"""``nnx.nn.params.nn_params``: ``NNParams``."""

from nnx_api.config.params import NNParams

__all__ = ["NNParams"]
