"""``nnx.nn.params.nn_scheduler_params``: ``NNSchedulerParams``."""

from nnx_api.config.params import NNSchedulerParams

__all__ = ["NNSchedulerParams"]
