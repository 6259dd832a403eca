"""``nnx.prediction``: probability-aware prediction (``nnx_api.parts.inference``)."""

from nnx_api.parts.inference import PredictionResult, PredictionValidationError, ProbabilitySpec, prediction_from_logits

__all__ = ["PredictionResult", "PredictionValidationError", "ProbabilitySpec", "prediction_from_logits"]
