"""``nnx.nn.params.nn_evaluation_data_point``: ``NNEvaluationDataPoint``."""

from nnx_core.records import EvaluationDataPoint as NNEvaluationDataPoint

__all__ = ["NNEvaluationDataPoint"]
