"""Probability-aware prediction and streaming prediction. A re-export module: the code lives in
``nnx_api.parts.inference``; users import these names from ``nnx_api.prediction`` /
``nnx_api.streaming`` (or ``nnx_api``)."""

from nnx_api.parts.inference import (
    PredictionBatch,
    PredictionResult,
    PredictionStream,
    PredictionValidationError,
    ProbabilitySpec,
    StreamClosedError,
    check_fits,
    concatenate,
    concatenate_predictions,
    prediction_from_logits,
    row_ids,
)

__all__ = [
    "PredictionBatch",
    "PredictionResult",
    "PredictionStream",
    "PredictionValidationError",
    "ProbabilitySpec",
    "StreamClosedError",
    "check_fits",
    "concatenate",
    "concatenate_predictions",
    "prediction_from_logits",
    "row_ids",
]
