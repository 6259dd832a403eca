"""``nnx.prediction``: probability-aware prediction (``nnx_api.inference``)."""

from nnx_api.inference import PredictionResult, PredictionValidationError, ProbabilitySpec, prediction_from_logits

__all__ = ["PredictionResult", "PredictionValidationError", "ProbabilitySpec", "prediction_from_logits"]
