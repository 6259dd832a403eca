"""``nnx.streaming``: streamed prediction (``nnx_api.parts.inference``) and bounded-memory validation
(``streaming_eval_step``)."""

from nnx_api.parts.inference import PredictionBatch, PredictionStream, StreamClosedError, concatenate_predictions
from nnx_api.training.steps import streaming_eval_step

__all__ = ["PredictionBatch", "PredictionStream", "StreamClosedError", "concatenate_predictions", "streaming_eval_step"]
