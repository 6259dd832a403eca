"""What a step function sees, and the step utilities users call from their own steps.

* ``TrainStepContext`` (``train_step_fn``), ``TrainerStepContext`` (``trainer_step_fn``),
  ``EvalStepContext`` (``eval_step_fn``): the per-batch / per-epoch contexts.
* ``default_train_step(ctx)`` (``nnx_api.training.builtin_step``): the built-in step, callable
  from a custom step.
* ``finalize_step(loss, ctx, paradigm=...)``: the shared tail of built-in paradigm steps —
  refuse accumulation and reduced precision, check the loss is finite *before* backward,
  back-propagate, then the one update tail (``nnx_core.update``: clip → step) and the report.
* Batch helpers (``split_batch``, ``to_device``, ``lookahead``, ``forward``) and ``restored_modes``
  (non-destructive inference), re-exported from ``nnx_adapters.pytorch.batches``.
* ``score``: one pass of a loader into an accumulator (the shared loop of ``NNModel.evaluate``
  and in-fit validation).

A step that calls ``optimizer.step()`` itself reports each real step once with
``ctx.report_update()`` (``ctx.report_update(name)`` in a Trainer step); ``default_train_step``
and ``finalize_step`` report their own updates (never report them again).
"""

from __future__ import annotations

import dataclasses
import math
import types
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import torch

from nnx_core.errors import NonFiniteLossError, ParamsError, PrecisionUnsupportedError, TrainingInputError
from nnx_core.records import EvaluationDataPoint
from nnx_core.update import COMMITTED, commit_window
from nnx_adapters.pytorch.batches import batch_parts, net_output, restored_modes, to_device
from nnx_adapters.pytorch.batches import forward as forward  # the batch helpers users' steps import from here
from nnx_adapters.pytorch.batches import lookahead as lookahead
from nnx_adapters.pytorch.batches import split_batch as split_batch
from nnx_adapters.pytorch.metrics import EpochAccumulator
from nnx_adapters.pytorch.optim import TorchOptimizer
from nnx_adapters.pytorch.scaling import ScaledTorchOptimizer
from nnx_api.callbacks.names import guard_frozen

TrainStepFn = Callable[["TrainStepContext"], EvaluationDataPoint]
"""``train_step_fn(ctx) -> EvaluationDataPoint``: a custom NNModel step."""
EvalStepFn = Callable[["EvalStepContext"], EvaluationDataPoint]
"""``eval_step_fn(ctx) -> EvaluationDataPoint``: a custom validation over the whole val loader."""
TrainerStepFn = Callable[["TrainerStepContext"], EvaluationDataPoint]
"""``trainer_step_fn(ctx) -> EvaluationDataPoint``: a Trainer step over named optimizers."""


def score(model: Any, loader: Any, accumulator: Any, extras: Any = None, *, forward: Any = None) -> int:
    """One pass of ``loader`` through ``model.net`` in eval mode (each submodule's mode restored),
    under inference mode and the run's autocast, into ``accumulator`` (and the ``extra_metrics``
    collector ``extras``, if any); return the batch count. ``forward``: what computes the
    outputs instead of ``model.net`` (a run's compiled forward)."""
    net, task, device, batches = model.net, model.task_adapter, model.device, 0
    call = net if forward is None else forward
    with restored_modes(net), torch.inference_mode(), model.autocast_context()():
        net.eval()
        for batch in loader:
            args, kwargs, target = parts = batch_parts(model, batch)
            valid = task.host_count(target)  # masked class targets, counted before the move: no device read
            args, kwargs, target = to_device(parts, device)
            out = net_output(model, call, args, kwargs)
            task.check(out, target)
            loss_sum, count = task.sum_terms(out, target, valid)
            accumulator.add_loss(loss_sum, count)
            accumulator.update(out, target)
            if extras is not None:
                extras.add(out, target)
            batches += 1
    return batches


@attrs.define
class GradientAccumulationState:
    """The open accumulation window of an epoch, shared by its step contexts: the valid-target
    count so far (``normalization_weight``), the loss numerator so far and whether the loss is
    normalised at all (False for a sum-reduced loss). ``default_train_step`` keeps it current;
    both numbers return to 0 when a window closes."""

    normalization_weight: float = 0.0
    loss_numerator: float = 0.0
    normalization_required: bool = True


def _unreported() -> None:
    """A hand-built context's ``report_update()``: no run listens, so nothing is counted (as NNx)."""


def _unreported_named(name: str) -> None:
    """A hand-built ``TrainerStepContext``'s ``report_update(name)``: no run listens."""


def _unweighed(count: float) -> None:
    """``ctx.weigh(count)`` with no group to weigh against (one process, or a hand-built context)."""


class StepLink:
    """What ties a step context to its run; the context carries it as its ``report_update``.

    NNx's step contexts are frozen dataclasses of its documented fields only. What this project
    adds — the epoch state ``default_train_step`` / ``finalize_step`` work through (``session``)
    and the run's built-in step (``builtin``),
    the optimizer's ``scheduler``, ``weigh(count)`` and, for a Trainer step, ``is_last_batch``,
    ``precision``, ``grad_clip_norms`` and ``accumulate_grad_batches`` — travels inside the
    reporter, so ``dataclasses.fields(ctx)`` lists NNx's fields and ``dataclasses.replace(ctx,
    ...)`` keeps the run. Calling it reports one committed update (``report()`` or
    ``report(name)``).
    """

    __slots__ = ("report", "session", "builtin", "scheduler", "weigh", "is_last_batch", "precision",
                 "grad_clip_norms", "accumulate_grad_batches")

    def __init__(
        self,
        report: Callable[..., None],
        *,
        session: Any,
        builtin: Callable[[], Any] | None = None,
        weigh: Callable[[float], None] = _unweighed,
        scheduler: Any = None,
        is_last_batch: bool = False,
        precision: Any = None,
        grad_clip_norms: Mapping[str, float | None] | None = None,
        accumulate_grad_batches: Mapping[str, int] | None = None,
    ) -> None:
        self.report, self.session, self.weigh, self.scheduler = report, session, weigh, scheduler
        self.builtin = builtin  # the run's built-in step, bound on first use (``default_train_step``)
        self.is_last_batch, self.precision = is_last_batch, precision
        self.grad_clip_norms, self.accumulate_grad_batches = grad_clip_norms, accumulate_grad_batches

    def __call__(self, *name: str) -> None:
        self.report(*name)

    def __repr__(self) -> str:
        return "StepLink()"


def link_of(ctx: Any) -> StepLink | None:
    """The run a step context belongs to (its ``report_update``), None on a context built by hand."""
    report = ctx.report_update
    return report if isinstance(report, StepLink) else None


class _Linked:
    """What a step context reads from the run it belongs to (its ``report_update``, a
    ``StepLink``): the epoch state and ``weigh``; None and a no-op on a hand-built context."""

    @property
    def session(self) -> Any:
        """The run's epoch state ``default_train_step`` / ``finalize_step`` work through; None
        when hand-built."""
        link = link_of(self)
        return None if link is None else link.session

    @property
    def weigh(self) -> Callable[[float], None]:
        """``weigh(count)``: the denominator of this batch's losses (see the class docstring)."""
        link = link_of(self)
        return _unweighed if link is None else link.weigh


@guard_frozen
@dataclasses.dataclass(frozen=True)
class TrainStepContext(_Linked):
    """What a custom ``train_step_fn(ctx)`` receives for one batch: a frozen dataclass with NNx's
    fields in NNx's order, so one can also be built by hand (keyword or positional; the fields
    from ``is_last_batch`` on have defaults) and changed with ``dataclasses.replace``.

    A custom step owns zero_grad, forward, loss, backward, ``optimizer.step()`` and its NaN guard;
    after each real optimizer step it must call ``ctx.report_update()`` (once). It may instead
    delegate to ``default_train_step(ctx)``, which reports its own updates.

    ``scaler`` is the run's ``torch.amp.GradScaler`` under fp16 (None otherwise); ``extra_metrics``
    the run's ``{name: fn(y_true, y_pred)}`` (a step may put their values in its record's
    ``extra``; ``default_train_step`` does); ``accumulation_state`` the epoch's open window
    (:class:`GradientAccumulationState`); ``epoch_summary`` the whole-epoch training summary's
    accumulator when the run declares metrics or a monitor (``default_train_step`` feeds it);
    ``precision`` the run's resolved precision (``"fp32"``, ``"bf16"``, ``"fp16"``; None on a
    hand-built context).

    Beyond NNx's fields (properties, None or a no-op on a hand-built context): ``scheduler`` (the
    optimizer's scheduler), ``session`` (the run's epoch state) and ``weigh(count)``, which states
    the denominator of this microbatch's loss (its rows, or valid targets): under ``DDP()`` each
    rank's gradient is then weighed by its share of the window's rows, so unequal per-rank counts
    still give one process's update on the union; without it every rank weighs the same. In one
    process it changes nothing.
    """

    model: Any
    batch: Any
    optimizer: torch.optim.Optimizer
    scaler: Any
    grad_clip_norm: float | None
    extra_metrics: Mapping[str, Callable[[Any, Any], float]] | None
    accumulate_grad_batches: int
    batch_idx: int
    epoch_idx: int
    is_last_batch: bool = False
    accumulation_state: GradientAccumulationState | None = None
    epoch_summary: Any = None
    precision: Any = None
    report_update: Callable[[], None] = _unreported

    @property
    def scheduler(self) -> Any:
        """The optimizer's scheduler, to read: the torch scheduler, or the plateau rule's view
        (``nnx_core.schedules.PlateauView``: its ``step()`` is refused); None when hand-built."""
        link = link_of(self)
        return None if link is None else link.scheduler



@guard_frozen
@dataclasses.dataclass(frozen=True)
class TrainerStepContext(_Linked):
    """What a ``trainer_step_fn(ctx)`` receives for one batch: a frozen dataclass with NNx's fields
    in NNx's order.

    The step owns zero_grad, forwards, losses, backwards and ``optimizers[name].step()``; after
    each real step it calls ``ctx.report_update(name)`` once (``finalize_step(loss, ctx,
    paradigm=..., optimizer=name)`` does all of that). It returns the batch's
    ``EvaluationDataPoint``.

    Beyond NNx's fields (properties): ``is_last_batch``, ``precision``, ``grad_clip_norms`` and
    ``accumulate_grad_batches`` (by optimizer name), ``session``, and ``weigh(count)``, which
    states the denominator of the batch's losses, as in ``TrainStepContext`` (under ``DDP()``
    each rank's gradients weigh by their share of the rows). On a hand-built context they are
    False, None, no clipping, 1, None and a no-op.
    """

    model: Any
    batch: Any
    optimizers: Mapping[str, torch.optim.Optimizer]
    schedulers: Mapping[str, Any]
    extra_metrics: Mapping[str, Callable[[Any, Any], float]] | None
    batch_idx: int
    epoch_idx: int
    report_update: Callable[[str], None] = _unreported_named

    @property
    def is_last_batch(self) -> bool:
        """Whether this is the epoch's last batch."""
        link = link_of(self)
        return False if link is None else link.is_last_batch

    @property
    def precision(self) -> Any:
        """The run's resolved precision (``"fp32"``, ``"bf16"``, ``"fp16"``); None when hand-built."""
        link = link_of(self)
        return None if link is None else link.precision

    @property
    def grad_clip_norms(self) -> Mapping[str, float | None]:
        """Each optimizer's ``grad_clip_norm`` (None: no clipping)."""
        link = link_of(self)
        if link is None or link.grad_clip_norms is None:
            return types.MappingProxyType(dict.fromkeys(self.optimizers))
        return link.grad_clip_norms

    @property
    def accumulate_grad_batches(self) -> Mapping[str, int]:
        """Each optimizer's ``accumulate_grad_batches``."""
        link = link_of(self)
        if link is None or link.accumulate_grad_batches is None:
            return types.MappingProxyType(dict.fromkeys(self.optimizers, 1))
        return link.accumulate_grad_batches



@guard_frozen
@dataclasses.dataclass(frozen=True)
class EvalStepContext:
    """What a custom ``eval_step_fn(ctx)`` receives once per epoch (it owns the whole loader): a
    frozen dataclass with NNx's fields in NNx's order. ``extra_metrics`` are the run's
    ``{name: fn(y_true, y_pred)}``, for its record's ``extra``; ``metrics`` the run's declared
    ``MetricSpec``s.

    The step runs under ``torch.no_grad()`` with ``ctx.model.net`` in eval mode (``net.eval()``),
    as Lightning, Keras and the Hugging Face Trainer validate; afterwards every submodule gets back
    the train/eval flag it had before validation (``eval_mode_for``)."""

    model: Any
    val_loader: Any
    extra_metrics: Mapping[str, Callable[[Any, Any], float]] | None
    epoch_idx: int
    metrics: tuple[Any, ...] = ()


def eval_mode_for(eval_step_fn: Any) -> bool:
    """Whether ``eval_step_fn`` runs with the net in eval mode: yes, unless the function says
    ``eval_step_fn.eval_mode = False`` (it then runs in the modes training left, as in NNx 0.4.1:
    dropout and batch-norm statistics active, e.g. for Monte Carlo dropout). Either way every
    submodule's train/eval flag is restored after the step."""
    return getattr(eval_step_fn, "eval_mode", True) is not False


def _streaming_check(params: Any) -> None:
    """Refuse, before a run is reserved, what a streaming validation cannot compute."""
    if params.extra_metrics:
        raise ParamsError(
            f"{type(params).__name__}.extra_metrics",
            "streaming_eval_step keeps counts and sums only, and extra_metrics are functions of every stored "
            "target and prediction; declare them as metrics=(MetricSpec(...),) or leave eval_step_fn unset",
        )


def streaming_eval_step(ctx: EvalStepContext) -> EvaluationDataPoint:
    """An ``eval_step_fn`` whose validation memory does not grow with the validation set.

    Its record is the one ``NNModel.evaluate(loader, metrics=...)`` returns — loss (every batch's
    numerator over the summed valid-target counts), error, accuracy, F1 / precision / recall from
    one confusion matrix, count, status and the declared ``metrics`` — built from per-batch counts
    and sums, never from stored targets or predictions (a subclass's ``evaluate`` override is not
    called, as in NNx). ``extra_metrics`` need those arrays, so a run that declares them is
    refused before anything is written::

        model.train(params, eval_step_fn=nnx.streaming_eval_step)
    """
    _streaming_check(ctx)
    model = ctx.model
    acc = EpochAccumulator(model.task_adapter, model.head.width, tuple(ctx.metrics), full_scores=True)
    if score(model, ctx.val_loader, acc) == 0:
        raise TrainingInputError("streaming_eval_step: the validation loader produced zero samples (it yielded no batches)")
    return EvaluationDataPoint(**acc.result())


streaming_eval_step.check_run = _streaming_check  # type: ignore[attr-defined]  # read by the pre-run checks


def port_of(ctx: Any, name: str, optimizer: torch.optim.Optimizer) -> TorchOptimizer:
    """Optimizer ``name``'s port: the run's (fp16: through its scaler), or a plain one around the
    hand-built context's optimizer (its ``scaler``, if any)."""
    session = ctx.session
    if session is not None:
        return session.optimizers[name]
    scaler = None if isinstance(ctx, TrainerStepContext) else getattr(ctx, "scaler", None)  # no failed lookup per update
    return TorchOptimizer(optimizer) if scaler is None else ScaledTorchOptimizer(optimizer, None, scaler)


def finalize_step(loss: torch.Tensor, ctx: Any, *, paradigm: str, optimizer: str | None = None) -> float:
    """Check, back-propagate, clip, step and report one update; return the loss as a float.

    The caller zeroes the gradients before its forward. With a ``Trainer`` step, name the
    optimizer: ``finalize_step(loss, ctx, paradigm="gan", optimizer="disc")``.
    """
    if not isinstance(paradigm, str) or not paradigm.strip():
        raise ParamsError("finalize_step.paradigm", "name the paradigm (used in error messages), e.g. 'mixup'")
    if isinstance(ctx, TrainerStepContext):
        if optimizer is None or optimizer not in ctx.optimizers:
            raise ParamsError(
                f"{paradigm}: finalize_step.optimizer",
                f"a Trainer step must name one of its optimizers {sorted(ctx.optimizers)}, got {optimizer!r}",
            )
        name, clip, accumulate = optimizer, ctx.grad_clip_norms[optimizer], ctx.accumulate_grad_batches[optimizer]
        torch_optimizer = ctx.optimizers[optimizer]

        def report() -> None:
            ctx.report_update(name)
    else:
        if optimizer is not None:
            raise ParamsError(f"{paradigm}: finalize_step.optimizer", "an NNModel step has one optimizer; leave it out")
        name = ctx.session.primary if ctx.session is not None else "default"
        clip, accumulate, report, torch_optimizer = ctx.grad_clip_norm, ctx.accumulate_grad_batches, ctx.report_update, ctx.optimizer
    if accumulate != 1:
        raise ParamsError(
            f"{paradigm}: accumulate_grad_batches",
            f"finalize_step updates on every batch and cannot accumulate gradients (got {accumulate}); "
            "set accumulate_grad_batches=1, or express the loss as an objective, which accumulates exactly",
        )
    if ctx.precision not in (None, "fp32"):
        raise PrecisionUnsupportedError(
            f"{paradigm} steps are full-precision only (finalize_step does no loss scaling), but the run resolves to "
            f"{ctx.precision}; use PrecisionPolicy('fp32') or an objective"
        )
    if not isinstance(ctx, TrainerStepContext) and getattr(ctx, "scaler", None) is not None:
        raise PrecisionUnsupportedError(
            f"{paradigm} steps are full-precision only (finalize_step does no loss scaling), but the context holds a "
            "GradScaler; build it with scaler=None, or use an objective"
        )
    value = float(loss.detach())
    if not math.isfinite(value):
        raise NonFiniteLossError(
            f"{paradigm}: non-finite training loss ({value!r}); no parameter was updated. Lower the learning rate, "
            "set grad_clip_norm or check the inputs"
        )
    loss.backward()
    port = port_of(ctx, name, torch_optimizer)
    if commit_window({name: port}, None, max_norms={name: clip}, finite=lambda: True) == COMMITTED:
        report()
    return value
