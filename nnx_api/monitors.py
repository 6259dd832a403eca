"""``nnx.monitors``: named metrics, the monitor, its tracker and its record."""

from nnx_core.errors import MonitorUnavailableError
from nnx_core.monitor import MonitorDecision, MonitorSpec, MonitorTracker, register_direction_lookup
from nnx_core.records import MonitorRecord
from nnx_adapters.pytorch.metrics import metric_mode, register_metric
from nnx_api.config.metrics import MetricSpec

register_direction_lookup(metric_mode)  # MonitorSpec.resolve: a declared metric's direction from the registry

__all__ = [
    "MetricSpec", "MonitorDecision", "MonitorRecord", "MonitorSpec", "MonitorTracker", "MonitorUnavailableError",
    "register_metric",
]
