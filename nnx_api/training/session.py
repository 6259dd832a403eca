"""The training session: one ``train()`` call on one rank, driving ``nnx_core.lifecycle``.

There is one session for every entry point. What differs is declared, never subclassed
(``nnx_api.training.roles``):

* the entry's ``EntryKind`` (``NNMODEL``: one optimizer, ``"default"``; ``TRAINER``: named
  optimizers), as data;
* the ``UpdateOwner``: the built-in step (``nnx_api.training.builtin_step``), a custom step, a
  Trainer step or an objective's update engine (``nnx_api.training.owners``). It receives the
  epoch's state (``nnx_api.training.epoch.EpochState``), not the session, runs each batch and
  ends every window in the one update tail (``nnx_core.update``);
* the group's ``EpochGroup`` duties: ``SingleProcess`` (``nnx_api.training.group``), or
  ``nnx_api.distributed``'s ``DataParallel`` under ``DDP()`` (epoch-start agreement, reduced
  statistics, every rank's RNG streams).

The path of one built-in batch: ``train_epoch`` here → ``DefaultStep.step``
(``builtin_step.py``) → ``Updates`` and ``EpochStats`` (``epoch.py``); docs/architecture.md.

The session owns the rest of the seed's order: committed updates are counted and announced by
``Updates`` (each optimizer's event before any update-clock tick), validation and the
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

from nnx_core import agreement
from nnx_core.commit import RunFiles, epoch_tags
from nnx_core.eager_history import EagerHistory
from nnx_core.errors import TrainingInputError, TrainingPreempted
from nnx_core.journal import JournalWriter
from nnx_core.lifecycle import dispatch_table
from nnx_core.monitor import Monitor, MonitorDecision
from nnx_core.records import EvaluationDataPoint, IterationDataPoint
from nnx_core.schedules import PlateauRule
from nnx_adapters.pytorch import state as torch_state
from nnx_adapters.pytorch.batches import lookahead, restored_modes
from nnx_adapters.pytorch.extras import ExtraMetrics, gathered_pass
from nnx_adapters.pytorch.metrics import EpochAccumulator
from nnx_api.callbacks import Callback, CallbackContext
from nnx_api.config.metrics import refuse_unarrived
from nnx_api.runs.payload import CheckpointPayload, Payload, SavedState
from nnx_api.training.checkpoint import component_required, restore_checkpoint, training_state
from nnx_api.training.context_views import live_records, scheduler_view, storable_check
from nnx_api.training.epoch import EpochState, Updates, flush_records, records_summary, sample_count, summary_width
from nnx_api.training.history_setup import JournalWindow
from nnx_api.training.objectives import ObjectiveSummary
from nnx_api.training.partial import FAILED, PREEMPTED, CommitPoints, Partial, load_tree, tree_state
from nnx_api.training.roles import EntryKind, EpochGroup, UpdateOwner
from nnx_api.training.steps import EvalStepContext, eval_mode_for, score
from nnx_api.training.writer import RunWriter


@attrs.frozen(kw_only=True)
class SessionSetup:
    """Everything one session is built from (named values, assembled by ``nnx_api.launch``)."""

    kind: EntryKind  # NNMODEL or TRAINER
    model: Any
    params: Any  # the representative NNTrainParams: epochs, loaders, metrics, monitor, phases
    run: Any
    files: RunFiles
    optimizers: Mapping[str, Any]  # name → Optimizer port (TorchOptimizer)
    schedules: Mapping[str, Any]  # name → PlateauRule | TorchClock
    primary: str
    optim_params: Mapping[str, Any]  # name → NNOptimParams (clip norms, accumulation)
    auto_step: bool
    owner: UpdateOwner
    task: Any
    monitor: Monitor
    callbacks: Sequence[Callback]
    components: Mapping[str, Any]
    eval_step_fn: Callable[[EvalStepContext], Any] | None
    history: EagerHistory | JournalWriter | JournalWindow
    group: EpochGroup
    start_epoch: int
    phase_offset: int
    trainer: Any = None
    compiled: Any = None  # the compiled forward of the default step and validation (train(compile=...))
    after_first_commit: Callable[[], None] | None = None  # the writer's step once the first epoch is durable
    positioned: Any = None  # how the train loader is positioned (nnx_adapters.pytorch.positioned; None: iterated as it is)
    preemption: Any = None  # the Preemption flag of this call (None: signals keep their handlers)
    data_seed: int | None = None  # every sample's randomness in loader workers (nnx_adapters.pytorch.positioned)


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
        self.summary_wanted = bool(self.specs) or self.params.monitor is not None
        self.decision: MonitorDecision | None = None
        self.committed_epoch = self.history.idps[-1].epoch_idx if self.history.idps else None
        self._after_first_commit, self._val_warned = setup.after_first_commit, False
        self._record_sizes: list[int] = []  # this epoch's batch sample counts, one per step-function record
        self._iter_idx = len(self.history.idps) if isinstance(self.history, EagerHistory) else self.history.committed_records
        self._epoch_records: list[IterationDataPoint] = []  # this epoch's, built so far
        self._in_history, self._samples = 0, 0  # how many of them the history holds (a mid-epoch commit's); samples so far
        self.positioned = setup.positioned  # the train loader NNx positions (None: iterated as it is)
        self.inside = self.positioned is not None  # commits inside an epoch
        self.writer = RunWriter(self.files, self.history, background=self.params.async_commits, writer=self.collective.is_writer)
        self.points = CommitPoints(self.params.commit_every, setup.preemption, failed=self.writer.failed)
        self.group.ride(self.points)  # a group agrees on its commit points (a signal reaches one rank)
        self._resumed: Partial | None = None  # a mid-epoch resume point's position
        self.last_partial: Partial | None = None  # this call's last commit, when it was inside an epoch
        self._epoch_rng: Any = None  # the RNG streams when this epoch's iterator was made
        self._commit_rng: Any = None  # a mid-epoch resume point's streams, put back once its batches are skipped
        self.table = dispatch_table(self.callbacks, Callback)
        self.forward = setup.compiled  # None: model.net (the default step's and validation's forward)
        primary = self.optimizers[self.primary].optimizer
        self.ctx = CallbackContext(  # epoch: the first epoch this call trains, already in on_train_begin (as NNx)
            model=self.model, run=self.run, optimizer=primary, epoch=setup.start_epoch, idps=live_records(self),
            save_weights=lambda tag: self.writer.weights(tag, self.ctx.epoch, self.model.net),
            scheduler=None if self.kind.named_optimizers else scheduler_view(self.schedules.get(self.primary), primary))
        if self.kind.named_optimizers:
            self.ctx.optimizers = types.MappingProxyType({n: o.optimizer for n, o in self.optimizers.items()})
            self.ctx.trainer = setup.trainer
        self.ctx.retention = None if isinstance(self.history, EagerHistory) else self.history.spec.retention  # a journal's
        self.updates = Updates(
            ctx=self.ctx, hooks=self.table["on_optimizer_update"], optimizers=self.optimizers, schedules=self.schedules,
            primary=self.primary, auto_step=setup.auto_step,
        )
        self.state = EpochState(  # what the update owner works with (it never sees the session)
            model=self.model, task=self.task, device=self.device, autocast=self.autocast, forward=self.forward,
            optimizers=self.optimizers, schedules=self.schedules, optim_params=setup.optim_params, primary=self.primary,
            named_optimizers=self.ctx.optimizers if self.kind.named_optimizers else None, specs=self.specs,
            extra_fns=self.extra_fns, updates=self.updates, record_check=storable_check(self.history),
        )
        self.owner.bind(self.state)

    # ----------------------------------------------------------------- small views
    @property
    def loaders(self) -> list[Any]:
        """The train and validation loaders (their generators travel with the RNG streams)."""
        return [ld for ld in (self.params.train_loader, self.params.val_loader) if ld is not None]

    # ----------------------------------------------------------------- lifecycle steps
    def epochs(self) -> range:
        """Global epoch indices this call trains."""
        return range(self.setup.start_epoch, self.params.n_epochs + self.setup.phase_offset)

    def train_epoch(self, epoch: int) -> None:
        """Every batch of the epoch through the update owner; a commit point inside it when one is
        due (``nnx_api.training.partial``). A resumed epoch skips its consumed batches by index."""
        loader = self.params.train_loader
        for obj in (loader, getattr(loader, "sampler", None)):
            if hasattr(obj, "set_epoch"):
                obj.set_epoch(epoch)
        self.group.begin_epoch(loader, epoch)
        self.model.net.train()
        state, resumed = self.state, self._resumed if self._resumed is not None and self._resumed.epoch == epoch else None
        self._resumed = None
        self.updates.begin_epoch()
        state.begin(
            epoch,
            summary=EpochAccumulator(self.task, summary_width(self.model), self.specs, full_scores=False) if self.summary_wanted else None,
        )
        self.owner.begin_epoch(state, epoch)
        self._epoch_records, self._record_sizes, self._samples, self._in_history = [], [], 0, 0
        start, pairs = 0, None
        if resumed is not None and self.positioned is None:
            raise TrainingInputError(f"the run's LAST was committed inside epoch {epoch}; resume with the DataLoader it was "
                                     f"trained with: {self.group.position_refusal(self.params.train_loader)}")
        if self.positioned is not None:
            if resumed is not None:
                start = self._resume_partial(resumed)
                torch_state.restore_rng(resumed.epoch_rng, self.loaders)  # the epoch's order is drawn again
            self._epoch_rng = torch_state.capture_rng(self.loaders)
            back = (lambda: torch_state.restore_rng({**self._commit_rng, "loaders": []})) if resumed is not None else None  # loader generators: the replay's
            pairs = self.positioned.epoch(epoch, skip=start, at_position=back, state=None if resumed is None else resumed.loader)
        batch_idx = start - 1
        for batch_idx, (batch, is_last) in enumerate(pairs if pairs is not None else lookahead(loader), start=start):
            state.begin_batch()
            held = state.stats.made
            self.updates.closed = False
            self.owner.step(state, batch, epoch, batch_idx, is_last)
            size = sample_count(batch)
            self._samples += size
            if state.stats.made > held:  # a step function's records weigh by their batch's samples
                self._record_sizes += [size] * (state.stats.made - held)
            if self.updates.stopped:  # stop_at_update: with commit_every the update is committed
                if self.points.every is not None and self.inside and not is_last:
                    self.commit_partial(epoch, batch_idx + 1)
                return
            if self.updates.closed and not is_last:
                self._commit_point(epoch, batch_idx + 1)
        if batch_idx < 0:
            raise TrainingInputError(f"train_loader yielded no batches in epoch {epoch}; give it at least one batch")
        if self.setup.auto_step:
            self.updates.warn_unreported(epoch, self.kind)

    def _commit_point(self, epoch: int, batches: int) -> None:
        """An update boundary inside the epoch: commit when one is due; a preemption then raises
        (a loader NNx cannot position commits nothing inside an epoch: it raises at once)."""
        why = self.points.due(self.updates.count)
        if why is None:
            return
        if why == FAILED:  # the background writer's commit failed: its error, on every rank
            self.writer.settle(self.collective, "the background commit")
        if self.inside:
            self.commit_partial(epoch, batches)
        if why == PREEMPTED:
            raise self._preempted(epoch if self.inside else self.committed_epoch, committed=self.inside)

    def _preempted(self, epoch: int | None, *, committed: bool = True) -> TrainingPreempted:
        """The error of a preemption obeyed at a commit point."""
        self.writer.settle(self.collective, "the commit before a preemption")  # durable before the error says so
        return self.points.preempted_error(self.run.id, epoch, self.updates.count if committed else None)

    def _resume_partial(self, resumed: Partial) -> int:
        """A mid-epoch resume point's accumulators back in the epoch's state (this rank's part:
        ``partial_view``); the batches consumed."""
        local = self.group.partial_view(resumed.local(), self.model, self.state.summary)
        if local["summary"] is not None and self.state.summary is not None:
            load_tree(self.state.summary, local["summary"])
        self.updates.this_epoch = dict(resumed.this_epoch)
        eager = isinstance(self.history, EagerHistory)  # a journal keeps its open epoch's records (its window may not)
        self._epoch_records = [r for r in self.history.idps if r.epoch_idx == resumed.epoch] if eager else list(self.history.open)
        self._record_sizes, self._samples = list(local["record_sizes"]), int(local["samples"])
        self._in_history = len(self._epoch_records)
        return resumed.batches

    # ----------------------------------------------------------------- validation and decision
    def validate(self, epoch: int) -> None:
        """Validation (built-in or ``eval_step_fn``) and the whole-epoch training summary; a
        data-parallel group adds the ranks' sums here (one reduction)."""
        val_loader = self.params.val_loader
        val: EvaluationDataPoint | None = None
        if val_loader is not None and self.setup.eval_step_fn is not None:
            failure: BaseException | None = None
            try:
                net = self.model.net
                with restored_modes(net), torch.no_grad():  # every submodule's flag back afterwards
                    if eval_mode_for(self.setup.eval_step_fn):  # eval mode unless the step says eval_mode = False
                        net.eval()
                    val = self.setup.eval_step_fn(
                        EvalStepContext(
                            model=self.model, val_loader=val_loader, epoch_idx=epoch, metrics=self.specs,
                            extra_metrics=self.extra_fns,
                        )
                    )
                if not isinstance(val, EvaluationDataPoint):
                    raise TrainingInputError(f"eval_step_fn must return an EvaluationDataPoint, got {type(val).__name__}")
            except Exception as exc:  # a group raises it on every rank
                failure = exc
            val = self.group.join_record(val, failure, f"epoch {epoch} eval_step_fn")
        val_acc = val_extras = None
        if val_loader is not None and val is None:
            val_acc = EpochAccumulator(self.model.task_adapter, self.model.head.width, self.specs, full_scores=True)
            val_extras = ExtraMetrics(self.model.task_adapter, self.extra_fns) if self.extra_fns else None
        error: BaseException | None = None
        batches = 0
        if val_acc is not None:
            try:
                batches = score(self.model, val_loader, val_acc, val_extras, forward=self.forward)
            except Exception as exc:  # agreed in reduce: every rank raises it
                error = exc
        state = self.state
        summaries = [a for a in (val_acc, state.summary) if isinstance(a, EpochAccumulator)]
        batches = self.group.reduce(self.model, summaries, batches, error, f"epoch {epoch} validation")
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
        self._flush(epoch)
        edps, sizes = [r.train_edp for r in self._epoch_records], self._record_sizes  # sizes: a step function's records'
        if isinstance(state.summary, ObjectiveSummary):
            summary = self._objective_summary(state.summary, edps)
        else:
            summary = EvaluationDataPoint(**state.summary.result()) if state.summary is not None else None
            if summary is not None and not summary.count and sizes:  # a step fn that fed no summary
                summary = records_summary(edps, sizes)
        if self._epoch_records:  # validation and summary on the epoch's last record
            self._epoch_records[-1] = attrs.evolve(self._epoch_records[-1], val_edp=val, train_summary=summary)

    def _objective_summary(self, terms: ObjectiveSummary, edps: list[EvaluationDataPoint]) -> EvaluationDataPoint:
        """An objective run's epoch summary (every objective run has one): accuracy, error and
        count from its records, ``loss`` and each term in ``extra`` from ``terms`` (a sum term per
        sample: the group's rows summed over its ranks)."""
        samples = terms.samples
        if self.group.total is not None:
            samples = float(self.group.total(torch.tensor([[samples]], dtype=torch.float64))[0, 0])
        base = records_summary(edps, self._record_sizes) if self._record_sizes else EvaluationDataPoint()
        return attrs.evolve(base, **terms.result(samples))

    def _flush(self, epoch: int) -> list[IterationDataPoint]:
        """The batch statistics so far as the epoch's next records (``flush_records``); returns those the history lacks."""
        records = flush_records(self.state, epoch, self._iter_idx, len(self._epoch_records), self.group.total,
                                self.collective, counted=self.owner.records_updates)
        self._iter_idx, self._epoch_records = self._iter_idx + len(records), self._epoch_records + records
        return self._epoch_records[self._in_history:]

    def decide(self, epoch: int) -> None:
        """The epoch's one monitor decision, stored on its last record."""
        last = self._epoch_records[-1]
        if self.committed_epoch is None:  # the run's first epoch: what no step produces is refused before it commits
            refuse_unarrived(self.specs, self.params.monitor, last, epoch)
        decision = self.monitor.decide(epoch, last)
        self.decision = decision
        self._epoch_records[-1] = attrs.evolve(last, selection=self.monitor.record(decision))
        self.history.extend(self._epoch_records[self._in_history:])
        ctx = self.ctx
        ctx.decision, ctx.idp = decision, self.history.idps[-1]

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
    def payload(self, epoch: int, rng: Any, position: Partial | None = None) -> CheckpointPayload:
        """Everything a stateful resume needs, as tensors and plain types (``position``: a
        mid-epoch commit's)."""
        return CheckpointPayload(
            kind=self.group.kind(self.kind.name),
            epoch=epoch,
            weights=self.model.net.state_dict(),
            **training_state(
                self.optimizers, self.schedules, self.primary, self.updates.counts, named=self.kind.named_optimizers
            ),
            rng=rng,
            components=SavedState({name: obj.component_state() for name, obj in self.components.items()}),
            optional_components=sorted(n for n, obj in self.components.items() if not component_required(obj)),
            update_count=self.updates.count,
            transforms=[SavedState(dict(t)) for cb in reversed(self.callbacks) for t in cb.checkpoint_transforms()],
            distributed=self.group.distributed_record(),
            compile=self.forward.record.state() if self.forward is not None else None,
            data_seed=self.setup.data_seed if self.positioned is not None else None,  # a positioned loader's
            position=SavedState(position.state()) if position is not None else None,
        )

    def _agreed_write(self, where: str, write: Callable[[Any], None]) -> None:
        """The writer writes (given the RNG streams); every rank agrees on the outcome (a failure stops all)."""
        rng = self.group.rng(self.loaders)
        error: BaseException | None = None
        if self.collective.is_writer:
            try:
                write(rng)
            except Exception as exc:
                error = exc
        agreement.raise_if_failed(self.collective, error, where)

    def commit(self, epoch: int) -> None:
        """The epoch's commit: history → LAST → phase/BEST → deferred writes (``RunWriter``)."""
        improved = self.decision is not None and self.decision.improved
        tags = epoch_tags(
            epoch - self.setup.phase_offset, self.params.n_epochs, phases=self.params.save_phase_checkpoints, improved=improved
        )

        def write(rng: Any) -> None:  # once it is durable, a replacement's old run goes (after_first_commit)
            self.writer.write(epoch, self.payload(epoch, rng), update_count=self.updates.count, tags=tags,
                              deferred=self.ctx.deferred_checkpoint_writes, durable=self._after_first_commit)
            self._after_first_commit = None

        self._agreed_write(f"commit of epoch {epoch}", write)
        self.committed_epoch, self.last_partial = epoch, None
        self.points.mark(self.updates.count)

    def commit_partial(self, epoch: int, batches: int) -> None:
        """A mid-epoch commit at an update boundary (``nnx_api.training.partial``): the records so
        far → LAST naming the position; no BEST, phase tag or deferred write."""
        self.history.extend(self._flush(epoch), closes=False)
        self._in_history, summary = len(self._epoch_records), self.state.summary
        local = self.group.partial_state({"summary": tree_state(summary) if summary is not None else None,
                                          "samples": self._samples, "record_sizes": self._record_sizes})
        position = Partial.from_state({  # the group's: every rank's own part in ``ranks``
            "epoch": epoch, "batches": batches, "updates": sum(self.updates.this_epoch.values()), "records": len(self._epoch_records),
            "epoch_batches": len(self.positioned), "epoch_rng": self._epoch_rng, "this_epoch": self.updates.this_epoch,
            "loader": self.positioned.state(), **local})
        self._agreed_write(f"commit of epoch {epoch} at update {self.updates.count}", lambda rng: self.writer.write(
            epoch, self.payload(epoch, rng, position), update_count=self.updates.count, position=position))
        self.points.mark(self.updates.count)
        self.last_partial = position

    def should_stop(self) -> bool:
        """EarlyStopping (or any callback) asked to stop after this commit; a preemption signal
        that arrived in the epoch's last window raises here, the epoch committed."""
        if self.points.preempted:
            raise self._preempted(self.committed_epoch)
        return self.ctx.should_stop

    def stopped_at_update(self) -> bool:
        """A callback stopped the run at an update boundary (LAST stays at the last epoch)."""
        return self.updates.stopped

    def settle(self, error: BaseException | None) -> None:
        """Every commit durable before on_train_end (``nnx_core.lifecycle``); a failure stops every rank."""
        self.writer.settle(self.collective, "the last commit", after=error)

    def agree(self, where: str, error: BaseException | None) -> None:
        """An agreement point of the lifecycle: any rank's error is raised on every rank."""
        agreement.raise_if_failed(self.collective, error, where)

    def finalize(self) -> None:
        """Refresh LAST from the final model (on_train_end changes and transforms persisted)."""
        epoch = self.committed_epoch
        if epoch is not None:
            self._agreed_write("final LAST refresh", lambda rng: self.writer.refresh(self.payload(epoch, rng)))

    # ----------------------------------------------------------------- resume
    def restore(self, payload: Payload, *, stateful: bool) -> None:
        """Restore a checkpoint payload (``restore_problems`` found nothing in the way); weights,
        optimizer state and RNG streams are put back if any part of the restore fails."""
        if not stateful or not isinstance(payload, CheckpointPayload):  # a weights-only one is never stateful
            self.model.net.load_state_dict(payload.weights)
            return
        view = self.group.restore_view(payload)
        counts = restore_checkpoint(view, self.model.net, self.optimizers, self.schedules, self.components, self.loaders)
        self.updates.restore(int(view.update_count), counts)
        self.points.mark(self.updates.count)
        if view.position is not None:  # a mid-epoch commit: its epoch goes on from there (train_epoch)
            self._resumed, self._commit_rng = Partial.from_state(view.position), view.rng
            self.committed_epoch = self._resumed.epoch - 1 if self._resumed.epoch else None
