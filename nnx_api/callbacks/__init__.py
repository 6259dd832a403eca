"""Callbacks: the hook base class and context (``base``), the built-in callbacks (``builtin``),
TensorBoard and W&B trackers (``trackers``, optional extras, imported on first use)."""

from nnx_api.callbacks.base import Callback, CallbackContext, LegacyCallback, UpdateEvent
from nnx_api.callbacks.builtin import EarlyStopping, LRMonitor, ModelCheckpoint, normalize_callbacks

__all__ = [
    "Callback", "CallbackContext", "EarlyStopping", "LRMonitor", "LegacyCallback", "ModelCheckpoint", "UpdateEvent",
    "normalize_callbacks",
]
