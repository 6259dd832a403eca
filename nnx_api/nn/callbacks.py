"""``nnx.nn.callbacks``: the callback base and the built-in callbacks."""

from nnx_core.monitor import MonitorSpec
from nnx_core.records import IterationDataPoint as NNIterationDataPoint
from nnx_api.callbacks import Callback, CallbackContext, EarlyStopping, LegacyCallback, LRMonitor, ModelCheckpoint, UpdateEvent
from nnx_api.callbacks.trackers import TensorBoardCallback, WandbCallback
from nnx_api.config.metrics import MetricSpec
from nnx_api.runs.checkpoint import NNCheckpointTransform
from nnx_api.runs.run import NNCheckpoint

_LegacyCallback = LegacyCallback
"""NNx's private name of the adapter of a plain ``fn(idps)`` callback (called at each epoch's end
with the run's records so far); code importing it from ``nnx.nn.callbacks`` keeps working."""

__all__ = ["Callback", "CallbackContext", "EarlyStopping", "LRMonitor", "MetricSpec", "ModelCheckpoint", "MonitorSpec", "NNCheckpoint", "NNCheckpointTransform", "NNIterationDataPoint", "TensorBoardCallback", "UpdateEvent", "WandbCallback"]
