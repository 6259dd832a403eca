"""The epoch's state: what an update owner works with, instead of the whole training session.

An update owner (``nnx_api.training.owners``) and the group's step hook see one ``EpochState``:
the run's fixed parts (model, task, device, optimizers and their parameters), this epoch's
statistics (``stats``, ``summary``, ``train_extras``), and the session's four entry points for
committed updates (``Updates``: ``event``, ``report``, ``after_window`` and the built-in step a
custom step may call). Nothing else of the session is reachable from a step.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import attrs

from nnx_core.records import EvaluationDataPoint
from nnx_adapters.pytorch.optim import TorchClock
from nnx_api.callbacks import UpdateEvent
from nnx_api.training.steps import EpochStats


class Updates(Protocol):
    """The session's side of committed updates (``TrainingSession`` implements it)."""

    update_count: int

    def event(self, name: str, epoch: int, batch_idx: int, microbatches: int, **losses: Any) -> UpdateEvent: ...
    def report(self, name: str, epoch: int, batch_idx: int) -> None: ...
    def after_window(self, status: str, events: Sequence[UpdateEvent]) -> None: ...
    def builtin_step(self) -> Any: ...


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
    updates: Updates
    epoch: int = -1
    stats: EpochStats = attrs.field(factory=EpochStats)
    summary: Any = None  # the whole-epoch summary accumulator (None: no summary wanted)
    train_extras: Any = None  # the default step's extra_metrics collector, scored at the epoch's end
    batch_lr: float = 0.0  # the lr noted before the current batch's step (begin_batch)

    def begin(self, epoch: int, summary: Any, train_extras: Any) -> None:
        """A fresh epoch's statistics."""
        self.epoch, self.stats, self.summary, self.train_extras = epoch, EpochStats(), summary, train_extras

    def schedule_object(self, name: str) -> Any:
        """What a step sees as optimizer ``name``'s scheduler: the torch scheduler or the plateau rule."""
        sched = self.schedules[name]
        return sched.scheduler if isinstance(sched, TorchClock) else sched

    def optim_params_of(self, name: str) -> Any:
        """Optimizer ``name``'s ``NNOptimParams``."""
        return self.optim_params[name]

    def begin_batch(self) -> None:
        """Note the learning rate the batch's update uses (the primary's group 0), read before the
        step: an update-clock scheduler ticks right after a committed update, so a record's ``lr``
        is the one its update used (as NNx), not the next update's."""
        self.batch_lr = self.optimizers[self.primary].optimizer.param_groups[0]["lr"]

    def mark_batch(self) -> None:
        """Record the batch's learning rate (noted by ``begin_batch``) and the update count so far."""
        self.stats.lrs.append(self.batch_lr)
        self.stats.updates.append(self.updates.update_count)

    def event(self, name: str, epoch: int, batch_idx: int, microbatches: int, **losses: Any) -> UpdateEvent:
        """The event of optimizer ``name``'s next committed update."""
        return self.updates.event(name, epoch, batch_idx, microbatches, **losses)

    def report(self, name: str, epoch: int, batch_idx: int) -> None:
        """``ctx.report_update(name)`` from a step function: one committed update of ``name``."""
        self.updates.report(name, epoch, batch_idx)

    def after_window(self, status: str, events: Sequence[UpdateEvent]) -> None:
        """A closed window: its committed events are announced, or the skip counted."""
        self.updates.after_window(status, events)

    def builtin_step(self) -> Any:
        """The built-in default step (``default_train_step`` calls it from a custom step)."""
        return self.updates.builtin_step()


def sample_count(batch: Any) -> int:
    """How many samples a batch holds, for weighting a step function's records: the leading size of
    its first tensor (inside tuples, lists and mappings), 1 when it has none."""
    first = batch
    while isinstance(first, (tuple, list, Mapping)) and first:
        first = next(iter(first.values())) if isinstance(first, Mapping) else first[0]
    shape = getattr(first, "shape", None)
    return int(shape[0]) if shape else 1


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


def warn_unreported(epoch: int, counts: Mapping[str, int], schedules: Mapping[str, Any], kind: Any) -> None:
    """NNx never infers updates around an opaque step: when optimizers with an update-clock
    schedule reported no update this epoch (``counts``: this epoch's committed updates by
    optimizer), one ``UserWarning`` names them all."""
    silent = [
        name
        for name, count in counts.items()
        if not count and isinstance(schedules[name], TorchClock) and schedules[name].clock == "optimizer_update"
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
