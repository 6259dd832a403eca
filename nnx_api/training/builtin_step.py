"""The built-in step: how one batch of an NNModel without a step function trains. Read
``DefaultStep.update`` top to bottom; this order is the contract (seed §2):

    forward              the batch to the device; the net (or its compiled forward) under autocast
    loss numerator       Σ of the loss over the batch's valid targets, and their count
    agree                the group's verdict on this microbatch (``sync.agree``): any failure is
                         raised (naming the batch); the denominator this microbatch adds to W
    backward             the numerator (a one-microbatch window of one process: seeded with 1/W)
    window               ``UpdateWindow.add(denominator)``; the window ends after ``accumulate``
                         microbatches or at the epoch's last batch
    window end           the one update tail (``nnx_core.update.commit_window``):
                         W → skip → unscale → finite → clip → step
    announce             ``state.updates.after_window``: each committed update's events, then the
                         update-clock ticks (a skipped window announces nothing)
    record               the batch's statistics, kept on the device (``EpochStats``)

A group says how the microbatches join (the ``StepSync`` role): ``LocalSync`` in one process,
``nnx_api.distributed``'s ``RankSync`` under ``DDP()`` (forward and backward through
``DistributedDataParallel``, the window's agreement riding in its gradient all-reduce), and
``HandBuiltSync`` for ``default_train_step`` on a step context built by hand. The step itself is
the same in all three: there is one built-in step.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from typing import Any

import attrs
import torch

from nnx_core.errors import ParamsError
from nnx_core.records import EvaluationDataPoint
from nnx_core.update import COMMITTED, UpdateWindow, commit_window
from nnx_adapters.pytorch.batches import batch_parts, net_output, to_device
from nnx_adapters.pytorch.extras import ExtraMetrics
from nnx_adapters.pytorch.scaling import ScaledLoss
from nnx_api.training.batch_checks import batch_problem
from nnx_api.training.epoch import EpochState, EpochStats
from nnx_api.training.steps import TrainStepContext, link_of, port_of


@attrs.define(slots=True)
class Microbatch:
    """One microbatch of the built-in step: its detached loss numerator, valid count, detached
    output and target (this rank's)."""

    loss: torch.Tensor
    count: int
    output: torch.Tensor
    target: torch.Tensor


class DefaultStep:
    """The built-in supervised step over the primary optimizer (module docstring)."""

    components: tuple[Any, ...] = ()
    records_updates = False  # a default-step run: records leave update_count None (as NNx)

    def __init__(self, accumulate: int, max_norm: float | None, sync: Any = None) -> None:
        self.window = UpdateWindow(accumulate)
        self.max_norm = max_norm
        self.sync = sync if sync is not None else LocalSync()
        self.net: Any = None
        self._window_loss: torch.Tensor | None = None
        self._window_count: Any = None  # the window's valid targets (its loss numerator's denominator)
        self._seed: torch.Tensor | None = None  # the last backward seed 1/W (batches repeat their count)
        self._seed_value = 0.0

    def bind(self, state: EpochState) -> None:
        """Attach to the epoch state it runs in: the module every forward goes through."""
        self.net = self.sync.bind(state, state.model.net if state.forward is None else state.forward)

    def begin_epoch(self, state: EpochState, epoch: int) -> None:
        """The epoch's ``extra_metrics`` collector (a window never spans epochs: the last batch closes it)."""
        if state.extra_fns:
            state.train_extras = ExtraMetrics(state.model.task_adapter, state.extra_fns)

    def step(self, state: EpochState, batch: Any, epoch: int, batch_idx: int, is_last: bool) -> None:
        """One batch: the update, then its statistics (on the device) and position."""
        part = self.update(state, batch, epoch, batch_idx, is_last, state.train_extras)
        state.stats.add_output(part.loss, part.count, part.output, part.target, state.task)
        state.mark_batch()

    def update(
        self, state: EpochState, batch: Any, epoch: int, batch_idx: int, is_last: bool, extras: Any = None
    ) -> Microbatch:
        """Forward, loss numerator, agreement, backward, window accounting, and the update at the
        window's end; the batch's outputs go to ``extras`` (an ``extra_metrics`` collector) when given."""
        model, task, sync, window = state.model, state.task, self.sync, self.window
        if state.forward is not None:  # where the compiled forward's call is, for its record
            state.forward.at("train", epoch, batch_idx)
        with sync.microbatch(window.closes(is_last)):  # DDP: gradients sync on the window's last microbatch only
            error: BaseException | None = None
            part: Any = None
            try:
                args, kwargs, target = parts = batch_parts(model, batch)
                valid = task.host_count(target)  # masked class targets, counted before the move: no device read
                args, kwargs, target = to_device(parts, state.device)
                with state.autocast():
                    output = net_output(model, self.net, args, kwargs)
                task.check(output, target)
                loss_sum, count = task.sum_terms(output, target, valid)
                part = Microbatch(loss=loss_sum.detach(), count=count, output=output.detach(), target=target)
            except Exception as exc:  # agreed: every rank raises it (one process: here, naming the batch)
                error = exc
            denominator = sync.agree(state, part, error, batch, epoch, batch_idx)
            if task.additive:  # a sum-reduced loss_fn: the window's gradients are not normalised
                loss_sum.backward()
                window.add(None)
            elif sync.seeds and denominator and window.accumulate == 1:
                # A one-microbatch window divides by its own count: seed the backward with 1/W
                # (the same gradient as dividing afterwards, without a pass over every gradient).
                loss_sum.backward(self._seed_of(loss_sum, 1.0 / denominator))
                window.add(1.0)
            else:
                loss_sum.backward()  # the numerator only
                window.add(denominator)
        if not sync.agrees_finite:
            self._window_loss = part.loss if self._window_loss is None else self._window_loss + part.loss
            if state.updates.wants_loss:  # counted only for a callback that hears the update's loss
                self._window_count = part.count if self._window_count is None else self._window_count + part.count
        if extras is not None:
            extras.add(output, target)
        if state.summary is not None:
            state.summary.add_loss(part.loss, count)
            state.summary.update(output, target)
        if window.ends(is_last):
            weight, microbatches = window.close()
            (window_loss, self._window_loss), (window_count, self._window_count) = (self._window_loss, None), (self._window_count, None)
            name = state.primary
            read = _read_loss(window_loss, window_count) if state.updates.wants_loss else None  # the finiteness read, too
            status = commit_window(
                {name: state.optimizers[name]}, sync.weight(weight), max_norms={name: self.max_norm},
                finite=sync.finite(window_loss) if read is None else (lambda: math.isfinite(read[0])),
            )
            loss = read[0] / read[1] if read is not None and read[1] else None
            state.updates.after_window(status, [state.updates.event(name, epoch, batch_idx, microbatches, loss=loss)])
        return part

    def _seed_of(self, loss_sum: torch.Tensor, value: float) -> torch.Tensor:
        """``value`` as a scalar like ``loss_sum``, reused while batches keep their count (one
        fill less per batch; autograd copies a seed it does not own, so reusing it is safe)."""
        seed = self._seed
        if seed is None or seed.dtype != loss_sum.dtype or seed.device != loss_sum.device or self._seed_value != value:
            seed = self._seed = torch.full((), value, dtype=loss_sum.dtype, device=loss_sum.device)
            self._seed_value = value
        return seed


# --- how the microbatches join: one process, and a context built by hand ------------------------


def batch_place(epoch: int, batch_idx: int) -> str:
    """How errors name a training batch."""
    return f"train_loader's batch {batch_idx} (0-based) of epoch {epoch}"


_BATCH_ERRORS = (RuntimeError, IndexError, TypeError, ValueError)  # what a batch unlike the first raises in torch


class LocalSync:
    """How the built-in step's microbatches join in one process: nothing to agree (a failure is
    raised here, naming what is wrong with the batch), the window's own count divides it, and its
    finiteness is read once at the window's end."""

    seeds = True  # W is known before backward: a one-microbatch window seeds its backward with 1/W
    agrees_finite = False  # finiteness is read at the window's end (one read), not agreed per microbatch
    overflow = None  # an fp16 GradScaler decides its overflow alone

    def bind(self, state: EpochState, net: Any) -> Any:
        """The module the step runs forward through: the net (or its compiled forward)."""
        return net

    def microbatch(self, closes: bool) -> contextlib.AbstractContextManager[Any]:
        """Around one microbatch's forward and backward: nothing."""
        return contextlib.nullcontext()

    def agree(
        self, state: EpochState, part: Microbatch, error: BaseException | None, batch: Any, epoch: int, batch_idx: int
    ) -> float:
        """Raise this microbatch's failure (naming what is wrong with the batch when the first
        batch's checks find it); else its denominator: the valid count."""
        if error is not None:
            where = batch_place(epoch, batch_idx)  # built only on a failure: nothing per batch
            problem = batch_problem(state.model, batch, where) if isinstance(error, _BATCH_ERRORS) else None
            if problem is None:
                raise error
            raise problem from error
        return part.count

    def weight(self, window_weight: float | None) -> float | None:
        """What the window's gradients are divided by: its denominator W."""
        return window_weight

    def finite(self, window_loss: torch.Tensor | None) -> Callable[[], bool]:
        """The window's finiteness: one read of its summed loss."""
        return lambda: window_loss is None or math.isfinite(window_loss.item())


class HandBuiltSync(LocalSync):
    """``default_train_step`` on a step context built by hand (no run): a failure is raised as it
    is, the backward takes the numerator, and finiteness is the gradients' (or, with a
    ``GradScaler``, the scaler's own skip)."""

    seeds = False

    def __init__(self, scaled: bool) -> None:
        self.scaled = scaled

    def agree(
        self, state: EpochState, part: Microbatch, error: BaseException | None, batch: Any, epoch: int, batch_idx: int
    ) -> float:
        """Raise the failure as it is; else the microbatch's valid count."""
        if error is not None:
            raise error
        return part.count

    def finite(self, window_loss: torch.Tensor | None) -> Callable[[], bool] | None:
        """A scaler skips an overflowing step itself; else the tail checks the gradients (None)."""
        return (lambda: True) if self.scaled else None


def _read_loss(window_loss: torch.Tensor | None, window_count: Any) -> list[float] | None:
    """The window's summed loss and valid targets in one host read (None: not summed here: a
    group agrees finiteness its own way)."""
    if window_loss is None or window_count is None:
        return None
    count = torch.as_tensor(window_count, dtype=torch.float32, device=window_loss.device)  # float64: not on MPS
    return torch.stack([window_loss.detach().float(), count]).tolist()


class _Reporter:
    """A hand-built context's side of committed updates: ``ctx.report_update()`` after each."""

    count = 0
    wants_loss = False  # no callback hears a hand-built context's updates

    def __init__(self, report: Callable[[], None]) -> None:
        self.report = report

    def event(self, *_: Any, **__: Any) -> None:
        """No run counts the update: nothing to describe."""

    def after_window(self, status: str, events: Any) -> None:
        """Report a committed update (as the run's step would announce it)."""
        if status == COMMITTED:
            self.report()


def _hand_built(ctx: TrainStepContext) -> tuple[EpochState, DefaultStep]:
    """The epoch state and built-in step of a context built by hand: its optimizer (through its
    ``scaler``), its clip norm, and its open window read from ``ctx.accumulation_state`` and
    ``batch_idx``."""
    model, accumulate, acc = ctx.model, ctx.accumulate_grad_batches, ctx.accumulation_state
    if getattr(ctx.precision, "effective", ctx.precision) == "fp16" and ctx.scaler is None:  # a mode or a ResolvedPrecision
        raise ParamsError("TrainStepContext.scaler", "fp16 trains through a GradScaler, and this context has none: "
                          "pass scaler=torch.amp.GradScaler(...) (ResolvedPrecision.build_scaler())")
    if accumulate != 1 and acc is None:
        raise ParamsError(
            "TrainStepContext.accumulation_state",
            f"accumulating {accumulate} batches needs the window's state across calls: pass "
            "accumulation_state=GradientAccumulationState() (one for the whole epoch)",
        )
    task, port = model.task_adapter, port_of(ctx, "default", ctx.optimizer)
    if ctx.batch_idx % accumulate == 0:
        port.zero_grad()  # a window starts: no gradient of an earlier call is added to
    port.keep_grads = True  # … and the applied gradients stay in .grad after the update, as in NNx
    state = EpochState(
        model=model, task=task if ctx.scaler is None else ScaledLoss(task, ctx.scaler), device=model.device,
        autocast=model.autocast_context(), forward=None, optimizers={"default": port},
        schedules={}, optim_params={}, primary="default", named_optimizers=None, specs=(), extra_fns=None,
        updates=_Reporter(ctx.report_update),
    )
    step = DefaultStep(accumulate, ctx.grad_clip_norm, HandBuiltSync(ctx.scaler is not None))
    step.window.microbatches = ctx.batch_idx % accumulate
    step.window.weight = acc.normalization_weight if acc is not None else 0.0
    step.bind(state)
    return state, step


def default_train_step(ctx: TrainStepContext) -> EvaluationDataPoint:
    """The built-in supervised step, callable from a custom ``train_step_fn``.

    Forward, loss numerator over valid targets, backward; at the window's end the gradient is
    divided by the window's valid-target count, clipped and applied, and the update reported
    (never report it again). Returns the batch's record, scored as the default step scores it
    (read at once: one host sync), with ``ctx.extra_metrics`` computed on the batch's valid
    targets and decoded predictions.

    On a context built by hand (no run: ``ctx.session`` is None) the same step runs on its own
    terms: the window closes at ``is_last_batch`` or every ``accumulate_grad_batches`` batches
    (counted by ``batch_idx``), its valid-target count is kept in ``ctx.accumulation_state``
    (required when accumulating), and ``ctx.report_update()`` is called after the update.
    """
    link = link_of(ctx)
    state, step = (link.session, link.builtin()) if link is not None else _hand_built(ctx)
    extras = ExtraMetrics(state.model.task_adapter, ctx.extra_metrics) if ctx.extra_metrics else None
    part = step.update(state, ctx.batch, ctx.epoch_idx, ctx.batch_idx, ctx.is_last_batch, extras)
    stats = EpochStats()
    stats.add_output(part.loss, part.count, part.output, part.target, state.task)
    record = stats.edps()[0]
    acc = ctx.accumulation_state
    if acc is not None:
        closed = step.window.microbatches == 0
        acc.normalization_weight = 0.0 if closed else float(step.window.weight)
        acc.loss_numerator = 0.0 if closed else acc.loss_numerator + float(part.loss)
        acc.normalization_required = not state.task.additive
    return record if extras is None else attrs.evolve(record, extra=extras.values(extras.whole()))
