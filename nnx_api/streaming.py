"""``nnx.streaming``: streamed prediction (``nnx_api.inference``)."""

from nnx_api.inference import PredictionBatch, PredictionStream, StreamClosedError, concatenate_predictions

__all__ = ["PredictionBatch", "PredictionStream", "StreamClosedError", "concatenate_predictions"]
