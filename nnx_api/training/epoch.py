"""One epoch as the update owners see it: its state, the run's committed updates, the batch statistics.

    EpochState    what an update owner receives, never the session: the run's fixed parts (model,
                  task, device, optimizers and their parameters), this epoch's statistics, and
                  ``updates``
    Updates       the run's committed updates: the counters, and each commit announced in the
                  seed's order (``nnx_core.update.announce``): every optimizer's event
                  (``on_optimizer_update``) → the update-clock ticks → the update listeners and
                  the ``stop_at_update`` check. A skipped window announces nothing.
    EpochStats    per-batch training statistics kept on the device until the epoch ends (one host
                  synchronisation for the whole epoch), read into one record per batch
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import torch

from nnx_core import update
from nnx_core.errors import ParamsError, ScheduleBudgetError, UpdateOwnerError
from nnx_core.records import EvaluationDataPoint, IterationDataPoint
from nnx_core.schedules import BUDGETED, PlateauRule
from nnx_adapters.pytorch.extras import gathered_batches
from nnx_adapters.pytorch.metrics import BatchScores
from nnx_adapters.pytorch.optim import TorchClock
from nnx_adapters.pytorch.tasks import regression_errors
from nnx_api.callbacks import CallbackContext, UpdateEvent
from nnx_api.training.context_views import PlateauScheduler


class Updates:
    """The run's committed updates (module docstring): counted here, announced in the seed's order."""

    def __init__(
        self, *, ctx: CallbackContext, hooks: Sequence[Callable[..., Any]], optimizers: Mapping[str, Any],
        schedules: Mapping[str, Any], primary: str, auto_step: bool,
    ) -> None:
        self.ctx = ctx
        self.hooks = list(hooks)  # the callbacks' on_optimizer_update, in callback order
        # a callback of the user's hears updates: the built-in step reads each window's loss for it (one host read)
        self.wants_loss = any(type(getattr(h, "__self__", h)).__module__.split(".")[0] != "nnx_api" for h in self.hooks)
        self.optimizers, self.schedules, self.primary, self.auto_step = optimizers, schedules, primary, auto_step
        self.count = 0  # every optimizer's committed updates, together
        self.counts = dict.fromkeys(optimizers, 0)  # by optimizer
        self.this_epoch = dict(self.counts)
        self.stopped = False  # a callback stopped the run at an update boundary (ctx.stop_at_update)
        self.closed = False  # a window closed (committed or skipped) since the session last looked: a commit point

    def begin_epoch(self) -> None:
        """A new epoch's per-optimizer counts (for ``warn_unreported``)."""
        self.this_epoch = dict.fromkeys(self.counts, 0)

    def restore(self, count: int, counts: Mapping[str, int] | None) -> None:
        """The counters of a stateful resume point (a checkpoint without per-optimizer counts is an
        NNModel's: all of them are the primary's)."""
        self.count = count
        self.counts = dict(counts) if counts is not None else {self.primary: count}
        self.ctx.update_count = count

    def event(self, name: str, epoch: int, batch_idx: int, microbatches: int, **losses: Any) -> UpdateEvent:
        """The event of optimizer ``name``'s next committed update."""
        return UpdateEvent(
            optimizer=name, update_idx=self.counts[name] + 1, epoch_idx=epoch, batch_idx=batch_idx,
            microbatches=microbatches, **losses,
        )

    def after_window(self, status: str, events: Sequence[UpdateEvent]) -> None:
        """A closed window: its events are announced when it committed (a skip announces nothing)."""
        self.closed = True
        if status == update.COMMITTED:
            self.announce(events)

    def report(self, name: str, epoch: int, batch_idx: int) -> None:
        """``ctx.report_update(name)`` from a step function: one committed update of ``name``."""
        if name not in self.optimizers:
            raise ParamsError("report_update", f"report_update({name!r}): no optimizer of that name; the run's "
                                                f"optimizers are {sorted(self.optimizers)}")
        self.closed = True
        self.announce([self.event(name, epoch, batch_idx, 1)])

    def announce(self, events: Sequence[UpdateEvent]) -> None:
        """Counters; every optimizer's ``on_optimizer_update`` event of the commit; then the
        update-clock ticks; then the update listeners and the ``stop_at_update`` check."""
        ctx = self.ctx
        for e in events:
            self.counts[e.optimizer] += 1
            self.this_epoch[e.optimizer] += 1
            self.count += 1
        object.__setattr__(ctx, "update_count", self.count)  # a field: the unknown-name check is not paid per update
        hooks = self.hooks

        def deliver(event: UpdateEvent) -> None:
            for hook in hooks:
                hook(ctx, event)

        update.announce(events, deliver=deliver, tick=self._tick_update_clock, after=self._after_update)

    def _tick_update_clock(self, event: UpdateEvent) -> None:
        clock = self.schedules[event.optimizer]
        if not isinstance(clock, TorchClock) or clock.clock != "optimizer_update" or not self.auto_step:
            return
        if clock.budget is not None and clock.kind in BUDGETED and clock.ticks >= clock.budget:  # cosine: warns past T_max
            derived = " (derived from len(train_loader) and n_epochs)" if getattr(
                clock, "implicit_budget", False) else ""
            raise ScheduleBudgetError(
                f"optimizer {event.optimizer!r} made committed update {self.counts[event.optimizer]}, beyond its "
                f"scheduler's {'default ' if derived else ''}budget of {clock.budget} updates{derived}; raise "
                "total_steps (or T_max) to cover the whole run"
            )
        try:
            clock.tick()
        except UpdateOwnerError as exc:
            exc.add_note(f"found at update {self.counts[event.optimizer]} of optimizer {event.optimizer!r}")
            raise
        if event.optimizer == self.primary:
            self.ctx.update_lrs.append((self.count, self.optimizers[self.primary].optimizer.param_groups[0]["lr"]))

    def _after_update(self) -> None:
        ctx = self.ctx
        for listener in ctx.update_listeners:
            listener(ctx)
        if ctx.stop_at_update:
            self.stopped = True

    def warn_unreported(self, epoch: int, kind: Any) -> None:
        """NNx never infers updates around an opaque step: when optimizers with an update-clock
        schedule reported no update this epoch, one ``UserWarning`` names them all."""
        silent = [
            name
            for name, count in self.this_epoch.items()
            if not count and isinstance(self.schedules[name], TorchClock) and self.schedules[name].clock == "optimizer_update"
        ]
        if not silent:
            return
        whose = ", ".join(f"optimizer {name!r}" for name in silent)
        calls = ", ".join(kind.report_call(name) for name in silent)
        warnings.warn(
            f"epoch {epoch}: the step reported no update for {silent}, so the optimizer_update-clock schedule of "
            f"{whose} did not step; call {calls} after each optimizer.step() it takes (an epoch whose updates were "
            "all skipped needs no report)",
            UnreportedUpdateWarning,
            stacklevel=4,
        )


@attrs.define(kw_only=True, eq=False)
class EpochState:
    """What an update owner receives (module docstring); one per session, reset each epoch."""

    model: Any
    task: Any  # the loss and scoring adapter the default step goes through
    device: Any
    autocast: Callable[[], Any]
    forward: Any  # the compiled forward (train(compile=...)), None: model.net
    optimizers: Mapping[str, Any]  # name → optimizer port
    schedules: Mapping[str, Any]  # name → PlateauRule | TorchClock
    optim_params: Mapping[str, Any]  # name → NNOptimParams
    primary: str
    named_optimizers: Mapping[str, Any] | None  # a Trainer's read-only {name: torch optimizer}, None: NNModel
    specs: tuple[Any, ...]  # the run's metric specs
    extra_fns: Mapping[str, Any] | None  # extra_metrics: {name: fn(y_true, y_pred)}
    updates: Any  # Updates, or a hand-built step's reporter (``default_train_step`` on a context built by hand)
    epoch: int = -1
    stats: EpochStats = attrs.field(factory=lambda: EpochStats())
    summary: Any = None  # the whole-epoch summary accumulator (None: no summary wanted)
    train_extras: Any = None  # the default step's extra_metrics collector, scored at the epoch's end
    batch_lr: float = 0.0  # the lr noted before the current batch's step (begin_batch)
    record_check: Callable[[EvaluationDataPoint], None] | None = None  # the first step-function record's (mark_batch)

    def begin(self, epoch: int, summary: Any) -> None:
        """A fresh epoch's statistics (an owner's ``begin_epoch`` may add its own collectors)."""
        self.epoch, self.stats, self.summary, self.train_extras = epoch, EpochStats(), summary, None

    def schedule_object(self, name: str) -> Any:
        """What a step sees as optimizer ``name``'s scheduler: the torch scheduler, or the plateau
        rule's ``PlateauScheduler`` (its ``step()`` refused: NNx steps the rule)."""
        sched = self.schedules[name]
        if isinstance(sched, PlateauRule):
            return PlateauScheduler(sched, self.optimizers[name].optimizer)
        return sched.scheduler if isinstance(sched, TorchClock) else sched

    def begin_batch(self) -> None:
        """Note the learning rate the batch's update uses (the primary's group 0), read before the
        step: an update-clock scheduler ticks right after a committed update, so a record's ``lr``
        is the one its update used (as NNx), not the next update's."""
        lr = self.optimizers[self.primary].optimizer.param_groups[0]["lr"]
        # a tensor lr (an optimizer built with one) changes in place: keep this batch's value
        self.batch_lr = lr.detach().clone() if isinstance(lr, torch.Tensor) else lr

    def mark_batch(self) -> None:
        """Record the batch's learning rate (noted by ``begin_batch``) and the update count so far;
        the call's first step-function record goes through ``record_check`` (a journal refuses a
        value it cannot store at the first batch, not at the epoch's commit)."""
        if self.record_check is not None and self.stats.records:
            check, self.record_check = self.record_check, None
            check(self.stats.records[-1])
        self.stats.lrs.append(self.batch_lr)
        self.stats.updates.append(self.updates.count)


class EpochStats:
    """Per-batch training statistics kept on the device until the epoch ends (``edps`` reads
    them with one host synchronisation for the whole epoch)."""

    __slots__ = (
        "losses", "counts", "corrects", "rows", "lrs", "updates", "records", "labels", "additive", "kind", "errors",
        "flushed",
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
        self.flushed = 0  # step-function records made into the epoch's records so far (``clear``)

    def __len__(self) -> int:
        return len(self.lrs)

    @property
    def made(self) -> int:
        """How many records step functions returned this epoch (flushed or still held)."""
        return self.flushed + len(self.records)

    def clear(self) -> None:
        """Start over in place: a step that holds this object's lists (``records.append`` bound
        before a step function runs, which may read ``ctx.idps`` and so flush) still adds to them."""
        self.flushed += len(self.records)
        for name in ("losses", "counts", "corrects", "rows", "lrs", "updates", "records", "errors"):
            getattr(self, name).clear()
        self.labels, self.additive, self.kind = None, False, None

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


def flush_records(
    state: EpochState, epoch: int, iter_idx: int, first: int, total: Any, collective: Any, *, counted: bool
) -> list[IterationDataPoint]:
    """The epoch's statistics held so far as its next records, numbered on from ``iter_idx`` and
    (within the epoch) ``first``: one host sync for all of them; an objective run's (``counted``)
    carry the committed-update count after their microbatch, other runs' None, as NNx. The
    statistics start over in place (``EpochStats.clear``), the ``extra_metrics`` collector anew (a
    mid-epoch commit's records, or those a mid-epoch read of ``ctx.idps`` made, are final)."""
    stats, extras = state.stats, state.train_extras
    if not stats.records and not stats.losses:
        return []
    edps, lrs, counts = list(stats.edps(total)), list(stats.lrs), list(stats.updates)
    if extras is not None:
        scored = [extras.values(rows) for rows in gathered_batches(extras, collective)]
        edps = [attrs.evolve(edp, extra=extra) if extra else edp for edp, extra in zip(edps, scored, strict=True)]
        state.train_extras = type(extras)(extras.task, extras.fns)
    stats.clear()
    return [
        IterationDataPoint(
            iter_idx=iter_idx + i, epoch_idx=epoch, batch_idx=first + i, lr=float(lrs[i]), train_edp=edp,
            update_count=counts[i] if counted else None,
        )
        for i, edp in enumerate(edps)
    ]


def sample_count(batch: Any) -> int:
    """How many samples a batch holds, for weighting a step function's records: the leading size of
    its first tensor (inside tuples, lists and mappings), 1 when it has none."""
    first = batch
    while isinstance(first, (tuple, list, Mapping)) and first:
        first = next(iter(first.values())) if isinstance(first, Mapping) else first[0]
    shape = getattr(first, "shape", None)
    return int(shape[0]) if shape else 1


def summary_width(model: Any) -> int | None:
    """The output width an epoch's training summary scores over: the model's head's, or None for a
    module NNx reads no width from (no ``TaskSpec(n=)``, no final ``Linear``) when no declared
    metric needs one (a step that computes its own losses, a GAN's pair: ``checks.check_run``
    asks for the width only when metrics are declared)."""
    try:
        return model.head.width
    except ParamsError:
        return None


def records_summary(records: Sequence[EvaluationDataPoint], sizes: Sequence[int] | None = None) -> EvaluationDataPoint:
    """A step function's epoch summary from its batch records: loss, accuracy and error averaged
    over the batches, each weighted by its record's ``count`` or else by its batch's sample count
    (``sizes``, one per record; 1 each when not given), as one pass over the epoch's rows would
    weigh them."""
    fallback = list(sizes) if sizes is not None and len(sizes) == len(records) else [1] * len(records)
    weights = [r.count if r.count is not None else n for r, n in zip(records, fallback, strict=True)]

    def mean(field: str) -> float | None:
        pairs = [(getattr(r, field), w) for r, w in zip(records, weights, strict=True) if getattr(r, field) is not None]
        total = sum(w for _, w in pairs)
        return sum(v * w for v, w in pairs) / total if pairs and total else None

    accuracy = mean("accuracy")
    return EvaluationDataPoint(
        loss=mean("loss"), accuracy=accuracy, error=None if accuracy is None else 1.0 - accuracy,
        count=sum(r.count or 0 for r in records) or None,
    )


class UnreportedUpdateWarning(UserWarning, RuntimeWarning):
    """A step function reported no committed update for an optimizer whose schedule runs on the
    optimizer_update clock, so that schedule did not step. A ``UserWarning`` (as NNx warns it)
    and a ``RuntimeWarning`` (as earlier releases of this package did)."""
