"""Your own steps and objectives under ``DDP()``: they run unchanged; gradients and records join.

``CustomSync`` — a custom ``train_step_fn`` or a ``Trainer``'s ``trainer_step_fn``. The documented
step (forward through ``ctx.model.net``, its own ``loss.backward()`` and ``optimizer.step()``)
needs no wrapper; each optimizer is hooked instead:

* **Before every ``optimizer.step()``** (a step pre-hook, so an accumulating step syncs only on
  its window's last microbatch): one small agreement (did any rank fail? is every rank stepping?),
  then every gradient of the optimizer's parameters is summed over the ranks in one all-reduce,
  each rank's share weighted by its declared denominator (``ctx.weigh(count)``; equal shares when
  no rank declared one). The summed gradient is identical on every rank, so every rank takes the
  same step; a non-finite summed gradient raises ``NonFiniteLossError`` on every rank before any
  parameter moves.
* **fp16** (the run's ``ctx.scaler``, an ``AgreedGradScaler``): its ``unscale_`` — inside
  ``scaler.step`` — agrees the overflow flag in one more agreement of the same kind, before the
  scaler decides, so every rank skips ``optimizer.step()`` alike, or steps (and joins).
* **After every batch**: one agreement of the batch's record (``joined_record``: loss, accuracy
  and ``extra`` weighted by the record's ``count``) and of the step's failure, so a step that
  raised on one rank raises on every rank, and every rank records the same global batch.

``ObjectiveSync`` — an objective: every microbatch's term readings are summed over the ranks
before the update engine sees them, and the engine's combined gradients are summed over the
ranks before the update tail (``SummedGradientSlots``).

``joined_record`` also joins a custom ``eval_step_fn``'s per-shard records into the epoch's one.

With equal per-rank batches (or declared denominators) and a step whose gradient is its loss's
mean over its rows, each update equals one process training on the union of the ranks' batches.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import torch
import torch.distributed as dist

from nnx_core import agreement
from nnx_core.errors import NonFiniteLossError, UpdateOwnerError
from nnx_core.records import EvaluationDataPoint
from nnx_adapters.pytorch.gradients import TorchGradientSlots

_STEP, _END = 1.0, 2.0  # which agreement a rank is at (a step's pre-hook, or the batch's end)
# a scaler's unscale_ (fp16) is at 2·world + 1: no mix of ranks at the three adds up to a pure sum
_WIDTH = 7  # both agreements have this many values, so a rank at one meets a rank at the other
NONFINITE = (
    "{where}: the gradient summed over the ranks is not finite; no parameter was updated. Lower the learning "
    "rate, check the inputs for NaN/inf, or set grad_clip_norm"
)


class CustomSync:
    """Joins a custom step's gradients and records across the ranks (module docstring)."""

    def __init__(self, collective: Any) -> None:
        self.collective = collective
        self.world = collective.world_size
        self.windows: dict[int, list[Any]] = {}  # per optimizer: [accumulate, declared rows, weighed?]
        self.agreed_failure = False  # the last failure was raised by an agreement (every rank has it)
        self.where = ""
        self._unscale = 2.0 * self.world + 1.0  # the fp16 overflow agreement's phase marker

    def bind(self, optimizer: torch.optim.Optimizer, accumulate: int = 1) -> None:
        """Join the gradients before each of the optimizer's steps (``accumulate``: its
        ``accumulate_grad_batches``, over which its declared rows add up)."""
        self.windows[id(optimizer)] = [accumulate, 0.0, False]
        optimizer.register_step_pre_hook(lambda opt, args, kwargs: self._join(opt))

    def weigh(self, count: float) -> None:
        """``ctx.weigh(count)``: this microbatch's loss is a mean over ``count`` rows; every
        optimizer stepped in this batch (or, accumulating, at its window's end) weighs by them."""
        for window in self.windows.values():
            window[1] += float(count)
            window[2] = True

    def begin(self, where: str) -> None:
        """A batch starts (``where`` names it in errors); an optimizer that does not accumulate
        forgets the rows declared in earlier batches."""
        self.where, self.agreed_failure = where, False
        for window in self.windows.values():
            if window[0] == 1:
                window[1], window[2] = 0.0, False

    def _agree(self, values: Sequence[float], error: BaseException | None) -> list[float]:
        try:
            return agreement.agreed_sum(self.collective, [*values, *[0.0] * (_WIDTH - len(values))], error, self.where)
        except BaseException:
            self.agreed_failure = True
            raise

    def _join(self, optimizer: torch.optim.Optimizer) -> None:
        params = [p for group in optimizer.param_groups for p in group["params"]]
        window = self.windows[id(optimizer)]
        reduced = self._agree([_STEP, window[1], 1.0 if window[2] else 0.0], None)
        self._check_phase(reduced[0], _STEP)
        total, declared = reduced[1], reduced[2]
        if declared and declared != self.world:
            self.agreed_failure = True  # the same sums on every rank: every rank raises this
            raise UpdateOwnerError(
                f"{self.where}: ctx.weigh() was called on {int(declared)} of {self.world} ranks before optimizer.step(); "
                "call it on every rank (with 0 where a rank's batch holds no rows) or on none"
            )
        share = window[1] / total if declared and total else 1.0 / self.world
        window[1], window[2] = 0.0, False
        if not sum_gradients(self.collective, params, share):  # the same summed gradient on every rank: one answer
            self.agreed_failure = True
            raise NonFiniteLossError(NONFINITE.format(where=self.where))

    def overflow(self, found: bool) -> bool:
        """The run's scaler's overflow decision (``AgreedGradScaler``): whether any rank found
        inf/NaN in its gradients at this ``unscale_``; a rank elsewhere (stepping without the
        scaler, or at the batch's end) makes every rank raise instead."""
        reduced = self._agree([self._unscale, 1.0 if found else 0.0], None)
        self._check_phase(reduced[0], self._unscale)
        return reduced[1] > 0

    def _check_phase(self, total: float, mine: float) -> None:
        if total != mine * self.world:
            self.agreed_failure = True  # every rank sees the same sum: every rank raises
            raise UpdateOwnerError(
                f"{self.where}: the ranks' steps disagree: some called optimizer.step() in this batch and others "
                "did not; a custom step must step on every rank alike (the same accumulation windows)"
            )

    def end(self, record: EvaluationDataPoint | None, error: BaseException | None) -> EvaluationDataPoint:
        """After the batch: every rank raises any rank's failure, else records the global batch."""
        if error is not None and self.agreed_failure:
            raise error  # already agreed inside optimizer.step(): every rank raises it
        return joined_record(self.collective, record, error, self.where, phase=(_END, self._check_phase))


def sum_gradients(collective: Any, params: Sequence[torch.Tensor], share: float = 1.0) -> bool:
    """Replace each parameter's gradient by the sum over the ranks of ``share`` × its gradient (one
    all-reduce of one flat buffer; a parameter without a gradient on some rank counts zeros
    there, one without a gradient on every rank keeps none). Returns whether the sum is finite —
    the same answer on every rank. Every rank calls it at the same point."""
    present = collective.all_reduce_sum([1.0 if p.grad is not None else 0.0 for p in params])
    joined = [p for p, n in zip(params, present, strict=True) if n]
    if not joined:
        return True
    flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in joined])
    if share != 1.0:
        flat.mul_(share)
    dist.all_reduce(flat)
    offset = 0
    for p in joined:
        n = p.numel()
        chunk = flat[offset : offset + n].view_as(p)
        if p.grad is None:
            p.grad = chunk.clone()
        else:
            p.grad.copy_(chunk)
        offset += n
    return bool(torch.isfinite(flat).all())


class ObjectiveSync:
    """An objective's update engine across the ranks: every microbatch's term readings are summed
    over the ranks before the engine sees them (so each window's denominators W_t, the finiteness
    decision and the records are global, the same on every rank, and each rank back-propagates
    its own numerators over the global W_t), and the combined gradients are summed over the
    ranks before the update tail — one process's update on the union of the ranks' batches."""

    def __init__(self, collective: Any) -> None:
        self.collective = collective

    def readings(
        self, readings: Sequence[Any] | None, record: EvaluationDataPoint | None, error: BaseException | None, where: str
    ) -> tuple[list[Any], EvaluationDataPoint | None]:
        """The group's readings of one microbatch, and its record joined (``joined_record``) when
        the objective returns one; every rank raises any rank's failure first."""
        world = self.collective.world_size
        count, records = agreement.agreed_sum(
            self.collective, [float(len(readings or ())), 1.0 if record is not None else 0.0], error, where
        )
        assert readings is not None
        if count != len(readings) * world or records not in (0.0, float(world)):
            raise UpdateOwnerError(f"{where}: the ranks' objectives returned different loss terms or records")
        values = [v for r in readings for v in (r.numerator, r.denominator or 0.0)]
        summed = self.collective.all_reduce_sum(values)
        joined = [
            attrs.evolve(r, numerator=summed[2 * i], denominator=None if r.denominator is None else summed[2 * i + 1])
            for i, r in enumerate(readings)
        ]
        return joined, joined_record(self.collective, record, None, where) if records else None

    def overflow(self, found: bool) -> bool:
        """The scaler's overflow decision over the group (``AgreedGradScaler``): the gradients
        were summed before the tail unscales them, so every rank found the same; agreed anyway."""
        return self.collective.all_reduce_sum([1.0 if found else 0.0])[0] > 0

    def slots(self, params: Sequence[torch.Tensor], scaler: Any = None) -> SummedGradientSlots:
        """The engine's gradient slots, their combined gradients summed over the ranks."""
        return SummedGradientSlots(params, scaler, self.collective)


class SummedGradientSlots(TorchGradientSlots):
    """Gradient slots whose combined gradients (the window's update, before the update tail) are
    summed over the ranks: each rank's are its numerators' gradients over the global W_t."""

    def __init__(self, params: Sequence[torch.Tensor], scaler: Any, collective: Any) -> None:
        super().__init__(params, scaler)
        self.collective = collective

    def combine(self, factors: Sequence[float]) -> None:
        super().combine(factors)
        sum_gradients(self.collective, self.params)  # non-finite stays non-finite: the tail decides alike


def joined_record(
    collective: Any, record: EvaluationDataPoint | None, error: BaseException | None, where: str, *,
    phase: tuple[float, Any] | None = None,
) -> EvaluationDataPoint:
    """One record for the group from each rank's (a custom step's batch, a custom validation's
    epoch): loss, accuracy and each ``extra`` value averaged with the records' ``count`` as
    weights (1 where a record has none), as one process would weigh the union's rows; ``count``
    summed; ``kind`` kept as this rank's. Any rank's ``error`` is raised on every rank first. ``phase``: the agreement's marker
    and its check (a custom step's batch end meets its optimizer steps' agreements)."""
    loss, accuracy = (None, None) if record is None else (record.loss, record.accuracy)
    w = float(record.count) if record is not None and record.count else 1.0
    extra = dict(sorted((record.extra or {}).items())) if record is not None else {}
    values = [
        phase[0] if phase else 0.0,
        (loss or 0.0) * w, w if loss is not None else 0.0,
        (accuracy or 0.0) * w, w if accuracy is not None else 0.0,
        float(record.count or 0) if record is not None else 0.0,
        float(len(extra)),
    ]
    reduced = agreement.agreed_sum(collective, values, error, where)
    if phase:
        phase[1](reduced[0], phase[0])
    assert record is not None
    if reduced[6] != len(extra) * collective.world_size:
        raise UpdateOwnerError(f"{where}: the ranks' records hold different extra values; return the same keys on every rank")
    if extra:  # weighted like the loss, in key order (every rank is past the agreement: one plain sum)
        *sums, weights = collective.all_reduce_sum([*(float(v) * w for v in extra.values()), w])
        extra = {k: total / weights for k, total in zip(extra, sums, strict=True)}
    mean_loss = reduced[1] / reduced[2] if reduced[2] else None
    mean_acc = reduced[3] / reduced[4] if reduced[4] else None
    return EvaluationDataPoint(
        loss=mean_loss, accuracy=mean_acc, error=None if mean_acc is None else 1.0 - mean_acc,
        count=int(reduced[5]) or None, extra=extra, kind=record.kind,
    )
