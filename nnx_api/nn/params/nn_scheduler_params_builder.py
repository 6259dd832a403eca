"""``nnx.nn.params.nn_scheduler_params_builder``: ``NNSchedulerParamsBuilder``."""

from nnx_api.config.builders import NNSchedulerParamsBuilder

__all__ = ["NNSchedulerParamsBuilder"]
