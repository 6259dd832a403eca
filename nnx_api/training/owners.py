"""Update owners: who turns each batch into gradients and ends each window (one per run).

A run has exactly one update owner, chosen before anything is written (``owner_for``):

* ``DefaultStep`` — the built-in supervised step (NNModel without a step function): forward,
  loss numerator over the valid targets, backward; at the window's end the one update tail
  (``nnx_core.update.commit_window``: W → skip → unscale → finite → clip → step). Under fp16 a
  ``GradScaler`` scales every backward and the optimizer steps through it (a scaler-skipped
  step is no committed update).
* ``CustomStep`` — ``NNModel.train(train_step_fn=...)``: the step owns its update and reports it.
* ``TrainerStep`` — ``Trainer.train(trainer_step_fn=...)``: the same over named optimizers.
* ``ObjectiveStep`` — ``objective=...``: the shared update engine (``nnx_core.engine``) owns
  every named optimizer's update.

Every committed update goes back to the session's ``announce`` (events before update-clock ticks).
There is one default step: a group hooks its synchronisation into it (``LocalSync`` in one
process; under ``DDP()`` ``nnx_api.distributed``'s ``RankSync`` runs it through
``DistributedDataParallel`` and agrees on every microbatch before its backward).
"""

from __future__ import annotations

import math
import types
import warnings
from collections.abc import Mapping
from typing import Any

import attrs
import torch

from nnx_core.engine import UpdateEngine
from nnx_core.errors import TrainingInputError, UpdateOwnerError
from nnx_core.records import EvaluationDataPoint
from nnx_core.update import UpdateWindow, commit_window
from nnx_adapters.pytorch.batches import batch_parts, net_output, to_device
from nnx_adapters.pytorch.gradients import TorchGradientSlots
from nnx_adapters.pytorch.scaling import ScaledLoss, ScaledTorchOptimizer, TorchLossScale, make_grad_scaler
from nnx_api.training.group import LocalSync, Microbatch
from nnx_api.training.objectives import ObjectiveContext, ObjectiveResult, ObjectiveSummary, microbatch_loss, read_terms
from nnx_api.training.roles import EntryKind
from nnx_api.training.steps import GradientAccumulationState, StepLink, TrainerStepContext, TrainStepContext


class DefaultStep:
    """The built-in supervised step over the primary optimizer (see the module docstring); the
    group's ``sync`` (``LocalSync`` in one process) says how its microbatches join."""

    components: tuple[Any, ...] = ()
    records_updates = False  # a step-function / default-step run: records leave update_count None (as NNx)

    def __init__(self, optim: Any, sync: Any = None) -> None:
        self.window = UpdateWindow(optim.accumulate_grad_batches)
        self.max_norm = optim.grad_clip_norm
        self.sync = sync if sync is not None else LocalSync()
        self.net: Any = None
        self._window_loss: torch.Tensor | None = None
        self._seed: torch.Tensor | None = None  # the last backward seed 1/W (batches repeat their count)
        self._seed_value = 0.0

    def bind(self, state: Any) -> None:
        """Attach to the epoch state it runs in: the module every forward goes through."""
        self.net = self.sync.bind(state, state.model.net if state.forward is None else state.forward)

    def begin_epoch(self, state: Any, epoch: int) -> None:
        """Nothing to reset: a window never spans epochs (the last batch closes it)."""

    def step(self, state: Any, batch: Any, epoch: int, batch_idx: int, is_last: bool) -> None:
        """One batch: the update, then its statistics (on the device) and position."""
        part, denominator = self.update(state, batch, epoch, batch_idx, is_last, state.train_extras)
        self.sync.record(state, part, denominator)
        state.mark_batch()

    def update(
        self, state: Any, batch: Any, epoch: int, batch_idx: int, is_last: bool, extras: Any = None
    ) -> tuple[Microbatch, float]:
        """Forward, loss numerator, agreement, backward, window accounting, and the update at the
        window's end; the batch's outputs go to ``extras`` (an ``extra_metrics`` collector) when given.

        Returns the microbatch (on the device) and its denominator: the valid count in one
        process, the group's summed count under DDP.
        """
        model, task, sync, window = state.model, state.task, self.sync, self.window
        with sync.microbatch(window.closes(is_last)):  # DDP: gradients sync on the window's last microbatch only
            error: BaseException | None = None
            part: Any = None
            try:
                args, kwargs, target = to_device(batch_parts(model, batch), state.device)
                with state.autocast():
                    output = net_output(model, self.net, args, kwargs)
                task.check(output, target)
                loss_sum, count = task.loss_terms(output, target)
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
        if extras is not None:
            extras.add(output, target)
        if state.summary is not None:
            state.summary.add_loss(part.loss, count)
            state.summary.update(output, target)
        if window.ends(is_last):
            window_loss, self._window_loss = self._window_loss, None
            # finiteness: agreed before every backward under DDP, else one read of the window's loss
            self.close(state, epoch, batch_idx, finite=(lambda: True) if window_loss is None else
                       (lambda: math.isfinite(window_loss.item())))
        return part, denominator

    def _seed_of(self, loss_sum: torch.Tensor, value: float) -> torch.Tensor:
        """``value`` as a scalar like ``loss_sum``, reused while batches keep their count (one
        fill less per batch; autograd copies a seed it does not own, so reusing it is safe)."""
        seed = self._seed
        if seed is None or seed.dtype != loss_sum.dtype or seed.device != loss_sum.device or self._seed_value != value:
            seed = self._seed = torch.full((), value, dtype=loss_sum.dtype, device=loss_sum.device)
            self._seed_value = value
        return seed

    def close(self, state: Any, epoch: int, batch_idx: int, *, finite: Any) -> None:
        """The window's end: the one update tail, then the announcement (or the skip count)."""
        weight, micro = self.window.close()
        name = state.primary
        status = commit_window(
            {name: state.optimizers[name]}, self.sync.weight(weight), max_norms={name: self.max_norm}, finite=finite
        )
        state.after_window(status, [state.event(name, epoch, batch_idx, micro)])


def _unweighted(count: float) -> None:
    """``ctx.weigh(count)`` in one process: nothing to weigh against."""


class CustomStep:
    """``train_step_fn(ctx) -> EvaluationDataPoint``: the step owns its update and reports it."""

    components: tuple[Any, ...] = ()
    records_updates = False  # a step-function / default-step run: records leave update_count None (as NNx)

    def __init__(self, fn: Any, scaler: Any = None, sync: Any = None) -> None:
        self.fn = fn
        self.scaler = scaler
        self.sync = sync  # under DDP(): joins the step's gradients and records (nnx_api.distributed.steps)
        self.accumulation = GradientAccumulationState()
        self._steps = self._reports = 0  # this batch's optimizer.step() calls and report_update() calls
        self._warned_nonfinite = False

    def bind(self, state: Any) -> None:
        """Count the primary optimizer's real steps (a report needs one)."""
        def counted(*_: Any) -> None:
            self._steps += 1

        optimizer = state.optimizers[state.primary].optimizer
        optimizer.register_step_post_hook(counted)
        if self.sync is not None:
            self.sync.bind(optimizer, state.optim_params_of(state.primary).accumulate_grad_batches)

    def begin_epoch(self, state: Any, epoch: int) -> None:
        """A fresh accumulation state: a window never spans epochs."""
        self.accumulation = GradientAccumulationState()

    def _report(self, state: Any, name: str, epoch: int, batch_idx: int) -> None:
        """``ctx.report_update()``: one committed update, no more reports than optimizer steps."""
        self._reports += 1
        if self._reports > self._steps:
            raise UpdateOwnerError(
                f"ctx.report_update() was called {self._reports} times in epoch {epoch} batch {batch_idx} after "
                f"{self._steps} optimizer.step() call(s); report each real step once, right after it "
                "(default_train_step reports its own steps)"
            )
        state.report(name, epoch, batch_idx)

    def step(self, state: Any, batch: Any, epoch: int, batch_idx: int, is_last: bool) -> None:
        name = state.primary
        optim = state.optim_params_of(name)
        ctx = TrainStepContext(
            model=state.model,
            batch=batch,
            optimizer=state.optimizers[name].optimizer,
            scaler=self.scaler,
            grad_clip_norm=optim.grad_clip_norm,
            extra_metrics=state.extra_fns,
            accumulate_grad_batches=optim.accumulate_grad_batches,
            batch_idx=batch_idx,
            epoch_idx=epoch,
            is_last_batch=is_last,
            accumulation_state=self.accumulation,
            epoch_summary=state.summary,
            precision=state.model.precision,
            report_update=StepLink(  # carries the run: ctx.session / scheduler / weigh (nnx_api.training.steps)
                lambda: self._report(state, name, epoch, batch_idx),
                session=state,
                scheduler=state.schedule_object(name),
                weigh=_unweighted if self.sync is None else self.sync.weigh,
            ),
        )
        self._steps = self._reports = 0
        record = run_step(self.fn, ctx, self.sync, "train_step_fn", epoch, batch_idx)
        if record.loss is not None and not math.isfinite(record.loss) and not self._warned_nonfinite:
            self._warned_nonfinite = True  # once a run: the step owns its NaN guard, NNx only says so
            warnings.warn(
                f"train_step_fn returned a non-finite loss ({record.loss}) in epoch {epoch} batch {batch_idx}; it is "
                "recorded as it is (a custom step owns its NaN guard: check torch.isfinite(loss) before "
                "optimizer.step())", RuntimeWarning, stacklevel=2,
            )
        state.stats.records.append(record)
        state.mark_batch()


class TrainerStep:
    """``trainer_step_fn(ctx) -> EvaluationDataPoint`` over named optimizers (each reported by name)."""

    components: tuple[Any, ...] = ()
    records_updates = False  # a step-function / default-step run: records leave update_count None (as NNx)

    def __init__(self, fn: Any, sync: Any = None) -> None:
        self.fn = fn
        self.sync = sync  # under DDP(): joins every named optimizer's gradients and the records
        self._views: dict[str, Mapping[str, Any]] = {}

    def bind(self, state: Any) -> None:
        """Freeze the read-only views every step context shares."""
        names = list(state.optimizers)
        if self.sync is not None:
            for name in names:
                self.sync.bind(state.optimizers[name].optimizer, state.optim_params_of(name).accumulate_grad_batches)
        optims = [state.optim_params_of(n) for n in names]

        def view(values: list[Any]) -> Mapping[str, Any]:
            return types.MappingProxyType(dict(zip(names, values, strict=True)))

        self._views = {
            "optimizers": state.named_optimizers,
            "schedulers": view([state.schedule_object(n) for n in names]),
            "grad_clip_norms": view([o.grad_clip_norm for o in optims]),
            "accumulate_grad_batches": view([o.accumulate_grad_batches for o in optims]),
        }

    def begin_epoch(self, state: Any, epoch: int) -> None:
        """Nothing to reset."""

    def step(self, state: Any, batch: Any, epoch: int, batch_idx: int, is_last: bool) -> None:
        views = self._views
        ctx = TrainerStepContext(
            model=state.model,
            batch=batch,
            optimizers=views["optimizers"],
            schedulers=views["schedulers"],
            extra_metrics=state.extra_fns,
            batch_idx=batch_idx,
            epoch_idx=epoch,
            report_update=StepLink(  # carries the run and the window facts (nnx_api.training.steps)
                lambda name: state.report(name, epoch, batch_idx),
                session=state,
                weigh=_unweighted if self.sync is None else self.sync.weigh,
                is_last_batch=is_last,
                precision=state.model.precision,
                grad_clip_norms=views["grad_clip_norms"],
                accumulate_grad_batches=views["accumulate_grad_batches"],
            ),
        )
        state.stats.records.append(run_step(self.fn, ctx, self.sync, "trainer_step_fn", epoch, batch_idx))
        state.mark_batch()


class ObjectiveStep:
    """An objective's loss terms through the shared update engine (every named optimizer); each
    record carries the run's committed-update count after its microbatch (0 before the first)."""

    records_updates = True

    def __init__(self, objective: Any, engine: UpdateEngine, gradients: TorchGradientSlots, sync: Any = None) -> None:
        self.objective = objective
        self.sync = sync  # under DDP(): the readings and records summed over the ranks (nnx_api.distributed.steps)
        self.engine = engine
        self.gradients = gradients
        self.components = (engine,)
        self._after_update = getattr(objective, "after_update", None)
        self._summary: ObjectiveSummary | None = None

    def bind(self, state: Any) -> None:
        """Attach to the epoch state it runs in (nothing to prepare)."""

    def begin_epoch(self, state: Any, epoch: int) -> None:
        """An objective's whole-epoch summary is its terms' window sums (when one is wanted)."""
        self._summary = ObjectiveSummary() if state.summary is not None else None
        if self._summary is not None:
            state.summary = self._summary

    def step(self, state: Any, batch: Any, epoch: int, batch_idx: int, is_last: bool) -> None:
        ctx = ObjectiveContext(
            model=state.model, batch=batch, epoch_idx=epoch, batch_idx=batch_idx, extra_metrics=state.extra_fns,
            precision=state.model.precision,
        )
        if self.sync is None:
            result, tensors, readings = self._read(ctx)
        else:  # every rank raises any rank's failure; the engine sees the group's numbers
            where = f"objective in epoch {epoch} batch {batch_idx}"
            error: BaseException | None = None
            try:
                result, tensors, readings = self._read(ctx)
            except Exception as exc:
                error, result, tensors, readings = exc, None, [], None
            readings, joined = self.sync.readings(readings, result.record if result is not None else None, error, where)
            result = attrs.evolve(result, record=joined)
        self.gradients.set_terms(tensors)
        commit = self.engine.add(readings, is_last_batch=is_last)
        self.gradients.set_terms(())
        if self._summary is not None:
            self._summary.add(readings)
        if commit is not None:
            events = [
                state.event(name, epoch, batch_idx, commit.microbatches, loss=commit.loss, losses=dict(commit.losses))
                for name in commit.update_idx
            ]
            if commit.committed and self._after_update is not None:
                self._after_update(events)
            state.after_window(commit.status, events)
        record = result.record or EvaluationDataPoint()
        if record.loss is None:
            loss = microbatch_loss(readings)
            # a fully masked microbatch has no loss: its record still says it scored 0 samples
            record = attrs.evolve(record, loss=loss, count=0 if loss is None and record.count is None else record.count)
        state.stats.records.append(record)
        state.mark_batch()

    def _read(self, ctx: ObjectiveContext) -> tuple[ObjectiveResult, list[torch.Tensor], list[Any]]:
        """The objective's result, its numerators and their readings (one host read)."""
        result = self.objective(ctx)
        if not isinstance(result, ObjectiveResult):
            raise TrainingInputError(
                f"an objective must return ObjectiveResult(terms=[LossTerm(...), ...]), got {type(result).__name__}; "
                "a function that runs backward and steps the optimizer itself belongs in train_step_fn"
            )
        tensors, readings = read_terms(result.terms)
        return result, tensors, readings


def run_step(fn: Any, ctx: Any, sync: Any, source: str, epoch: int, batch_idx: int) -> EvaluationDataPoint:
    """A step function's record for the batch; under ``DDP()`` (``sync``) every rank raises any
    rank's failure and records the group's batch (``nnx_api.distributed.steps.CustomSync``)."""
    if sync is None:
        return checked_record(fn(ctx), source)
    sync.begin(f"{source} in epoch {epoch} batch {batch_idx}")
    error: BaseException | None = None
    local = None
    try:
        local = checked_record(fn(ctx), source)
    except Exception as exc:
        error = exc
    return sync.end(local, error)


def checked_record(record: Any, source: str) -> EvaluationDataPoint:
    """A step's return value, refused unless it is an EvaluationDataPoint. A one-element tensor
    in a number field (``loss=loss``, still holding its graph) becomes its float, so the record
    keeps no graph alive and can be written; a larger tensor is refused."""
    if not isinstance(record, EvaluationDataPoint):
        raise TrainingInputError(
            f"{source} must return an EvaluationDataPoint (e.g. nnx.EvaluationDataPoint(loss=...)), "
            f"got {type(record).__name__}"
        )
    tensors = {f.name: v for f in attrs.fields(type(record)) if isinstance(v := getattr(record, f.name), torch.Tensor)}
    if not tensors:
        return record
    wide = sorted(name for name, t in tensors.items() if t.numel() != 1)
    if wide:
        raise TrainingInputError(
            f"{source} returned tensors of several values in {', '.join(wide)}; a record holds one number per "
            "field: return loss.item() (or the batch's mean)"
        )
    return attrs.evolve(record, **{name: float(t.detach()) for name, t in tensors.items()})


@attrs.frozen(kw_only=True)
class Ownership:
    """The update owner of a run and what it changes of the session: the optimizer ports it steps
    (wrapped for fp16 loss scaling) and the task the default step's loss goes through."""

    owner: Any
    optimizers: Mapping[str, Any]
    task: Any


def _grad_scaler(device: Any, sync: Any) -> Any:
    """The run's fp16 ``GradScaler``; under ``DDP()`` its overflow flag is agreed over the ranks
    (the sync's ``overflow``: ``nnx_adapters.pytorch.scaling.AgreedGradScaler``)."""
    agree = getattr(sync, "overflow", None)
    return make_grad_scaler(device) if agree is None else make_grad_scaler(device, agree)


def owner_for(
    *,
    model: Any,
    optimizers: Mapping[str, Any],
    optim_params: Mapping[str, Any],
    primary: str,
    kind: EntryKind,
    step_fn: Any = None,
    objective: Any = None,
    group: Any = None,
) -> Ownership:
    """The run's one update owner (the checks that there is exactly one ran before)."""
    fp16 = model.precision == "fp16"  # a GradScaler (``_grad_scaler``)
    task = model.task_adapter
    if objective is not None:
        sync = group.objective_sync() if group is not None else None
        scaler = _grad_scaler(model.device, sync) if fp16 else None
        if scaler is not None:
            optimizers = {n: ScaledTorchOptimizer.wrap(o, scaler, auto_update=False) for n, o in optimizers.items()}
        params = [p for o in optimizers.values() for p in o.params]
        gradients = TorchGradientSlots(params, scaler) if sync is None else sync.slots(params, scaler)
        engine = UpdateEngine(
            optimizers,
            gradients,
            accumulate=optim_params[primary].accumulate_grad_batches,
            max_norms={n: o.grad_clip_norm for n, o in optim_params.items()},
            nonfinite=getattr(objective, "nonfinite", "fail"),
            loss_scale=TorchLossScale(scaler) if scaler is not None else None,
        )
        return Ownership(owner=ObjectiveStep(objective, engine, gradients, sync), optimizers=optimizers, task=task)
    if step_fn is not None and kind.named_optimizers:
        sync = group.custom_sync() if group is not None else None
        return Ownership(owner=TrainerStep(step_fn, sync), optimizers=optimizers, task=task)
    if group is None:
        sync = None
    else:
        sync = group.custom_sync() if step_fn is not None else group.step_sync()
    scaler = _grad_scaler(model.device, sync) if fp16 else None
    if scaler is not None:  # fp16 default or custom step: a scaled backward, steps through the scaler
        optimizers = {n: ScaledTorchOptimizer.wrap(o, scaler) for n, o in optimizers.items()}
        task = ScaledLoss(task, scaler)
    if step_fn is not None:
        owner: Any = CustomStep(step_fn, scaler, sync)
    else:
        owner = DefaultStep(optim_params[primary], sync)
    return Ownership(owner=owner, optimizers=optimizers, task=task)
