"""``nnx.tasks``: task specs (``nnx_api.config.params``) and their adapters."""

from nnx_core.errors import TaskValidationError
from nnx_adapters.pytorch.tasks import TaskAdapter
from nnx_api.config.params import TaskSpec

__all__ = ["TaskAdapter", "TaskSpec", "TaskValidationError", "task_adapter"]

_LOSS_OF_KIND = {"categorical": "cross_entropy", "multilabel": "binary_cross_entropy", "regression": "mean_squared_error"}


def task_adapter(spec: TaskSpec) -> TaskAdapter:
    """The adapter of a declared ``TaskSpec`` (with the kind's built-in loss): what a model with
    that task uses to validate, mask, decode and score batches (``task_adapter(spec).record(output,
    target, loss=...)``)."""
    if not isinstance(spec, TaskSpec):
        raise TypeError(f"task_adapter needs a TaskSpec, got {type(spec).__name__}")
    return TaskAdapter(spec.kind, _LOSS_OF_KIND[spec.kind], spec.ignore_index, spec.threshold, explicit=True, n=spec.n,
                       spec=spec)
