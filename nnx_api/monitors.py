"""``nnx.monitors``: named metrics, the monitor and its record."""

from nnx_core.errors import MonitorUnavailableError
from nnx_core.monitor import MonitorDecision, MonitorSpec
from nnx_core.records import MonitorRecord
from nnx_adapters.pytorch.metrics import register_metric
from nnx_api.config.metrics import MetricSpec

__all__ = ["MetricSpec", "MonitorDecision", "MonitorRecord", "MonitorSpec", "MonitorUnavailableError", "register_metric"]
