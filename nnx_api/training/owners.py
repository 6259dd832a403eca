"""Update owners: who turns each batch into gradients and ends each window (one per run).

A run has exactly one update owner, chosen before anything is written (``owner_for``):

* ``DefaultStep`` (``nnx_api.training.builtin_step``) — the built-in step (NNModel without a
  step function).
* ``CustomStep`` — ``NNModel.train(train_step_fn=...)``: the step owns its update and reports it.
* ``TrainerStep`` — ``Trainer.train(trainer_step_fn=...)``: the same over named optimizers.
* ``ObjectiveStep`` — ``objective=...``: the shared update engine (``nnx_core.engine``) owns
  every named optimizer's update.

An owner receives the epoch's state (``nnx_api.training.epoch.EpochState``), never the session,
and gives every committed update to ``state.updates`` (events before update-clock ticks). The
group it trains in joins its work through a sync the group makes (``nnx_api.training.roles``:
``StepSync``, ``CustomSync``, ``ObjectiveSync``); in one process those do nothing, so no owner
asks which group it is in. Under fp16 a ``GradScaler`` scales every backward and the optimizers
step through it (a scaler-skipped step is no committed update).
"""

from __future__ import annotations

import contextlib
import math
import types
import warnings
from collections.abc import Mapping
from typing import Any

import attrs
import torch

from nnx_core.engine import UpdateEngine
from nnx_core.errors import ParamsError, TrainingInputError, UpdateOwnerError
from nnx_core.records import EvaluationDataPoint
from nnx_adapters.pytorch.gradients import TorchGradientSlots
from nnx_adapters.pytorch.scaling import ScaledLoss, ScaledTorchOptimizer, TorchLossScale, make_grad_scaler
from nnx_api.training.builtin_step import DefaultStep
from nnx_api.training.epoch import UnreportedUpdateWarning, sample_count
from nnx_api.training.objectives import ObjectiveContext, ObjectiveResult, ObjectiveSummary, microbatch_loss, read_terms
from nnx_api.training.roles import CustomSync, EntryKind, ObjectiveSync, SyncFactory
from nnx_api.training.steps import GradientAccumulationState, StepLink, TrainerStepContext, TrainStepContext


class CustomStep:
    """``train_step_fn(ctx) -> EvaluationDataPoint``: the step owns its update and reports it."""

    components: tuple[Any, ...] = ()
    records_updates = False  # a step-function / default-step run: records leave update_count None (as NNx)

    def __init__(self, fn: Any, scaler: Any, sync: CustomSync, builtin: DefaultStep) -> None:
        self.fn = fn
        self.scaler = scaler
        self.sync = sync  # joins the step's gradients and records in its group (nothing in one process)
        self.builtin = builtin  # ``default_train_step``'s step, bound on first use
        self._state: Any = None
        self.accumulation = GradientAccumulationState()
        self._steps = self._reports = 0  # this batch's optimizer.step() calls and report_update() calls
        self._warned_nonfinite = self._warned_left = self._warned_unreported = self._delegated = False

    def bind(self, state: Any) -> None:
        """Count the primary optimizer's real steps (a report needs one)."""
        def counted(*_: Any) -> None:
            self._steps += 1

        optimizer = state.optimizers[state.primary].optimizer
        optimizer.register_step_post_hook(counted)
        self.sync.bind(optimizer, state.optim_params[state.primary].accumulate_grad_batches)
        self._state = state

    def _builtin_step(self) -> DefaultStep:
        """The built-in step a ``default_train_step`` call runs, bound to the run on first use
        (under ``DDP()`` binding wraps the net: a step that never calls it never pays)."""
        if self.builtin.net is None:
            self.builtin.bind(self._state)
        self._delegated = True  # this batch's updates are the built-in step's, reported by it
        return self.builtin

    def begin_epoch(self, state: Any, epoch: int) -> None:
        """A fresh accumulation state: a window never spans epochs."""
        self.accumulation = GradientAccumulationState()

    def _report(self, state: Any, name: str, epoch: int, batch_idx: int, named: tuple[Any, ...] = ()) -> None:
        """``ctx.report_update()``: one committed update, no more reports than optimizer steps."""
        if named:
            raise ParamsError("report_update", f"ctx.report_update({', '.join(map(repr, named))}) takes no optimizer name in NNModel.train "
                                               "(the run has one optimizer); call ctx.report_update()")
        self._reports += 1
        if self._reports > self._steps == 0:
            raise UpdateOwnerError(
                f"ctx.report_update() was called in epoch {epoch} batch {batch_idx}, but ctx.optimizer never stepped in "
                "this batch: if you stepped another optimizer (one of your own), step ctx.optimizer instead (NNx "
                "checkpoints, schedules and counts it; another optimizer's state is never saved); otherwise call "
                "ctx.report_update() only right after ctx.optimizer.step()"
            )
        if self._reports > self._steps:
            raise UpdateOwnerError(
                f"ctx.report_update() was called {self._reports} times in epoch {epoch} batch {batch_idx} after "
                f"{self._steps} optimizer.step() call(s); report each real step once, right after it "
                "(default_train_step reports its own steps)"
            )
        state.updates.report(name, epoch, batch_idx)

    def step(self, state: Any, batch: Any, epoch: int, batch_idx: int, is_last: bool) -> None:
        name = state.primary
        optim = state.optim_params[name]
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
                lambda *named: self._report(state, name, epoch, batch_idx, named),
                session=state,
                builtin=self._builtin_step,
                scheduler=state.schedule_object(name),
                weigh=self.sync.weigh,
            ),
        )
        self._steps = self._reports = 0
        self._delegated = False
        record = run_step(self.fn, ctx, self.sync, "train_step_fn", epoch, batch_idx, state.autocast)
        if self._steps > self._reports and not (self._warned_unreported or self._delegated):
            self._warned_unreported = True  # once a run: fewer reports than real steps
            warnings.warn(
                f"train_step_fn stepped ctx.optimizer {self._steps} time(s) in epoch {epoch} batch {batch_idx} but called "
                f"ctx.report_update() {self._reports} time(s): an unreported update is not counted, scheduled (optimizer_update "
                "clock), checkpointed as an update or heard by on_optimizer_update; call ctx.report_update() right after "
                "each ctx.optimizer.step()", UnreportedUpdateWarning, stacklevel=2,
            )
        if record.loss is not None and not math.isfinite(record.loss) and not self._warned_nonfinite:
            self._warned_nonfinite = True  # once a run: the step owns its NaN guard, NNx only says so
            warnings.warn(
                f"train_step_fn returned a non-finite loss ({record.loss}) in epoch {epoch} batch {batch_idx}; it is "
                "recorded as it is (a custom step owns its NaN guard: check torch.isfinite(loss) before "
                "optimizer.step())", RuntimeWarning, stacklevel=2,
            )
        if is_last and not self._steps and not self._warned_left:
            self._left_in_grad(ctx.optimizer, epoch, batch_idx)
        state.stats.records.append(record)
        state.mark_batch()

    def _left_in_grad(self, optimizer: Any, epoch: int, batch_idx: int) -> None:
        """An epoch that ends inside an accumulation window nobody stepped: said once a run when
        gradients are left in ``.grad`` (the next epoch would drop them, or add to them, silently)."""
        params = (p for group in optimizer.param_groups for p in group["params"])
        if any(p.grad is not None and bool(p.grad.any()) for p in params):
            self._warned_left = True
            warnings.warn(
                f"epoch {epoch} ended (batch {batch_idx}) without optimizer.step() after gradients were accumulated: they "
                "are left in .grad, where the next epoch's zero_grad() drops them (or its first backward adds to them). "
                "Step the trailing window on ctx.is_last_batch, as the built-in step does, or call "
                "optimizer.zero_grad() there to drop it on purpose", RuntimeWarning, stacklevel=2,
            )


class TrainerStep:
    """``trainer_step_fn(ctx) -> EvaluationDataPoint`` over named optimizers (each reported by name)."""

    components: tuple[Any, ...] = ()
    records_updates = False  # a step-function / default-step run: records leave update_count None (as NNx)

    def __init__(self, fn: Any, sync: CustomSync) -> None:
        self.fn = fn
        self.sync = sync  # joins every named optimizer's gradients and the records in its group
        self._views: dict[str, Mapping[str, Any]] = {}

    def bind(self, state: Any) -> None:
        """Freeze the read-only views every step context shares."""
        names = list(state.optimizers)
        for name in names:
            self.sync.bind(state.optimizers[name].optimizer, state.optim_params[name].accumulate_grad_batches)
        optims = [state.optim_params[n] for n in names]

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
                lambda *name: state.updates.report(_named(name, state.optimizers), epoch, batch_idx),
                session=state,
                weigh=self.sync.weigh,
                is_last_batch=is_last,
                precision=state.model.precision,
                grad_clip_norms=views["grad_clip_norms"],
                accumulate_grad_batches=views["accumulate_grad_batches"],
            ),
        )
        state.stats.records.append(run_step(self.fn, ctx, self.sync, "trainer_step_fn", epoch, batch_idx, state.autocast))
        state.mark_batch()


def _named(name: tuple[Any, ...], optimizers: Mapping[str, Any]) -> Any:
    """The optimizer a Trainer step's ``ctx.report_update(...)`` names: its one argument; none
    names the run's only optimizer, and is refused when there are several."""
    if len(name) == 1:
        return name[0]
    if not name and len(optimizers) == 1:
        return next(iter(optimizers))
    calls = " or ".join(f"ctx.report_update({n!r})" for n in optimizers)
    raise UpdateOwnerError(
        f"ctx.report_update() in a Trainer step names the one optimizer that stepped, got {len(name)} names; this run "
        f"has {len(optimizers)} optimizers {sorted(optimizers)}: call {calls} right after that optimizer's step()"
    )


class ObjectiveStep:
    """An objective's loss terms through the shared update engine (every named optimizer); each
    record carries the run's committed-update count after its microbatch (0 before the first)."""

    records_updates = True

    def __init__(self, objective: Any, engine: UpdateEngine, gradients: TorchGradientSlots, sync: ObjectiveSync) -> None:
        self.objective = objective
        self.sync = sync  # the readings and records summed over the group's ranks (nothing in one process)
        self.engine = engine
        self.gradients = gradients
        self.components = (engine,)
        self._after_update = getattr(objective, "after_update", None)
        self._summary = ObjectiveSummary()

    def bind(self, state: Any) -> None:
        """Attach to the epoch state it runs in (nothing to prepare)."""

    def begin_epoch(self, state: Any, epoch: int) -> None:
        """An objective's whole-epoch summary is its terms' epoch sums, kept on every objective run
        (host-side sums of readings already read; ``ObjectiveSummary``)."""
        self._summary = ObjectiveSummary()
        state.summary = self._summary

    def step(self, state: Any, batch: Any, epoch: int, batch_idx: int, is_last: bool) -> None:
        ctx = ObjectiveContext(
            model=state.model, batch=batch, epoch_idx=epoch, batch_idx=batch_idx, extra_metrics=state.extra_fns,
            precision=state.model.precision,
        )
        where = f"objective in epoch {epoch} batch {batch_idx}"
        error: BaseException | None = None
        try:
            with state.autocast():  # the run's precision around the objective, as around the built-in forward
                result, tensors, readings = self._read(ctx)
        except Exception as exc:  # raised on every rank of the group (in one process: as it is)
            error, result, tensors, readings = exc, None, [], None
        readings, joined = self.sync.readings(readings, result.record if result is not None else None, error, where)
        self.gradients.set_terms(tensors)
        try:
            commit = self.engine.add(readings, is_last_batch=is_last)
        except RuntimeError as exc:  # the objective ran backward itself: NNx's backward finds the graph freed
            if "backward through the graph a second time" not in str(exc):
                raise
            raise UpdateOwnerError(
                f"{where}: the loss terms' graph was already back-propagated when NNx ran backward on it: an objective "
                "returns its loss terms and never calls backward (NNx does, then clips and steps every optimizer); "
                "remove .backward() from the objective, or own the backward and the step in a step function "
                "(train_step_fn, or a Trainer's trainer_step_fn); a term built from an earlier batch's graph gives the "
                "same error: detach it"
            ) from exc
        self.gradients.set_terms(())
        self._summary.add(readings, sample_count(batch))
        if commit is not None:
            events = [
                state.updates.event(name, epoch, batch_idx, commit.microbatches, loss=commit.loss, losses=dict(commit.losses))
                for name in commit.update_idx
            ]
            if commit.committed and self._after_update is not None:
                self._after_update(events)
            state.updates.after_window(commit.status, events)
        record = joined or EvaluationDataPoint()
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


def run_step(
    fn: Any, ctx: Any, sync: CustomSync, source: str, epoch: int, batch_idx: int, autocast: Any = contextlib.nullcontext
) -> EvaluationDataPoint:
    """A step function's record for the batch, the function run under the run's autocast
    (``autocast``: ``model.autocast_context()``, a no-op in fp32); in a group every rank raises
    any rank's failure and records the group's batch (``nnx_api.distributed.steps.CustomSync``)."""
    sync.begin(f"{source} in epoch {epoch} batch {batch_idx}")
    error: BaseException | None = None
    local = None
    try:
        with autocast():
            returned = fn(ctx)
        local = checked_record(returned, source)
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
    """The run's fp16 ``GradScaler``; in a group its overflow flag is agreed over the ranks (the
    sync's ``overflow``: ``nnx_adapters.pytorch.scaling.AgreedGradScaler``; None in one process)."""
    return make_grad_scaler(device) if sync.overflow is None else make_grad_scaler(device, sync.overflow)


def owner_for(
    *,
    model: Any,
    optimizers: Mapping[str, Any],
    optim_params: Mapping[str, Any],
    primary: str,
    kind: EntryKind,
    group: SyncFactory,
    step_fn: Any = None,
    objective: Any = None,
) -> Ownership:
    """The run's one update owner, with the syncs ``group`` makes (the checks that there is
    exactly one owner ran before)."""
    fp16 = model.precision == "fp16"  # a GradScaler (``_grad_scaler``)
    task = model.task_adapter
    if objective is not None:
        sync = group.objective_sync()
        scaler = _grad_scaler(model.device, sync) if fp16 else None
        if scaler is not None:
            optimizers = {n: ScaledTorchOptimizer.wrap(o, scaler, auto_update=False) for n, o in optimizers.items()}
        gradients = sync.slots([p for o in optimizers.values() for p in o.params], scaler)
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
        return Ownership(owner=TrainerStep(step_fn, group.custom_sync()), optimizers=optimizers, task=task)
    optim = optim_params[primary]
    builtin = DefaultStep(optim.accumulate_grad_batches, optim.grad_clip_norm, group.step_sync())
    sync = group.custom_sync() if step_fn is not None else builtin.sync
    scaler = _grad_scaler(model.device, sync) if fp16 else None
    if scaler is not None:  # fp16 default or custom step: a scaled backward, steps through the scaler
        optimizers = {n: ScaledTorchOptimizer.wrap(o, scaler) for n, o in optimizers.items()}
        task = ScaledLoss(task, scaler)
    owner = CustomStep(step_fn, scaler, sync, builtin) if step_fn is not None else builtin
    return Ownership(owner=owner, optimizers=optimizers, task=task)
