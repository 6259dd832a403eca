"""``nnx.nn.params.nn_iteration_data_point``: ``NNIterationDataPoint``."""

from nnx_core.records import IterationDataPoint as NNIterationDataPoint

__all__ = ["NNIterationDataPoint"]
