"""NNx path ``nnx.monitors``: a re-export module (nnx_api/nnx_paths.py).

Named metrics, the monitor, its tracker and its record. Importing the metric registry
(``nnx_adapters.pytorch.metrics``) is what teaches ``MonitorSpec.resolve`` a declared metric's
direction; this module registers nothing."""

from nnx_core.errors import MonitorUnavailableError
from nnx_core.monitor import MonitorDecision, MonitorTracker
from nnx_core.monitor_spec import MonitorSpec
from nnx_core.records import MonitorRecord
from nnx_adapters.pytorch.metrics import register_metric, registered_metrics, unregister_metric
from nnx_api.config.metrics import MetricSpec

__all__ = [
    "MetricSpec", "MonitorDecision", "MonitorRecord", "MonitorSpec", "MonitorTracker", "MonitorUnavailableError",
    "register_metric", "registered_metrics", "unregister_metric",
]
