"""NNx path ``nnx.prediction``: a re-export module (nnx_api/nnx_paths.py).

Probability-aware prediction."""

from nnx_api.parts.inference import PredictionResult, PredictionValidationError, ProbabilitySpec, prediction_from_logits

__all__ = ["PredictionResult", "PredictionValidationError", "ProbabilitySpec", "prediction_from_logits"]
