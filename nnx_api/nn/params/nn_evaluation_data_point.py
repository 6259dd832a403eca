"""NNx path ``nnx.nn.params.nn_evaluation_data_point``: a re-export module (nnx_api/nnx_paths.py)."""

from nnx_core.records import EvaluationDataPoint as NNEvaluationDataPoint

__all__ = ["NNEvaluationDataPoint"]
