"""NNx path ``nnx.nn.params.nn_scheduler_params``: a re-export module (nnx_api/nnx_paths.py)."""

from nnx_api.config.optim_params import NNSchedulerParams

__all__ = ["NNSchedulerParams"]
