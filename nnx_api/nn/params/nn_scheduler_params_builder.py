"""NNx path ``nnx.nn.params.nn_scheduler_params_builder``: a re-export module (nnx_api/nnx_paths.py)."""

from nnx_api.config.builders import NNSchedulerParamsBuilder

__all__ = ["NNSchedulerParamsBuilder"]
