"""The checks a training entry point makes before anything is written.

Every refusal here is a typed ``NNxError`` naming the field or the fix: the data (a loader, not
empty), the update owner (exactly one: a step function or an objective, each of the right kind),
the precision a step supports, trainable parameters, metrics and monitor (a monitor must name a
value the run computes), ``EarlyStopping`` (one comparator per run), and an objective's own
``check_run``. ``NNModel.train``, ``Trainer.train`` and ``DDP()`` runs make the same checks.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

from nnx_core.errors import ParamsError, PrecisionUnsupportedError, TrainingInputError, UpdateOwnerError
from nnx_adapters.pytorch.metrics import resolve
from nnx_api.callbacks import EarlyStopping
from nnx_api.config.metrics import monitor_problems
from nnx_api.training.objectives import check_update_owner


def check_run(
    model: Any,
    params: Any,
    callbacks: Sequence[Any],
    *,
    params_type: type,
    optimizers: Sequence[str],
    step_fn: Any,
    step_name: str,
    objective: Any,
    needs_owner: bool = False,
) -> None:
    """Refuse a run that cannot train (see the module docstring); nothing has been written."""
    name = params_type.__name__
    if not isinstance(params, params_type):
        raise ParamsError("params", f"must be {name}, got {type(params).__name__}")
    check_update_owner(step_fn, objective, step_name=step_name)
    if needs_owner and step_fn is None and objective is None:
        raise UpdateOwnerError(
            f"Trainer.train needs an update owner: {step_name}=<fn(ctx) -> EvaluationDataPoint> or "
            "objective=<fn(ctx) -> ObjectiveResult>; there is no default trainer step"
        )
    if step_fn is not None and not callable(step_fn):
        raise UpdateOwnerError(f"{step_name} must be callable, got {type(step_fn).__name__}")
    if getattr(step_fn, "nnx_full_precision_only", False) and model.precision != "fp32":
        raise PrecisionUnsupportedError(
            f"{getattr(step_fn, '__name__', 'this step')} is full-precision only, but the run resolves to "
            f"{model.precision}; use PrecisionPolicy('fp32')"
        )
    if params.train_loader is None:
        raise TrainingInputError(f"{name}.train_loader is missing; pass train_loader=<DataLoader of (x, y)>")
    with contextlib.suppress(TypeError):  # no len(): an empty loader is caught in the first epoch
        if len(params.train_loader) == 0:
            raise TrainingInputError("train_loader is empty; give it at least one batch")
    if not any(p.requires_grad for p in model.net.parameters()):
        raise ParamsError("model", "no parameter requires grad; did you freeze('*')? Unfreeze the layers to train")
    kind = model.params.resolved_task.kind
    problems = resolve(params.metrics, kind, model.head.width)
    if problems:
        raise ParamsError(f"{name}.metrics", "; ".join(problems))
    problems = monitor_problems(params.monitor, params.metrics, kind, params.val_loader is not None)
    if problems:
        raise ParamsError(f"{name}.monitor", "; ".join(problems))
    for cb in callbacks:
        if isinstance(cb, EarlyStopping):
            cb.check_run(params.monitor)
    if objective is not None:
        accumulate = {n: o.accumulate_grad_batches for n, o in getattr(params, "optims", {}).items()}
        if len(set(accumulate.values())) > 1:
            raise ParamsError(
                f"{name}.optims",
                f"an objective commits every optimizer once per window, so accumulate_grad_batches must agree: {accumulate}",
            )
        check = getattr(objective, "check_run", None)
        if check is not None:
            check(model, optimizers=tuple(optimizers), callbacks=tuple(callbacks))
