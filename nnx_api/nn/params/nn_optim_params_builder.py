"""``nnx.nn.params.nn_optim_params_builder``: ``NNOptimParamsBuilder``."""

from nnx_api.config.builders import NNOptimParamsBuilder

__all__ = ["NNOptimParamsBuilder"]
