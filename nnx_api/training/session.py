"""The training session: one ``train()`` call on one rank, driving ``nnx_core.lifecycle``.

There is one session for every entry point. ``NNModel`` is a run with one optimizer named
``"default"``; a ``Trainer`` has named optimizers; one process is a group of one. What differs
is passed in, never subclassed:

* the update owner (``nnx_api.training.owners``): the default step, a custom step, a Trainer
  step or an objective's update engine; it runs each batch and ends every window in the one
  update tail (``nnx_core.update``);
* the group behaviour: ``SingleProcess`` here, ``nnx_api.distributed`` 's ``DataParallel``
  under ``DDP()`` (epoch-start agreement, reduced statistics, every rank's RNG streams).

The session owns the rest of the seed's order: every committed update is announced through
``announce`` (each optimizer's event before any update-clock tick), validation and the
whole-epoch summary, the one monitor decision, epoch-clock ticks, the commit (the writer
writes, every rank agrees on the outcome) and the final LAST refresh. Batch statistics stay on
the device; records are built once per epoch.
"""

from __future__ import annotations

import math
import types
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import torch

from nnx_core import agreement, update
from nnx_core.commit import EpochCommit, RunFiles, commit_epoch, epoch_tags, refresh_last, weights_tag
from nnx_core.errors import ComponentRestoreError, ParamsError, ScheduleBudgetError, TrainingInputError
from nnx_core.history import EagerHistory
from nnx_core.journal import JournalWriter
from nnx_core.lifecycle import dispatch_table
from nnx_core.monitor import Monitor, MonitorDecision
from nnx_core.records import EvaluationDataPoint, IterationDataPoint
from nnx_core.schedules import PlateauRule
from nnx_adapters.collective.local import LocalCollective
from nnx_adapters.pytorch import state as torch_state
from nnx_adapters.pytorch.extras import ExtraMetrics, gathered_batches, gathered_pass
from nnx_adapters.pytorch.metrics import EpochAccumulator
from nnx_adapters.pytorch.optim import TorchClock
from nnx_api.callbacks import Callback, CallbackContext, UpdateEvent
from nnx_api.training.owners import DefaultStep
from nnx_api.training.steps import EpochStats, EvalStepContext, lookahead, score


class SingleProcess:
    """The group behaviour of one process: a group of one, so nothing to agree, reduce or gather."""

    accepted_kinds: tuple[str, ...] = ()
    writer_rank = 0
    default_step = DefaultStep

    def __init__(self) -> None:
        self.collective = LocalCollective()

    def resolve_callbacks(self, callbacks: Sequence[Any]) -> tuple[list[Any], list[Any]]:
        """(every declared callback, the ones that run here): all of them."""
        return list(callbacks), list(callbacks)

    def check(self, entry: Any) -> None:
        """One process trains anything an entry point accepts."""

    def setup(self, run_id: str, params: Any) -> None:
        """Nothing to compare with other ranks."""

    def close(self) -> None:
        """Nothing to release."""

    def kind(self, entry_kind: str) -> str:
        """The payload kind a checkpoint of this group records."""
        return entry_kind

    def begin_epoch(self, session: TrainingSession, epoch: int) -> None:
        """Nothing to agree at an epoch's start."""

    def reduce(
        self, session: TrainingSession, accumulators: Sequence[Any], batches: int, error: BaseException | None, where: str
    ) -> int:
        """A group of one's sums are already whole (an error is raised as it is): ``batches``."""
        if error is not None:
            raise error
        return batches

    def total(self, counts: torch.Tensor) -> torch.Tensor:
        """A group of one's per-batch counts are already the whole batch's."""
        return counts

    def rng(self, loaders: Sequence[Any]) -> Any:
        """This process's RNG streams."""
        return torch_state.capture_rng(loaders)

    def extras(self) -> dict[str, Any]:
        """Nothing beyond the entry's own payload."""
        return {}

    def restore_view(self, payload: Mapping[str, Any]) -> Mapping[str, Any]:
        """The payload as this process restores it."""
        return payload

    def refusal(self, payload: Mapping[str, Any], stateful: bool) -> str | None:
        """One process restores any checkpoint of its own kind."""
        return None


def named_state(payload: Mapping[str, Any]) -> tuple[Mapping[str, Any], Mapping[str, Any], Mapping[str, Any] | None]:
    """A checkpoint's optimizer states, schedule states and update counts by optimizer name (an
    NNModel checkpoint holds one optimizer, ``"default"``)."""
    if "optimizers" in payload:
        return payload["optimizers"], payload["schedules"], payload.get("update_counts")
    return {"default": payload["optimizer"]}, {"default": payload["schedule"]}, None


def restore_problems(
    payload: Mapping[str, Any], optimizers: Mapping[str, Any], schedules: Mapping[str, Any], components: Mapping[str, Any]
) -> list[str]:
    """Everything that keeps a stateful resume from restoring ``payload`` here, before anything is
    touched: optimizer names, types and parameter topology, schedule kinds, and every component."""
    saved_opts, saved_scheds, _ = named_state(payload)
    if set(saved_opts) != set(optimizers):
        return [f"checkpoint optimizers {sorted(saved_opts)} != this run's {sorted(optimizers)}"]
    problems = []
    for name, opt in optimizers.items():
        mine, saved = opt.state(), saved_opts[name]
        if saved["type"] != mine["type"]:
            problems.append(f"optimizer {name!r}: type {saved['type']} != {mine['type']}")
        if saved.get("factory") != mine.get("factory"):  # a registered factory: same id, version and config
            problems.append(f"optimizer {name!r}: factory {saved.get('factory')} != {mine.get('factory')}")
        if saved["topology"] != opt.topology():
            problems.append(f"optimizer {name!r}: parameter topology differs (names/shapes of its groups)")
        sched, saved_sched = schedules[name], saved_scheds[name]
        if ("bad_epochs" in saved_sched) != isinstance(sched, PlateauRule):
            problems.append(f"optimizer {name!r}: scheduler kind differs from the checkpoint's")
        elif isinstance(sched, TorchClock) and saved_sched["type"] != sched.state()["type"]:
            problems.append(f"optimizer {name!r}: scheduler type {saved_sched['type']} != {sched.state()['type']}")
    saved, optional = payload["components"], set(payload.get("optional_components", ()))
    for name, obj in components.items():
        if name not in saved:
            if component_required(obj):  # an optional one simply starts fresh
                problems.append(f"component {name!r} has no saved state in the checkpoint")
        elif hasattr(obj, "check_component_state"):
            problems.extend(obj.check_component_state(saved[name]))
    problems += [
        f"the checkpoint holds state of component {name!r}, which this run does not register"
        for name in saved
        if name not in components and name not in optional
    ]
    return problems


def component_required(obj: Any) -> bool:
    """Whether a resume must restore ``obj``'s saved state (``component_required = False``: an
    optional component such as ``EarlyStopping`` starts fresh when the checkpoint has none, and
    its saved state is ignored by a run that does not register it)."""
    return bool(getattr(obj, "component_required", True))


def collect_components(objects: Sequence[Any]) -> dict[str, Any]:
    """The checkpointed components among ``objects`` by name; two different objects with one name
    are refused (``ComponentRestoreError``)."""
    found: dict[str, Any] = {}
    for obj in objects:
        if not hasattr(obj, "component_spec"):
            continue
        name, _version = obj.component_spec()
        if name in found and found[name] is not obj:
            raise ComponentRestoreError([f"two components are named {name!r}; give them distinct names"])
        found[name] = obj
    return found


@attrs.frozen(kw_only=True)
class SessionSetup:
    """Everything one session is built from (named values, assembled by ``nnx_api.launch``)."""

    kind: str  # the entry's payload kind: "nnmodel" or "trainer"
    model: Any
    params: Any  # the representative NNTrainParams: epochs, loaders, metrics, monitor, phases
    run: Any
    files: RunFiles
    optimizers: Mapping[str, Any]  # name → Optimizer port (TorchOptimizer)
    schedules: Mapping[str, Any]  # name → PlateauRule | TorchClock
    primary: str
    optim_params: Mapping[str, Any]  # name → NNOptimParams (clip norms, accumulation)
    auto_step: bool
    owner: Any
    task: Any
    monitor: Monitor
    callbacks: Sequence[Callback]
    components: Mapping[str, Any]
    eval_step_fn: Callable[[EvalStepContext], Any] | None
    history: EagerHistory | JournalWriter
    group: Any
    start_epoch: int
    phase_offset: int
    trainer: Any = None
    compiled: Any = None  # the compiled forward of the default step and validation (train(compile=...))
    after_first_commit: Callable[[], None] | None = None  # the writer's step once the first epoch is durable


class TrainingSession:
    """One ``train()`` call on one rank (see the module docstring)."""

    def __init__(self, setup: SessionSetup) -> None:
        self.setup = setup
        self.kind, self.model, self.params, self.run, self.files = setup.kind, setup.model, setup.params, setup.run, setup.files
        self.optimizers, self.schedules, self.primary = dict(setup.optimizers), dict(setup.schedules), setup.primary
        self.owner, self.task, self.monitor, self.history = setup.owner, setup.task, setup.monitor, setup.history
        self.callbacks, self.components, self.group = list(setup.callbacks), dict(setup.components), setup.group
        self.collective = setup.group.collective
        self.device = self.model.device
        self.autocast = self.model.autocast_context()
        self.specs = tuple(self.params.metrics)
        self.extra_fns = self.params.extra_metrics or None  # {name: fn(y_true, y_pred)}: runtime only
        self.train_extras: ExtraMetrics | None = None  # the default step's batches, scored at the epoch's end
        self.summary_wanted = bool(self.specs) or self.params.monitor is not None
        self.update_count = 0
        self.update_counts = {name: 0 for name in self.optimizers}
        self.epoch_counts = dict(self.update_counts)
        self.skipped_windows = 0
        self.stopped_update = False
        self.stats = EpochStats()
        self.summary: Any = None
        self.decision: MonitorDecision | None = None
        self.committed_epoch = self.history.idps[-1].epoch_idx if self.history.idps else None
        self._after_first_commit = setup.after_first_commit
        self._val_warned = False
        self._iter_idx = len(self.history.idps) if isinstance(self.history, EagerHistory) else self.history.committed_records
        self._epoch_records: list[IterationDataPoint] = []
        self._prev_history = self.history.render() if isinstance(self.history, EagerHistory) and self.history.idps else None
        self._history_on_disk = False  # idps.csv holds exactly _prev_history (after this session's first commit)
        self._builtin: Any = None
        self.table = dispatch_table(self.callbacks, Callback)
        self.forward = setup.compiled  # None: model.net (the default step's and validation's forward)
        primary = self.optimizers[self.primary].optimizer
        self.ctx = CallbackContext(  # epoch: the first epoch this call trains, already in on_train_begin (as NNx)
            model=self.model, run=self.run, optimizer=primary, save_weights=self._save_weights, epoch=setup.start_epoch,
        )
        if self.kind == "trainer":
            self.ctx.optimizers = types.MappingProxyType({n: o.optimizer for n, o in self.optimizers.items()})
            self.ctx.trainer = setup.trainer
        if isinstance(self.history, JournalWriter):
            self.ctx.retention = self.history.spec.retention
        self.owner.bind(self)

    # ----------------------------------------------------------------- small views
    @property
    def loaders(self) -> list[Any]:
        """The train and validation loaders (their generators travel with the RNG streams)."""
        return [ld for ld in (self.params.train_loader, self.params.val_loader) if ld is not None]

    def schedule_object(self, name: str) -> Any:
        """What a step sees as optimizer ``name``'s scheduler: the torch scheduler or the plateau rule."""
        sched = self.schedules[name]
        return sched.scheduler if isinstance(sched, TorchClock) else sched

    def builtin_step(self) -> Any:
        """The built-in default step bound to this session (``default_train_step`` uses it)."""
        if isinstance(self.owner, DefaultStep):
            return self.owner
        if self._builtin is None:
            self._builtin = DefaultStep(self.optim_params_of(self.primary))
            self._builtin.bind(self)
        return self._builtin

    def optim_params_of(self, name: str) -> Any:
        """Optimizer ``name``'s ``NNOptimParams``."""
        return self.setup.optim_params[name]

    def mark_batch(self) -> None:
        """Record the batch's learning rate (the primary's group 0) and the update count so far."""
        self.stats.lrs.append(self.optimizers[self.primary].optimizer.param_groups[0]["lr"])
        self.stats.updates.append(self.update_count)

    # ----------------------------------------------------------------- lifecycle steps
    def epochs(self) -> range:
        """Global epoch indices this call trains."""
        return range(self.setup.start_epoch, self.params.n_epochs + self.setup.phase_offset)

    def train_epoch(self, epoch: int) -> None:
        """Every batch of the epoch through the update owner."""
        loader = self.params.train_loader
        for obj in (loader, getattr(loader, "sampler", None)):
            if hasattr(obj, "set_epoch"):
                obj.set_epoch(epoch)
        self.group.begin_epoch(self, epoch)
        self.model.net.train()
        self.stats = EpochStats()
        self.train_extras = self._extras() if isinstance(self.owner, DefaultStep) else None  # a custom step scores its own
        self.epoch_counts = {name: 0 for name in self.optimizers}
        self.summary = (
            EpochAccumulator(self.task, self.model.head.width, self.specs, full_scores=False) if self.summary_wanted else None
        )
        self.owner.begin_epoch(self, epoch)
        batch_idx = -1
        for batch_idx, (batch, is_last) in enumerate(lookahead(loader)):
            self.owner.step(self, batch, epoch, batch_idx, is_last)
            if self.stopped_update:
                return
        if batch_idx < 0:
            raise TrainingInputError(f"train_loader yielded no batches in epoch {epoch}; give it at least one batch")
        self._warn_unreported(epoch)

    def _warn_unreported(self, epoch: int) -> None:
        """NNx never infers updates around an opaque step: an update-clock schedule whose optimizer
        reported no update this epoch is warned about (once per epoch and optimizer)."""
        if not self.setup.auto_step:
            return
        for name, count in self.epoch_counts.items():
            clock = self.schedules[name]
            if count or not isinstance(clock, TorchClock) or clock.clock != "optimizer_update":
                continue
            call = "ctx.report_update()" if self.kind == "nnmodel" else f"ctx.report_update({name!r})"
            warnings.warn(
                f"epoch {epoch} reported no update of optimizer {name!r} on the optimizer_update clock; a custom "
                f"step must call {call} after each optimizer.step()",
                RuntimeWarning,
                stacklevel=3,
            )

    # ----------------------------------------------------------------- committed updates
    def after_window(self, status: str, events: Sequence[UpdateEvent]) -> None:
        """A closed window: announce its committed events, or count the skip."""
        if status == update.COMMITTED:
            self.announce(events)
        else:
            self.skipped_windows += 1

    def report(self, name: str, epoch: int, batch_idx: int) -> None:
        """``ctx.report_update(name)`` from a step function: one committed update of ``name``."""
        if name not in self.optimizers:
            raise ParamsError("report_update", f"no optimizer named {name!r}; the run's optimizers are {sorted(self.optimizers)}")
        self.announce([self.event(name, epoch, batch_idx, 1)])

    def event(self, name: str, epoch: int, batch_idx: int, microbatches: int, **losses: Any) -> UpdateEvent:
        """The event of optimizer ``name``'s next committed update."""
        return UpdateEvent(
            optimizer=name, update_idx=self.update_counts[name] + 1, epoch_idx=epoch, batch_idx=batch_idx,
            microbatches=microbatches, **losses,
        )

    def announce(self, events: Sequence[UpdateEvent]) -> None:
        """Counters; every optimizer's ``on_optimizer_update`` event of the commit; then the
        update-clock ticks; then the update listeners and the ``stop_at_update`` check."""
        ctx = self.ctx
        for e in events:
            self.update_counts[e.optimizer] += 1
            self.epoch_counts[e.optimizer] += 1
            self.update_count += 1
        ctx.update_count = self.update_count
        hooks = self.table["on_optimizer_update"]

        def deliver(event: UpdateEvent) -> None:
            for hook in hooks:
                hook(ctx, event)

        update.announce(events, deliver=deliver, tick=self._tick_update_clock, after=self._after_update)

    def _tick_update_clock(self, event: UpdateEvent) -> None:
        clock = self.schedules[event.optimizer]
        if not isinstance(clock, TorchClock) or clock.clock != "optimizer_update" or not self.setup.auto_step:
            return
        if clock.budget is not None and clock.ticks >= clock.budget:
            raise ScheduleBudgetError(
                f"update {self.update_counts[event.optimizer]} of optimizer {event.optimizer!r} is past its schedule's "
                f"horizon of {clock.budget} updates; raise total_steps (or T_max) to cover the whole run"
            )
        clock.tick()
        if event.optimizer == self.primary:
            self.ctx.update_lrs.append((self.update_count, self.optimizers[self.primary].optimizer.param_groups[0]["lr"]))

    def _after_update(self) -> None:
        ctx = self.ctx
        for listener in ctx.update_listeners:
            listener(ctx)
        if ctx.stop_at_update:
            self.stopped_update = True

    # ----------------------------------------------------------------- validation and decision
    def _extras(self) -> ExtraMetrics | None:
        """A collector for the run's ``extra_metrics`` (None when it has none)."""
        return ExtraMetrics(self.model.task_adapter, self.extra_fns) if self.extra_fns else None

    def validate(self, epoch: int) -> None:
        """Validation (built-in or ``eval_step_fn``) and the whole-epoch training summary; a
        data-parallel group adds the ranks' sums here (one reduction)."""
        val_loader = self.params.val_loader
        val: EvaluationDataPoint | None = None
        if val_loader is not None and self.setup.eval_step_fn is not None:
            with torch.no_grad():
                val = self.setup.eval_step_fn(
                    EvalStepContext(
                        model=self.model, val_loader=val_loader, epoch_idx=epoch, metrics=self.specs,
                        extra_metrics=self.extra_fns,
                    )
                )
            if not isinstance(val, EvaluationDataPoint):
                raise TrainingInputError(f"eval_step_fn must return an EvaluationDataPoint, got {type(val).__name__}")
        val_acc = val_extras = None
        if val_loader is not None and val is None:
            val_acc = EpochAccumulator(self.model.task_adapter, self.model.head.width, self.specs, full_scores=True)
            val_extras = self._extras()
        error: BaseException | None = None
        batches = 0
        if val_acc is not None:
            try:
                batches = score(self.model, val_loader, val_acc, val_extras, forward=self.forward)
            except Exception as exc:  # agreed in reduce: every rank raises it
                error = exc
        summaries = [a for a in (val_acc, self.summary) if isinstance(a, EpochAccumulator)]
        batches = self.group.reduce(self, summaries, batches, error, f"epoch {epoch} validation")
        if val_acc is not None:
            if not batches:
                raise TrainingInputError("the validation loader yielded no batches; give it at least one batch")
            val = EvaluationDataPoint(**val_acc.result())
            if val.loss is not None and not math.isfinite(val.loss) and self.collective.is_writer and not self._val_warned:
                self._val_warned = True  # once a run
                warnings.warn(
                    f"epoch {epoch}: the validation loss is {val.loss} (NaN or inf in val_loader's inputs, or in the "
                    "model's outputs); the epoch is recorded as it is and the monitor applies its on_nonfinite policy. "
                    "Check the data: torch.isfinite(x).all() for each validation batch", RuntimeWarning, stacklevel=2,
                )
            if val_extras is not None:
                index = val_loader.indices() if hasattr(val_loader, "indices") else None  # a shard's dataset rows
                val = attrs.evolve(val, extra=val_extras.values(gathered_pass(val_extras, self.collective, index)))
        summary = EvaluationDataPoint(**self.summary.result()) if self.summary is not None else None
        if summary is not None and not summary.count and self.stats.records:  # a step fn that fed no summary
            summary = records_summary(self.stats.records)
        self._record_epoch(epoch, val, summary)

    def _record_epoch(self, epoch: int, val: EvaluationDataPoint | None, summary: EvaluationDataPoint | None) -> None:
        """The epoch's iteration records; validation, summary and update count on the last one."""
        edps = self.stats.edps(self.group.total)
        if self.train_extras is not None:
            scored = [self.train_extras.values(rows) for rows in gathered_batches(self.train_extras, self.collective)]
            edps = [attrs.evolve(edp, extra=extra) if extra else edp for edp, extra in zip(edps, scored, strict=True)]
        base, last = self._iter_idx, len(edps) - 1
        self._epoch_records = [
            IterationDataPoint(
                iter_idx=base + i,
                epoch_idx=epoch,
                batch_idx=i,
                lr=self.stats.lrs[i],
                train_edp=edp,
                val_edp=val if i == last else None,
                train_summary=summary if i == last else None,
                update_count=self.stats.updates[i] if i == last else None,
            )
            for i, edp in enumerate(edps)
        ]
        self._iter_idx += len(edps)

    def decide(self, epoch: int) -> None:
        """The epoch's one monitor decision, stored on its last record."""
        last = self._epoch_records[-1]
        decision = self.monitor.decide(epoch, last)
        self.decision = decision
        self._epoch_records[-1] = attrs.evolve(last, selection=self.monitor.record(decision))
        self.history.extend(self._epoch_records)
        ctx = self.ctx
        ctx.decision, ctx.idp, ctx.idps = decision, self.history.idps[-1], self.history.idps

    def tick_epoch_clocks(self, epoch: int) -> None:
        """Each optimizer's epoch-clock schedule steps once; plateau rules follow the decision."""
        if not self.setup.auto_step:
            return
        d = self.decision
        assert d is not None
        for name, sched in self.schedules.items():
            if isinstance(sched, PlateauRule):
                groups = self.optimizers[name].optimizer.param_groups
                sched.step(epoch, d.improved, d.status, [g["lr"] for g in groups], lambda i, lr, g=groups: g[i].__setitem__("lr", lr))
            elif sched.clock == "epoch":
                sched.tick()

    # ----------------------------------------------------------------- commits
    def payload(self, epoch: int, rng: Any) -> dict[str, Any]:
        """Everything a stateful resume needs, as tensors and plain types."""
        return {
            "kind": self.group.kind(self.kind),
            "epoch": epoch,
            "weights": self.model.net.state_dict(),
            **self._training_state(),
            "rng": rng,
            "components": {name: obj.component_state() for name, obj in self.components.items()},
            "optional_components": sorted(n for n, obj in self.components.items() if not component_required(obj)),
            "update_count": self.update_count,
            "transforms": [dict(t) for cb in reversed(self.callbacks) for t in cb.checkpoint_transforms()],
            **self.group.extras(),
            **({"compile": self.forward.record.state()} if self.forward is not None else {}),
        }

    def _training_state(self) -> dict[str, Any]:
        if self.kind != "trainer":
            return {"optimizer": self.optimizers[self.primary].state(), "schedule": self.schedules[self.primary].state()}
        return {  # an NNModel resume sees a stateful checkpoint of another kind and refuses it
            "optimizer": {"type": "nnx.Trainer", "topology": None, "names": list(self.optimizers)},
            "schedule": {"type": "nnx.Trainer"},
            "optimizers": {n: o.state() for n, o in self.optimizers.items()},
            "schedules": {n: s.state() for n, s in self.schedules.items()},
            "update_counts": dict(self.update_counts),
        }

    def commit(self, epoch: int) -> None:
        """The writer commits history → LAST → phase/BEST → deferred writes; every rank agrees on
        the outcome, so a failed write stops every rank alike."""
        rng = self.group.rng(self.loaders)
        error: BaseException | None = None
        if self.collective.is_writer:
            try:
                self._write_epoch(epoch, rng)
                then, self._after_first_commit = self._after_first_commit, None
                if then is not None:  # a replacement's first commit is durable: the old run goes
                    then()
            except Exception as exc:
                error = exc
        agreement.raise_if_failed(self.collective, error, f"commit of epoch {epoch}")
        self.committed_epoch = epoch

    def _write_epoch(self, epoch: int, rng: Any) -> None:
        improved = self.decision is not None and self.decision.improved
        tags = epoch_tags(
            epoch - self.setup.phase_offset, self.params.n_epochs, phases=self.params.save_phase_checkpoints, improved=improved
        )
        journal = self.history if isinstance(self.history, JournalWriter) else None  # chunks + manifest
        history = self.history.render() if journal is None else None
        meta = {"update_count": self.update_count, "selection": self.history.idps[-1].selection.state()}  # type: ignore[union-attr]
        appendable, self._history_on_disk = self._history_on_disk, False
        commit_epoch(
            self.files,
            EpochCommit(
                epoch=epoch,
                payload=torch_state.encoder(self.payload(epoch, rng)),
                history=history,
                previous_history=self._prev_history,
                append_history=appendable,
                history_step=journal,
                tags=tags,
                meta=meta,
                deferred=list(self.ctx.deferred_checkpoint_writes),
            ),
        )
        self._prev_history, self._history_on_disk = history, journal is None

    def _save_weights(self, tag: str) -> Callable[[], None]:
        """A deferred writer of a weights-only tag holding the model as it is now."""
        epoch = self.ctx.epoch
        data = torch_state.encode({"kind": "weights", "epoch": epoch, "weights": self.model.net.state_dict()})
        return lambda: weights_tag(self.files, tag, epoch, data)

    def should_stop(self) -> bool:
        """EarlyStopping (or any callback) asked to stop after this commit."""
        return self.ctx.should_stop

    def stopped_at_update(self) -> bool:
        """A callback stopped the run at an update boundary (LAST stays at the last epoch)."""
        return self.stopped_update

    def agree(self, where: str, error: BaseException | None) -> None:
        """An agreement point of the lifecycle: any rank's error is raised on every rank."""
        agreement.raise_if_failed(self.collective, error, where)

    def finalize(self) -> None:
        """Refresh LAST from the final model (on_train_end changes and transforms persisted)."""
        if self.committed_epoch is None:
            return
        rng = self.group.rng(self.loaders)
        error: BaseException | None = None
        if self.collective.is_writer:
            try:
                refresh_last(self.files, torch_state.encoder(self.payload(self.committed_epoch, rng)))
            except Exception as exc:
                error = exc
        agreement.raise_if_failed(self.collective, error, "final LAST refresh")

    # ----------------------------------------------------------------- resume
    def restore(self, payload: Mapping[str, Any], *, stateful: bool) -> None:
        """Restore a checkpoint payload (``restore_problems`` found nothing in the way); weights,
        optimizer state and RNG streams are put back if any part of the restore fails."""
        if not stateful:
            self.model.net.load_state_dict(payload["weights"])
            return
        view = self.group.restore_view(payload)
        net = self.model.net
        saved_weights = {k: v.detach().clone() for k, v in net.state_dict().items()}
        saved_rng = torch_state.capture_rng()
        saved_optimizers = {n: o.state() for n, o in self.optimizers.items()}
        try:
            net.load_state_dict(view["weights"])
            opts, scheds, counts = named_state(view)
            for name, opt in self.optimizers.items():
                opt.load_state(opts[name])
                self.schedules[name].load_state(scheds[name])
            self.update_count = int(view["update_count"])
            self.update_counts = {n: int(c) for n, c in counts.items()} if counts else {self.primary: self.update_count}
            for name, obj in self.components.items():
                if name in view["components"]:  # an optional component without saved state starts fresh
                    obj.load_component_state(view["components"][name])
            self.ctx.update_count = self.update_count
            torch_state.restore_rng(view["rng"], self.loaders)
        except BaseException:
            net.load_state_dict(saved_weights)
            for name, opt in self.optimizers.items():
                opt.load_state(saved_optimizers[name])
            torch_state.restore_rng(saved_rng)
            raise


def records_summary(records: Sequence[EvaluationDataPoint]) -> EvaluationDataPoint:
    """A step function's epoch summary from its batch records: loss, accuracy and error averaged
    over the batches weighted by each record's ``count`` (1 where a record has none), as one pass
    over the epoch's rows would weigh them."""
    weights = [r.count if r.count else 1 for r in records]

    def mean(field: str) -> float | None:
        pairs = [(getattr(r, field), w) for r, w in zip(records, weights, strict=True) if getattr(r, field) is not None]
        total = sum(w for _, w in pairs)
        return sum(v * w for v, w in pairs) / total if pairs and total else None

    accuracy = mean("accuracy")
    return EvaluationDataPoint(
        loss=mean("loss"), accuracy=accuracy, error=None if accuracy is None else 1.0 - accuracy,
        count=sum(r.count or 0 for r in records) or None,
    )
