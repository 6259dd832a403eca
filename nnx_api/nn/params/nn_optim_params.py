"""NNx path ``nnx.nn.params.nn_optim_params``: a re-export module (nnx_api/nnx_paths.py)."""

from nnx_api.config.optim_params import NNOptimParams, NNParamGroupSpec

__all__ = ["NNOptimParams", "NNParamGroupSpec"]
