"""The checks of a run's batches: its first batches before anything is written, and a later
batch the built-in step could not train on.

``check_first_batches`` translates the first-forward mistakes of an ``NNModel`` run on the first
batch of each loader, before admission (no run folder, no lease file): batches that are not
``(inputs, targets)``, NumPy or float64 inputs, a feature width other than ``NNParams.input_dim``,
a forward that fails, an output width other than the head's, targets of the wrong dtype or shape,
class labels ≥ the output width or negative (other than the ignored one: ``ignore_index``, else
-100), a declared multilabel task's labels other than 0/1. The probe forward runs under
``torch.no_grad()`` in eval mode (no BatchNorm statistics move) with every RNG stream put back, so
training is bit-for-bit what it is without it; ``extra_metrics`` functions are called once on its
outputs. ``batch_problem`` runs the same checks on a later batch, only after the step failed on it.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from nnx_core.errors import BatchKeyError, ExtraMetricError, InputWidthError, TaskValidationError, TrainingInputError
from nnx_adapters.pytorch.batches import forward, net_output, restored_modes, saved_buffers, split_batch, to_device
from nnx_adapters.pytorch.extras import ExtraMetrics
from nnx_api.config.nets import NNConvParams
from nnx_api.parts.models import output_items, prediction_hint
from nnx_api.training.fingerprint import structure, untouched_rng


def check_first_batches(
    model: Any, firsts: Mapping[str, Any], *, train_step: bool, eval_step: bool, extra_metrics: Any = None
) -> None:
    """The first-forward checks (module docstring) on each loader's first batch that the built-in
    training step (``train_loader``) or validation (``val_loader``) will consume; a loader that
    yields nothing is refused whatever consumes it. ``extra_metrics`` are tried on the outputs of
    the first batch they will see (validation's, else training's): ``try_extra_metrics``."""
    wanted = {"train_loader": train_step, "val_loader": eval_step}
    probed = {}
    for where, batch in firsts.items():
        if batch is None:
            raise TrainingInputError(f"{where} yielded no batches; give it at least one batch")
        if wanted.get(where):
            probed[where] = _check_batch(model, batch, where)
    tried = probed.get("val_loader") or probed.get("train_loader")
    if extra_metrics and tried is not None:
        try_extra_metrics(model, extra_metrics, *tried)


def try_extra_metrics(model: Any, fns: Mapping[str, Any], output: torch.Tensor, target: Any) -> None:
    """Call each ``extra_metrics`` function once on a first batch's decoded outputs and targets,
    as the epoch's pass will; one that raises is an ``ExtraMetricError`` naming it before anything
    is written. A ``ValueError`` on a batch of one class only (ROC AUC's "only one class present")
    may be the batch's, not the function's: the whole pass decides then."""
    extras = ExtraMetrics(model.task_adapter, fns)
    extras.add(output, target)
    try:
        extras.values(extras.whole())
    except ExtraMetricError as exc:
        one_class = isinstance(target, torch.Tensor) and target.numel() and target.unique().numel() < 2
        if not (isinstance(exc.__cause__, ValueError) and one_class):
            raise ExtraMetricError(f"{exc} (tried on the first batch, before training)") from exc.__cause__


def batch_problem(model: Any, batch: Any, at: str) -> TrainingInputError | None:
    """What is wrong with a later batch the built-in step could not train on (``at`` names it:
    "train_loader's batch 3 of epoch 1"): the first batch's checks, run only after the step
    failed, so a good batch costs nothing; None when they find nothing."""
    try:
        _check_batch(model, batch, at.partition("'s ")[0], at)
    except TrainingInputError as exc:
        return exc
    return None


def _check_batch(model: Any, batch: Any, where: str, at: str | None = None) -> tuple[torch.Tensor, Any]:
    at = at or f"{where}'s first batch"
    adapter = getattr(model, "batch_adapter", None)
    if adapter is not None:  # the adapter says what the net takes
        args, kwargs, target = adapter.split(batch)
        inputs: Any = [*args, *kwargs.values()]
        _check_adapter(model, adapter, batch, target, at)
    else:
        inputs, target = _split(batch, at, model)
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
            torch_says = "" if image else " (the forward would fail: mat1 and mat2 shapes cannot be multiplied)"
            raise InputWidthError(
                f"{at} holds inputs of shape {list(inputs.shape)} ({width} features per row) but "
                f"NNParams.input_dim is {net.input_dim}{torch_says}; set input_dim={width} or fix the data"
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
    if head.kind == "categorical" and _looks_continuous(target, output, inputs):
        raise TaskValidationError(
            f"{at} holds float targets of shape {list(target.shape)}, shaped like the model's "
            f"{'outputs' if target.shape == output.shape else 'inputs'}, but the task is categorical (the default "
            "loss, cross-entropy over class labels); for regression or reconstruction set "
            "NNModelParams(loss=nnx.Losses.MEAN_SQUARED_ERROR); for class labels convert them with targets.long()"
        )
    try:
        model.task_adapter.check(output, target)
    except TrainingInputError as exc:
        raise type(exc)(f"{at}: {exc}") from None
    if head.kind == "categorical":
        _check_labels(model, target, head.width, at)
    try:
        model.task_adapter.check_values(target)
    except TaskValidationError as exc:
        raise type(exc)(f"{at}: {exc}") from None
    return output, target


def _looks_continuous(target: Any, output: torch.Tensor, inputs: Any) -> bool:
    """Float targets shaped like the outputs or the inputs (a regression's or an autoencoder's),
    with more than one value per row (one float per row may be labels stored as floats)."""
    if not isinstance(target, torch.Tensor) or not target.dtype.is_floating_point or target.dim() < 2:
        return False
    return target.shape == output.shape or any(target.shape == t.shape for t in _tensors(inputs))


def _positional_arity(net: Any) -> tuple[int, int] | None:
    """How many positional inputs ``net.forward`` takes: (required, at most); None when unknown
    (no signature, or ``*args``)."""
    try:
        params = list(inspect.signature(net.forward).parameters.values())
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return None
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return sum(p.default is p.empty for p in positional), len(positional)


def _check_adapter(model: Any, adapter: Any, batch: Any, target: Any, at: str) -> None:
    """The adapter's reading of the batch against the batch and ``forward``: a mapping batch
    without the ``KeywordInputs`` target key, or ``PositionalInputs(n)`` taking every item as an
    input (no target left) where ``forward`` takes fewer."""
    if target is not None:
        return
    keyed = getattr(adapter, "target", None)
    if isinstance(batch, Mapping) and isinstance(keyed, str):
        raise BatchKeyError(
            f"{at} has no target key {keyed!r} ({adapter!r}); its keys are {sorted(map(str, batch))}: name the "
            f"target's key with KeywordInputs({list(adapter.inputs)!r}, target=<key>) (and the inputs with inputs=)"
        )
    n = getattr(adapter, "n_inputs", None)
    arity = _positional_arity(model.net)
    if isinstance(n, int) and isinstance(batch, (tuple, list)) and len(batch) == n:
        takes = f"; the module's forward takes {arity[1]} input(s)" if arity is not None and arity[1] < n else ""
        raise TrainingInputError(
            f"{adapter!r} reads all {n} items of {at} as inputs, so no item is left as the target{takes}; with "
            f"batches (inputs..., target) write PositionalInputs({max(1, n - 1)})"
        )


def _split(batch: Any, at: str, model: Any = None) -> tuple[Any, Any]:
    if isinstance(batch, Mapping):
        keys = [k for k in batch if isinstance(k, str)]
        target = next((k for k in keys if k in TARGET_KEYS), "labels")
        inputs = [k for k in keys if k != target] or ["input"]
        raise TrainingInputError(
            f"{at} is a {type(batch).__name__} with keys {list(batch)}; say which keys are the inputs and which "
            f"is the target: NNModel(..., batch_adapter=KeywordInputs({inputs!r}, target={target!r}))"
        )
    try:
        return split_batch(batch)
    except TrainingInputError as exc:
        hint = ""
        arity = _positional_arity(model.net) if model is not None else None
        if isinstance(batch, (tuple, list)) and len(batch) >= 3:
            n = len(batch) - 1
            fits = arity is not None and arity[0] <= n <= arity[1]
            takes = f"the module's forward takes {n} inputs: " if fits else ""
            hint = (f"; {takes}if the first {n} items are the module's inputs and the last the target, write "
                    f"NNModel(..., batch_adapter=PositionalInputs({n}))")
        raise TrainingInputError(f"{at} ({structure(batch)}): {exc}{hint}") from None


TARGET_KEYS = ("labels", "label", "target", "targets", "y")  # the keys a target is usually under


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
    mode restored), every RNG stream and every buffer (a forward hook's counter) put back."""
    net = model.net
    put_back = saved_buffers(net)
    try:
        with untouched_rng(()), restored_modes(net), torch.no_grad(), model.autocast_context()():
            net.eval()
            try:
                output = call(net)
            finally:
                put_back()
    except TrainingInputError as exc:
        raise TrainingInputError(f"{at}: {exc}") from None
    except (RuntimeError, TypeError, ValueError, IndexError) as exc:
        way = ("NNx's validation calls it: give eval_step_fn=fn(ctx) (your own validation) or leave val_loader out"
               if at.startswith("val_loader") else
               "NNx's training step calls it: give train_step_fn=fn(ctx) if the net is trained otherwise")
        raise TrainingInputError(
            f"the model's forward failed on {at} (inputs {structure(inputs)}): "
            f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:300]}; {way}"
        ) from exc
    if not isinstance(output, torch.Tensor):
        raise TrainingInputError(
            f"the model returned {output_items(output)} on {at}; the built-in step and validation need one "
            f"tensor of predictions: {prediction_hint(output)}"
        )
    return output


def _check_labels(model: Any, target: torch.Tensor, width: int, at: str) -> None:
    ignore = model.task_adapter.ignore_index  # the TaskSpec's (else -100), or an assigned CrossEntropyLoss / NLLLoss's
    labels = target if ignore is None else target[target != ignore]
    if not labels.numel():
        return
    low, high = int(labels.min()), int(labels.max())
    field = "NNParams.output_dim" if model.net_params is not None else "the output width (TaskSpec n)"
    error = TaskValidationError if model.task_adapter.explicit else TrainingInputError  # a declared TaskSpec's check
    if high >= width:
        raise error(
            f"{at} holds class label {high}, but {field} is {width} (class indices in [0, {width})); "
            f"set it to the number of classes (at least {high + 1}) or remap the labels"
        )
    if low < 0:
        raise error(
            f"{at} holds class label {low}; class indices are in [0, {width}). To leave rows out of the loss, "
            f"mark them with one value and pass NNModelParams(task=TaskSpec.categorical(ignore_index={low}))"
        )
