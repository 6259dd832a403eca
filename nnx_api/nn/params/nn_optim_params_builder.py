"""NNx path ``nnx.nn.params.nn_optim_params_builder``: a re-export module (nnx_api/nnx_paths.py)."""

from nnx_api.config.builders import NNOptimParamsBuilder

__all__ = ["NNOptimParamsBuilder"]
