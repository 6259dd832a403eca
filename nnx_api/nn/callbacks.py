"""NNx path ``nnx.nn.callbacks``: a re-export module (nnx_api/nnx_paths.py).

The callback base and the built-in callbacks. ``_LegacyCallback`` is NNx's private name of the
adapter of a plain ``fn(idps)`` callback: code importing it from here keeps working."""

from nnx_core.monitor_spec import MonitorSpec
from nnx_core.records import IterationDataPoint as NNIterationDataPoint
from nnx_api.callbacks import Callback, CallbackContext, EarlyStopping, LRMonitor, ModelCheckpoint, UpdateEvent
from nnx_api.callbacks import LegacyCallback as _LegacyCallback  # noqa: F401  (NNx's private name)
from nnx_api.callbacks.trackers import TensorBoardCallback, WandbCallback
from nnx_api.config.metrics import MetricSpec
from nnx_api.runs.checkpoint import NNCheckpointTransform
from nnx_api.runs.run import NNCheckpoint

__all__ = [
    "Callback", "CallbackContext", "EarlyStopping", "LRMonitor", "MetricSpec", "ModelCheckpoint", "MonitorSpec",
    "NNCheckpoint", "NNCheckpointTransform", "NNIterationDataPoint", "TensorBoardCallback", "UpdateEvent",
    "WandbCallback",
]
