"""The checks a training entry point makes before anything is written.

Every refusal here is a typed ``NNxError`` naming the field or the fix: the data (a loader, not
empty), the update owner (exactly one: a step function or an objective, each of the right kind),
the precision a step supports, trainable parameters, metrics and monitor (a monitor must name a
value the run computes), ``EarlyStopping`` (one comparator per run), an objective's own ``check_run``, and the callbacks
as given (``check_callbacks``: a list of instances, never a class). ``NNModel.train``,
``Trainer.train`` and ``DDP()`` runs make the same checks.

``check_first_batches`` translates the first-forward mistakes of an ``NNModel`` run on the first
batch of each loader, before admission (no run folder, no lease file): batches that are not
``(inputs, targets)``, NumPy or float64 inputs, a feature width other than ``NNParams.input_dim``,
a forward that fails, an output width other than the head's, targets of the wrong dtype or shape,
class labels ≥ the output width or negative without ``ignore_index``. The probe forward runs under
``torch.no_grad()`` in eval mode (no BatchNorm statistics move) with every RNG stream put back, so
training is bit-for-bit what it is without it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from nnx_core.errors import ParamsError, PrecisionUnsupportedError, TrainingInputError, UpdateOwnerError
from nnx_adapters.pytorch.batches import forward, net_output, restored_modes, split_batch, to_device
from nnx_adapters.pytorch.metrics import resolve
from nnx_api.callbacks import Callback, EarlyStopping
from nnx_api.config.metrics import monitor_problems
from nnx_api.config.nets import NNConvParams
from nnx_api.training.fingerprint import structure, untouched_rng
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
    for where in ("train_loader", "val_loader"):
        with contextlib.suppress(TypeError):  # no len(): the first batch tells (check_first_batches)
            if getattr(params, where) is not None and len(getattr(params, where)) == 0:
                raise TrainingInputError(f"{where} is empty; give it at least one batch")
    check_task(model)
    if not any(p.requires_grad for p in model.net.parameters()):
        raise ParamsError("model", "no parameter requires grad; did you freeze('*')? Unfreeze the layers to train")
    kind = model.params.resolved_task.kind
    problems = resolve(params.metrics, kind, model.head.width)
    if problems:
        raise ParamsError(f"{name}.metrics", "; ".join(problems))
    problems = monitor_problems(params.monitor, params.metrics, kind, params.val_loader is not None)
    default_step = step_fn is None and objective is None and not needs_owner
    if params.monitor is not None and (problem := params.monitor.step_problem(default_step=default_step)):
        problems.append(problem)
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


def check_callbacks(callbacks: Any) -> Sequence[Any]:
    """``callbacks`` as a list of instances (or plain functions ``fn(idps)``): a single callback,
    a class instead of an instance, and other non-callbacks are refused with what to write."""
    if callbacks is None:
        return ()
    if isinstance(callbacks, (Callback, type)) or not isinstance(callbacks, (list, tuple)):
        one = callbacks if not isinstance(callbacks, type) else None
        hint = f"[{type(one).__name__}(...)]" if isinstance(one, Callback) else "[EarlyStopping(...), ...]"
        raise ParamsError("callbacks", f"must be a list of callbacks, e.g. callbacks={hint}; got {_kind(callbacks)}")
    for i, cb in enumerate(callbacks):
        if isinstance(cb, type):
            raise ParamsError(
                f"callbacks[{i}]", f"is the class {cb.__name__}, not an instance; write {cb.__name__}(...) (with its arguments)"
            )
        if not isinstance(cb, Callback) and not callable(cb):
            raise ParamsError(f"callbacks[{i}]", f"{cb!r} is neither a Callback instance nor a function fn(idps)")
    return callbacks


def _kind(value: Any) -> str:
    return f"the class {value.__name__}" if isinstance(value, type) else type(value).__name__


def check_task(model: Any) -> None:
    """The task agrees with the net: ``TaskSpec(n=)`` and ``labels`` with the output width."""
    task, net = model.params.task, model.net_params
    if task is None:
        return
    if task.n is not None and net is not None and task.n != net.output_dim:
        raise ParamsError(
            "NNModelParams.task.n", f"is {task.n} but NNParams.output_dim is {net.output_dim}; make them equal (or leave n unset)"
        )
    width = model.head.width
    if task.labels is not None and len(task.labels) != width and not (task.kind == "multilabel" and width == 1):
        raise ParamsError("NNModelParams.task.labels", f"has {len(task.labels)} labels for {width} outputs; give one per output")


def check_first_batches(model: Any, firsts: Mapping[str, Any], *, train_step: bool, eval_step: bool) -> None:
    """The first-forward checks (module docstring) on each loader's first batch that the built-in
    training step (``train_loader``) or validation (``val_loader``) will consume; a loader that
    yields nothing is refused whatever consumes it."""
    wanted = {"train_loader": train_step, "val_loader": eval_step}
    for where, batch in firsts.items():
        if batch is None:
            raise TrainingInputError(f"{where} yielded no batches; give it at least one batch")
        if wanted.get(where):
            _check_batch(model, batch, where)


def batch_problem(model: Any, batch: Any, at: str) -> TrainingInputError | None:
    """What is wrong with a later batch the built-in step could not train on (``at`` names it:
    "train_loader's batch 3 of epoch 1"): the first batch's checks, run only after the step
    failed, so a good batch costs nothing; None when they find nothing."""
    try:
        _check_batch(model, batch, at.partition("'s ")[0], at)
    except TrainingInputError as exc:
        return exc
    return None


def _check_batch(model: Any, batch: Any, where: str, at: str | None = None) -> None:
    at = at or f"{where}'s first batch"
    adapter = getattr(model, "batch_adapter", None)
    if adapter is not None:  # the adapter says what the net takes
        args, kwargs, target = adapter.split(batch)
        inputs: Any = [*args, *kwargs.values()]
    else:
        inputs, target = _split(batch, at)
    for name, value in (("inputs", inputs), ("targets", target)):
        if _holds(value, np.ndarray):
            raise TrainingInputError(
                f"{at} holds NumPy arrays as {name}; yield tensors: torch.from_numpy(array) (and .float() for "
                "float64 features), or DataLoader(TensorDataset(torch.from_numpy(x).float(), torch.from_numpy(y)))"
            )
    weights = next((p for p in model.net.parameters() if p.dtype.is_floating_point), None)
    for t in _tensors(inputs):
        if weights is not None and t.dtype.is_floating_point and t.dtype != weights.dtype and model.precision == "fp32":
            raise TrainingInputError(
                f"{at} holds {t.dtype} inputs but the model's parameters are {weights.dtype}; convert the features "
                "with x.float() (e.g. TensorDataset(x.float(), y))"
            )
    net = model.net_params
    if net is not None and isinstance(inputs, torch.Tensor):
        # a ConvNN's input_dim is in_channels * side * side: (B, C, H, W) images (or flat rows) fit it
        image = isinstance(net, NNConvParams) and inputs.dim() > 1
        width = (inputs.shape[1:].numel() if image else inputs.shape[-1]) if inputs.dim() else None
        if width != net.input_dim:
            raise TrainingInputError(
                f"{at} holds inputs of shape {list(inputs.shape)} ({width} features per row) but "
                f"NNParams.input_dim is {net.input_dim}; set input_dim={width} or fix the data"
            )

    def call(net: Any) -> Any:
        if adapter is not None:
            return net_output(model, net, to_device(tuple(args), model.device), to_device(dict(kwargs), model.device))
        return forward(net, to_device(inputs, model.device))

    output = _probe(model, call, inputs, at)
    head = model.head
    if output.dim() == 0 or output.shape[-1] != head.width:
        raise TrainingInputError(
            f"the model's output on {at} has shape {list(output.shape)}, but the task expects "
            f"{head.width} values per row (NNModelParams.task n={head.width}); make the module's last layer that wide "
            "or set TaskSpec(n=...) to match it"
        )
    try:
        model.task_adapter.check(output, target)
    except TrainingInputError as exc:
        raise type(exc)(f"{at}: {exc}") from None
    if head.kind == "categorical":
        _check_labels(model, target, head.width, at)


def _split(batch: Any, at: str) -> tuple[Any, Any]:
    try:
        return split_batch(batch)
    except TrainingInputError as exc:
        raise TrainingInputError(f"{at} ({structure(batch)}): {exc}") from None


def _holds(value: Any, kind: type) -> bool:
    if isinstance(value, kind):
        return True
    return isinstance(value, (tuple, list)) and any(_holds(v, kind) for v in value)


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _tensors(v)]
    return []


def _probe(model: Any, call: Any, inputs: Any, at: str) -> torch.Tensor:
    """One forward of the first batch, changing nothing: no autograd, eval mode (every module's
    mode restored), every RNG stream put back."""
    net = model.net
    try:
        with untouched_rng(()), restored_modes(net), torch.no_grad(), model.autocast_context()():
            net.eval()
            output = call(net)
    except (RuntimeError, TypeError, ValueError, IndexError) as exc:
        raise TrainingInputError(
            f"the model's forward failed on {at} (inputs {structure(inputs)}): "
            f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
        ) from exc
    if not isinstance(output, torch.Tensor):
        raise TrainingInputError(
            f"the model returned {type(output).__name__} on {at}; the built-in step needs one tensor "
            "of outputs (use a custom train_step_fn for other outputs)"
        )
    return output


def _check_labels(model: Any, target: torch.Tensor, width: int, at: str) -> None:
    ignore = model.params.resolved_task.ignore_index
    labels = target if ignore is None else target[target != ignore]
    if not labels.numel():
        return
    low, high = int(labels.min()), int(labels.max())
    field = "NNParams.output_dim" if model.net_params is not None else "the output width (TaskSpec n)"
    if high >= width:
        raise TrainingInputError(
            f"{at} holds class label {high}, but {field} is {width} (labels 0..{width - 1}); "
            f"set it to the number of classes (at least {high + 1}) or remap the labels"
        )
    if low < 0:
        raise TrainingInputError(
            f"{at} holds class label {low}; labels are 0..{width - 1}. To leave rows out of the loss, "
            f"mark them with one value and pass NNModelParams(task=TaskSpec.categorical(ignore_index={low}))"
        )
