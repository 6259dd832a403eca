"""``nnx.tasks``: task specs (``nnx_api.config.params``) and their adapters."""

from nnx_core.errors import TaskValidationError
from nnx_adapters.pytorch.tasks import TaskAdapter
from nnx_api.config.params import TaskSpec

__all__ = ["TaskAdapter", "TaskSpec", "TaskValidationError"]
