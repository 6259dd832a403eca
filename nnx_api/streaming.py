"""NNx path ``nnx.streaming``: a re-export module (nnx_api/nnx_paths.py).

Streamed prediction, mergeable metrics (``StreamingMetrics``) and bounded-memory validation
(``streaming_eval_step``)."""

from nnx_api.parts.inference import PredictionBatch, PredictionStream, StreamClosedError, concatenate_predictions
from nnx_api.streaming_metrics import MetricMergeError, MetricSnapshot, StreamingMetrics
from nnx_api.training.steps import streaming_eval_step

__all__ = [
    "MetricMergeError", "MetricSnapshot", "PredictionBatch", "PredictionStream", "StreamClosedError",
    "StreamingMetrics", "concatenate_predictions", "streaming_eval_step",
]
