"""``nnx.nn.params.nn_optim_params``: ``NNOptimParams``, ``NNParamGroupSpec``."""

from nnx_api.config.params import NNOptimParams, NNParamGroupSpec

__all__ = ["NNOptimParams", "NNParamGroupSpec"]
