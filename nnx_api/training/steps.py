"""What a step function sees, and the step utilities users call from their own steps.

* ``TrainStepContext`` (``train_step_fn``), ``TrainerStepContext`` (``trainer_step_fn``),
  ``EvalStepContext`` (``eval_step_fn``): the per-batch / per-epoch contexts.
* ``default_train_step(ctx)``: the built-in supervised step, callable from a custom step.
* ``finalize_step(loss, ctx, paradigm=...)``: the shared tail of built-in paradigm steps —
  refuse accumulation and reduced precision, check the loss is finite *before* backward,
  back-propagate, then the one update tail (``nnx_core.update``: clip → step) and the report.
* Batch helpers (``split_batch``, ``to_device``, ``lookahead``, ``forward``) and ``restored_modes``
  (non-destructive inference), re-exported from ``nnx_adapters.pytorch.batches``.
* ``score`` (one pass of a loader into an accumulator: the shared loop of ``NNModel.evaluate``
  and in-fit validation) and ``EpochStats`` (per-batch statistics kept on the device until the
  epoch ends).

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
from nnx_adapters.pytorch.extras import ExtraMetrics
from nnx_adapters.pytorch.metrics import BatchScores, EpochAccumulator
from nnx_adapters.pytorch.optim import TorchOptimizer
from nnx_adapters.pytorch.scaling import ScaledTorchOptimizer
from nnx_adapters.pytorch.tasks import regression_errors

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
            args, kwargs, target = to_device(batch_parts(model, batch), device)
            out = net_output(model, call, args, kwargs)
            task.check(out, target)
            loss_sum, count = task.loss_terms(out, target)
            accumulator.add_loss(loss_sum, count)
            accumulator.update(out, target)
            if extras is not None:
                extras.add(out, target)
            batches += 1
    return batches


class EpochStats:
    """Per-batch training statistics kept on the device until the epoch ends (``edps`` reads
    them with one host synchronisation for the whole epoch)."""

    __slots__ = (
        "losses", "counts", "corrects", "rows", "lrs", "updates", "records", "labels", "additive", "kind", "errors",
    )

    def __init__(self) -> None:
        self.losses: list[torch.Tensor] = []
        self.counts: list[int] = []
        self.corrects: list[torch.Tensor] = []
        self.rows: list[int | None] = []
        self.lrs: list[float] = []
        self.updates: list[int] = []
        self.records: list[EvaluationDataPoint] = []  # custom steps return records directly
        self.labels: BatchScores | None = None  # a categorical default step's per-batch scores
        self.additive = False  # a sum-reduced loss_fn: a record's loss is the batch's sum
        self.kind: str | None = None  # a declared TaskSpec's kind, written on each default-step record
        self.errors: list[torch.Tensor] = []  # a declared regression's per-batch [Σ squared, Σ absolute, valid count]

    def __len__(self) -> int:
        return len(self.lrs)

    def add_batch(self, loss: torch.Tensor, count: int, correct: torch.Tensor | None, rows: int | None) -> None:
        """One batch's on-device loss numerator and correct count (host-side valid count, rows)."""
        self.losses.append(loss)
        self.counts.append(count)
        if correct is not None:
            self.corrects.append(correct)
        self.rows.append(rows)

    def add_output(self, loss: torch.Tensor, count: int, output: torch.Tensor, target: torch.Tensor, task: Any) -> None:
        """One default-step batch: a categorical task keeps its predicted classes for the per-batch
        accuracy, F1, precision and recall (``BatchScores``); other tasks their correct count."""
        self.additive = task.additive
        self.kind = getattr(task, "record_kind", None)
        if not task.categorical:
            self.add_errors(output, target, task)
            self.add_batch(loss, count, *task.correct(output, target))
            return
        if self.labels is None:
            self.labels = BatchScores(output.shape[-1], task.ignore_index)
        self.labels.add(output.argmax(-1), target)
        self.losses.append(loss)
        self.counts.append(count)
        self.rows.append(None)

    def add_errors(self, output: torch.Tensor, target: torch.Tensor, task: Any) -> None:
        """Note the declared task's ``kind``; a regression's batch also keeps its summed squared
        and absolute errors (this process's rows; ``edps`` adds them over a group)."""
        self.kind = getattr(task, "record_kind", None)
        if self.kind == "regression":  # NaN (masked) targets are left out of both
            self.errors.append(regression_errors(output, target))  # [Σ squared, Σ absolute, valid count], on the device

    def edps(self, total: Any = None) -> list[EvaluationDataPoint]:
        """One training record per batch (one host sync for the whole epoch); ``total`` sums the
        per-batch class counts over the ranks (``BatchScores.table``)."""
        if self.records:
            return self.records
        losses, counts, corrects, rows = self._numbers(total)
        if self.labels is not None:
            table = self.labels.table(total).tolist()
            return self._with_task([
                batch_record(loss, count, correct, None, f1=f1, precision=precision, recall=recall, additive=self.additive)
                for loss, (correct, _valid, f1, precision, recall), count in zip(losses.tolist(), table, counts, strict=True)
            ], total)
        return self._with_task([
            batch_record(loss, count, correct, row, additive=self.additive)
            for loss, count, correct, row in zip(losses.tolist(), counts, corrects, rows, strict=True)
        ], total)

    def _numbers(self, total: Any) -> tuple[torch.Tensor, list[int], list[Any], list[int | None]]:
        """Each batch's loss numerator, valid count, correct count and scored rows; ``total``
        (a group) sums them over the ranks, so each record is the union's batch."""
        losses = torch.stack(self.losses).double()
        corrects: list[Any] = torch.stack(self.corrects).tolist() if self.corrects else [None] * len(self.losses)
        if total is None:
            return losses, self.counts, corrects, self.rows
        scored = [r is not None for r in self.rows]
        columns = [losses.cpu(), torch.tensor(self.counts, dtype=torch.float64),
                   torch.tensor([0.0 if c is None else c for c in corrects], dtype=torch.float64),
                   torch.tensor([r or 0 for r in self.rows], dtype=torch.float64)]
        summed = total(torch.stack(columns, dim=1))
        counts = [int(c) for c in summed[:, 1].tolist()]
        corrects = summed[:, 2].tolist() if self.corrects else corrects
        rows = [int(r) if s else None for r, s in zip(summed[:, 3].tolist(), scored, strict=True)]
        return summed[:, 0], counts, corrects, rows

    def _with_task(self, records: list[EvaluationDataPoint], total: Any = None) -> list[EvaluationDataPoint]:
        """The records with the declared task's ``kind``, and a regression's per-batch
        ``metrics.mse`` / ``metrics.mae`` (as NNx's task records carry them; ``total`` adds the
        error sums over a group's ranks, as it adds the class counts)."""
        if self.kind is None:
            return records
        sums = elements = None
        if self.errors and len(self.errors) == len(records):
            table = torch.stack(self.errors).double().cpu()
            summed = (total(table) if total is not None else table).tolist()
            sums, elements = [row[:2] for row in summed], [row[2] for row in summed]
        out = []
        for i, record in enumerate(records):
            metrics = dict(record.metrics)
            if sums is not None and elements is not None and elements[i]:
                metrics = {"mse": sums[i][0] / elements[i], "mae": sums[i][1] / elements[i], **metrics}
            out.append(attrs.evolve(record, kind=self.kind, metrics=metrics))
        return out


def batch_record(
    loss_sum: float,
    count: int,
    correct: float | None,
    rows: int | None,
    *,
    f1: float | None = None,
    precision: float | None = None,
    recall: float | None = None,
    additive: bool = False,
) -> EvaluationDataPoint:
    """A batch's record from its loss numerator, valid-target count, correct count and scored
    rows (multilabel): loss = Σ/count (``additive``, a sum-reduced loss: Σ itself), accuracy =
    correct/rows-or-count, error = 1 - accuracy; macro F1 / precision / recall as given
    (categorical), left out of a batch without valid targets."""
    denominator = rows if rows is not None else count
    accuracy = correct / denominator if correct is not None and denominator else None
    scored = accuracy is not None
    return EvaluationDataPoint(
        loss=loss_sum if additive else loss_sum / count if count else None,
        accuracy=accuracy,
        error=None if accuracy is None else 1.0 - accuracy,
        f1=f1 if scored else None,
        precision=precision if scored else None,
        recall=recall if scored else None,
        count=count,
    )


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
    adds — the epoch state ``default_train_step`` / ``finalize_step`` work through (``session``),
    the optimizer's ``scheduler``, ``weigh(count)`` and, for a Trainer step, ``is_last_batch``,
    ``precision``, ``grad_clip_norms`` and ``accumulate_grad_batches`` — travels inside the
    reporter, so ``dataclasses.fields(ctx)`` lists NNx's fields and ``dataclasses.replace(ctx,
    ...)`` keeps the run. Calling it reports one committed update (``report()`` or
    ``report(name)``).
    """

    __slots__ = ("report", "session", "scheduler", "weigh", "is_last_batch", "precision", "grad_clip_norms",
                 "accumulate_grad_batches")

    def __init__(
        self,
        report: Callable[..., None],
        *,
        session: Any,
        weigh: Callable[[float], None] = _unweighed,
        scheduler: Any = None,
        is_last_batch: bool = False,
        precision: Any = None,
        grad_clip_norms: Mapping[str, float | None] | None = None,
        accumulate_grad_batches: Mapping[str, int] | None = None,
    ) -> None:
        self.report, self.session, self.weigh, self.scheduler = report, session, weigh, scheduler
        self.is_last_batch, self.precision = is_last_batch, precision
        self.grad_clip_norms, self.accumulate_grad_batches = grad_clip_norms, accumulate_grad_batches

    def __call__(self, *name: str) -> None:
        self.report(*name)

    def __repr__(self) -> str:
        return "StepLink()"


def _link(ctx: Any) -> StepLink | None:
    report = ctx.report_update
    return report if isinstance(report, StepLink) else None


class _Linked:
    """What a step context reads from the run it belongs to (its ``report_update``, a
    ``StepLink``): the epoch state and ``weigh``; None and a no-op on a hand-built context."""

    @property
    def session(self) -> Any:
        """The run's epoch state ``default_train_step`` / ``finalize_step`` work through; None
        when hand-built."""
        link = _link(self)
        return None if link is None else link.session

    @property
    def weigh(self) -> Callable[[float], None]:
        """``weigh(count)``: the denominator of this batch's losses (see the class docstring)."""
        link = _link(self)
        return _unweighed if link is None else link.weigh


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
        """The optimizer's scheduler (the torch scheduler or the plateau rule); None when hand-built."""
        link = _link(self)
        return None if link is None else link.scheduler



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
        link = _link(self)
        return False if link is None else link.is_last_batch

    @property
    def precision(self) -> Any:
        """The run's resolved precision (``"fp32"``, ``"bf16"``, ``"fp16"``); None when hand-built."""
        link = _link(self)
        return None if link is None else link.precision

    @property
    def grad_clip_norms(self) -> Mapping[str, float | None]:
        """Each optimizer's ``grad_clip_norm`` (None: no clipping)."""
        link = _link(self)
        if link is None or link.grad_clip_norms is None:
            return types.MappingProxyType(dict.fromkeys(self.optimizers))
        return link.grad_clip_norms

    @property
    def accumulate_grad_batches(self) -> Mapping[str, int]:
        """Each optimizer's ``accumulate_grad_batches``."""
        link = _link(self)
        if link is None or link.accumulate_grad_batches is None:
            return types.MappingProxyType(dict.fromkeys(self.optimizers, 1))
        return link.accumulate_grad_batches



@dataclasses.dataclass(frozen=True)
class EvalStepContext:
    """What a custom ``eval_step_fn(ctx)`` receives once per epoch (it owns the whole loader): a
    frozen dataclass with NNx's fields in NNx's order. ``extra_metrics`` are the run's
    ``{name: fn(y_true, y_pred)}``, for its record's ``extra``; ``metrics`` the run's declared
    ``MetricSpec``s."""

    model: Any
    val_loader: Any
    extra_metrics: Mapping[str, Callable[[Any, Any], float]] | None
    epoch_idx: int
    metrics: tuple[Any, ...] = ()


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
        raise TrainingInputError("the validation loader yielded no batches")
    return EvaluationDataPoint(**acc.result())


streaming_eval_step.check_run = _streaming_check  # type: ignore[attr-defined]  # read by the pre-run checks


def default_train_step(ctx: TrainStepContext) -> EvaluationDataPoint:
    """The built-in supervised step, callable from a custom ``train_step_fn``.

    Forward, loss numerator over valid targets, backward; at the window's end the gradient is
    divided by the window's valid-target count, clipped and applied, and the update reported
    (never report it again). Returns the batch's record, scored as the default step scores it
    (read at once: one host sync), with ``ctx.extra_metrics`` computed on the batch's valid
    targets and decoded predictions.

    On a context built by hand (no run: ``ctx.session`` is None) the same happens on its own
    terms: the window closes at ``is_last_batch`` or every ``accumulate_grad_batches`` batches
    (counted by ``batch_idx``), its valid-target count is kept in ``ctx.accumulation_state``
    (required when accumulating), and ``ctx.report_update()`` is called after the update.
    """
    session = ctx.session
    if session is None:
        return _standalone_train_step(ctx)
    step = session.builtin_step()
    extras = ExtraMetrics(session.model.task_adapter, ctx.extra_metrics) if ctx.extra_metrics else None
    part, _ = step.update(session, ctx.batch, ctx.epoch_idx, ctx.batch_idx, ctx.is_last_batch, extras)
    stats = EpochStats()
    stats.add_output(part.loss, part.count, part.output, part.target, session.task)
    record = stats.edps()[0]
    state = ctx.accumulation_state
    if state is not None:
        closed = step.window.microbatches == 0
        state.normalization_weight = 0.0 if closed else float(step.window.weight)
        state.loss_numerator = 0.0 if closed else state.loss_numerator + float(part.loss)
        state.normalization_required = not step.window.additive
    return record if extras is None else attrs.evolve(record, extra=extras.values(extras.whole()))


def _port(ctx: Any, name: str, optimizer: torch.optim.Optimizer) -> TorchOptimizer:
    """Optimizer ``name``'s port: the run's (fp16: through its scaler), or a plain one around the
    hand-built context's optimizer (its ``scaler``, if any)."""
    session = ctx.session
    if session is not None:
        return session.optimizers[name]
    scaler = getattr(ctx, "scaler", None)
    return TorchOptimizer(optimizer) if scaler is None else ScaledTorchOptimizer(optimizer, None, scaler)


def _standalone_train_step(ctx: TrainStepContext) -> EvaluationDataPoint:
    """``default_train_step`` on a context built by hand (see its docstring)."""
    model, accumulate, state = ctx.model, ctx.accumulate_grad_batches, ctx.accumulation_state
    if accumulate != 1 and state is None:
        raise ParamsError(
            "TrainStepContext.accumulation_state",
            f"accumulating {accumulate} batches needs the window's state across calls: pass "
            "accumulation_state=GradientAccumulationState() (one for the whole epoch)",
        )
    task = model.task_adapter
    args, kwargs, target = to_device(batch_parts(model, ctx.batch), model.device)
    with model.autocast_context()():
        output = net_output(model, model.net, args, kwargs)
    task.check(output, target)
    loss_sum, count = task.loss_terms(output, target)
    (loss_sum if ctx.scaler is None else ctx.scaler.scale(loss_sum)).backward()
    weight = float(count) + (state.normalization_weight if state is not None else 0.0)
    if state is not None:
        state.normalization_weight, state.normalization_required = weight, not task.additive
        state.loss_numerator += float(loss_sum.detach())
    if ctx.is_last_batch or (ctx.batch_idx + 1) % accumulate == 0:
        port = _port(ctx, "default", ctx.optimizer)
        status = commit_window(
            {"default": port}, None if task.additive else weight, max_norms={"default": ctx.grad_clip_norm},
            finite=(lambda: True) if ctx.scaler is not None else None,  # a scaler skips an overflowing step itself
        )
        if state is not None:
            state.normalization_weight = state.loss_numerator = 0.0
        if status == COMMITTED:
            ctx.report_update()
    stats = EpochStats()
    stats.add_output(loss_sum.detach(), count, output.detach(), target, task)
    record = stats.edps()[0]
    if not ctx.extra_metrics:
        return record
    extras = ExtraMetrics(task, ctx.extra_metrics)
    extras.add(output.detach(), target)
    return attrs.evolve(record, extra=extras.values(extras.whole()))


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
    if getattr(ctx, "scaler", None) is not None:
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
    port = _port(ctx, name, torch_optimizer)
    if commit_window({name: port}, None, max_norms={name: clip}, finite=lambda: True) == COMMITTED:
        report()
    return value
