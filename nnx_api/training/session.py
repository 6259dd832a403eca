"""The training session: the composition root that drives ``nnx_core.lifecycle`` with torch.

``TrainingSession`` implements the ``LifecycleDriver`` steps (train an epoch, validate, decide,
tick epoch clocks, commit, finalize) for one ``NNModel.train`` call. The order itself lives in
``nnx_core.lifecycle``; the commit protocol in ``nnx_core.commit``; update windows in
``nnx_core.window``. Here we only wire torch objects to them, keeping the per-batch path free of
host synchronisation and Python object churn: batch statistics stay on the device and records
are built once per epoch.
"""

from __future__ import annotations

import contextlib
import math
import os
import uuid
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

import attrs
import torch

from nnx_core.commit import BEST, LAST, AttemptRecord, EpochCommit, RunFiles, TagManifest, commit_epoch, phase_tags
from nnx_core.errors import (
    ComponentRestoreError,
    ScheduleBudgetError,
    TrainingInputError,
)
from nnx_core.history import EagerHistory
from nnx_core.journal import JournalWriter
from nnx_core.lifecycle import dispatch_table
from nnx_core.monitor import Monitor, MonitorDecision
from nnx_core.records import EvaluationDataPoint, IterationDataPoint
from nnx_core.schedules import ClockComponent, PlateauRule
from nnx_core.window import UpdateWindow, commit_update
from nnx_adapters.pytorch import state as torch_state
from nnx_adapters.pytorch.metrics import EpochAccumulator, metric_mode
from nnx_adapters.pytorch.optim import TorchClock, TorchOptimizer, build_scheduler
from nnx_api.callbacks import Callback, CallbackContext, UpdateEvent


def now() -> str:
    """UTC timestamp for attempt records."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def progress_enabled(flag: bool | None) -> bool:
    """The progress bar is on unless ``progress=False`` or ``NNX_PROGRESS=0``."""
    if flag is not None:
        return flag
    return os.environ.get("NNX_PROGRESS", "1").lower() not in ("0", "false", "no", "off")


def lookahead(loader: Any) -> Iterator[tuple[Any, bool]]:
    """``(batch, is_last)`` pairs, knowing the last batch without ``len``."""
    it = iter(loader)
    try:
        current = next(it)
    except StopIteration:
        return
    for nxt in it:
        yield current, False
        current = nxt
    yield current, True


def split_batch(batch: Any) -> tuple[Any, Any]:
    """``(inputs, targets)`` of a batch given as a 2-sequence."""
    if not isinstance(batch, (tuple, list)) or len(batch) != 2:
        raise TrainingInputError(
            f"a batch must be (inputs, targets), got {type(batch).__name__}"
            + (f" of length {len(batch)}" if isinstance(batch, (tuple, list)) else "")
            + "; use a custom train_step_fn for other batch layouts"
        )
    return batch[0], batch[1]


def to_device(value: Any, device: torch.device) -> Any:
    """Move a tensor (or tuple/list of tensors) to ``device``."""
    if isinstance(value, torch.Tensor):
        return value.to(device, non_blocking=True) if value.device != device else value
    if isinstance(value, (tuple, list)):
        return type(value)(to_device(v, device) for v in value)
    return value


@attrs.define(kw_only=True)
class TrainStepContext:
    """What a custom ``train_step_fn(ctx)`` receives for one batch.

    A custom step owns zero_grad, forward, loss, backward, ``optimizer.step()`` and its NaN guard;
    after each real optimizer step it must call ``ctx.report_update()`` (once). It may instead
    delegate to ``default_train_step(ctx)``, which reports its own updates.
    """

    model: Any
    batch: Any
    optimizer: torch.optim.Optimizer
    scheduler: Any
    grad_clip_norm: float | None
    accumulate_grad_batches: int
    batch_idx: int
    epoch_idx: int
    is_last_batch: bool
    precision: Any
    report_update: Callable[[], None]
    session: Any = attrs.field(repr=False)


@attrs.define(kw_only=True)
class EvalStepContext:
    """What a custom ``eval_step_fn(ctx)`` receives once per epoch (it owns the whole loader)."""

    model: Any
    val_loader: Any
    epoch_idx: int
    metrics: tuple[Any, ...] = ()


class EpochStats:
    """Per-batch training statistics kept on the device until the epoch ends."""

    __slots__ = ("losses", "counts", "corrects", "rows", "lrs", "updates", "records")

    def __init__(self) -> None:
        self.losses: list[torch.Tensor] = []
        self.counts: list[int] = []
        self.corrects: list[torch.Tensor] = []
        self.rows: list[int | None] = []
        self.lrs: list[float] = []
        self.updates: list[int] = []
        self.records: list[EvaluationDataPoint] = []  # custom steps return records directly

    def __len__(self) -> int:
        return len(self.lrs)

    def edps(self) -> list[EvaluationDataPoint]:
        """One training record per batch (one host sync for the whole epoch)."""
        if self.records:
            return self.records
        losses = torch.stack(self.losses).tolist()
        corrects = torch.stack(self.corrects).tolist() if self.corrects else [None] * len(losses)
        out = []
        for loss, count, correct, rows in zip(losses, self.counts, corrects, self.rows, strict=True):
            denominator = rows if rows is not None else count
            acc = correct / denominator if correct is not None and denominator else None
            out.append(
                EvaluationDataPoint(
                    loss=loss / count if count else None,
                    accuracy=acc,
                    error=None if acc is None else 1.0 - acc,
                    count=count,
                )
            )
        return out


class TrainingSession:
    """One ``train()`` call: optimizer, schedules, monitor, components, history and commits."""

    def __init__(
        self,
        *,
        model: Any,
        params: Any,
        run: Any,
        files: RunFiles,
        callbacks: Sequence[Callback],
        components: Sequence[Any],
        train_step_fn: Callable[[TrainStepContext], Any] | None,
        eval_step_fn: Callable[[EvalStepContext], Any] | None,
        optimizer: TorchOptimizer,
        start_epoch: int,
        phase_offset: int,
        history: EagerHistory | JournalWriter,
    ) -> None:
        self.model = model
        self.params = params
        self.run = run
        self.files = files
        self.callbacks = list(callbacks)
        self.train_step_fn = train_step_fn
        self.eval_step_fn = eval_step_fn
        self.opt = optimizer
        self.optim_params = params.optim
        self.task = model.task_adapter
        self.device = model.device
        self.start_epoch = start_epoch
        self.phase_offset = phase_offset
        self.history = history
        self.window = UpdateWindow(params.optim.accumulate_grad_batches)
        self.update_count = 0
        self.skipped_windows = 0
        self.epoch_updates = 0
        self.committed_epoch: int | None = None
        self.committed_this_call = False
        self.stopped_update = False
        self.table = dispatch_table(self.callbacks, Callback)
        self.ctx = CallbackContext(model=model, run=run, optimizer=optimizer.optimizer, save_weights=self._save_weights)
        if isinstance(history, JournalWriter):
            self.ctx.retention = history.spec.retention
        self.decision: MonitorDecision | None = None
        self._epoch_last: IterationDataPoint | None = None
        self._window_loss: torch.Tensor | None = None
        self._iter_idx = 0
        self._prev_history: bytes | None = history.render() if isinstance(history, EagerHistory) and history.idps else None
        self.autocast = model.autocast_context()

        specs = tuple(params.metrics)
        mode = metric_mode(params.monitor.metric, specs) if params.monitor else "min"
        self.monitor = Monitor(params.monitor, mode)
        self.specs = specs
        self.summary_wanted = bool(specs) or params.monitor is not None
        sched = params.scheduler
        kind = sched.resolved_kind.value
        self.plateau: PlateauRule | None = None
        self.clock: TorchClock | None = None
        if kind == "reduce_lr_on_plateau":
            self.plateau = PlateauRule(
                factor=sched.factor, patience=sched.patience, cooldown=sched.cooldown, min_lr=sched.min_lr
            )
        else:
            self.clock = build_scheduler(
                optimizer.optimizer,
                kind,
                clock=sched.clock,
                horizon=self.horizon(),
                min_lr=sched.min_lr,
                factor=sched.factor,
                patience=sched.patience,
                cooldown=sched.cooldown,
                threshold=sched.threshold,
                step_size=sched.step_size,
                T_max=sched.T_max,
                max_lr=sched.max_lr,
                total_steps=sched.total_steps,
                warmup_steps=sched.warmup_steps,
            )
        clock_parts = [ClockComponent(self.clock)] if self.clock is not None and self.clock.clock == "optimizer_update" else []
        self.components = self._collect_components([*components, *clock_parts])

    # ----------------------------------------------------------------- setup helpers
    def horizon(self) -> int:
        """The run's length in scheduler ticks (epochs, or committed updates on that clock)."""
        p = self.params
        if p.scheduler.clock == "epoch":
            return p.n_epochs
        try:
            batches = len(p.train_loader)
        except TypeError:
            explicit = p.scheduler.total_steps or p.scheduler.T_max or p.scheduler.step_size
            if explicit is None:
                raise ScheduleBudgetError(
                    "the train_loader has no len(); give the update-clock schedule an explicit horizon "
                    "(total_steps, T_max or step_size)"
                ) from None
            return explicit
        return p.n_epochs * math.ceil(batches / p.optim.accumulate_grad_batches)

    def _collect_components(self, extra: Sequence[Any]) -> dict[str, Any]:
        found: dict[str, Any] = {}
        for obj in [self.monitor, *self.callbacks, *extra]:
            if not hasattr(obj, "component_spec"):
                continue
            name, _version = obj.component_spec()
            if name in found and found[name] is not obj:
                raise ComponentRestoreError([f"two components are named {name!r}; give them distinct names"])
            found[name] = obj
        return found

    def _save_weights(self, tag: str) -> Callable[[], None]:
        """A deferred writer of a weights-only tag holding the model as it is now."""
        epoch = self.ctx.epoch
        data = torch_state.encode({"kind": "weights", "epoch": epoch, "weights": self.model.net.state_dict()})

        def write() -> None:
            ref = self.files.put_blob(data)
            manifest = TagManifest(
                tag=tag, run_id=self.files.run_id, epoch=epoch, blobs={"state": ref}, meta={"weights_only": True}
            )
            self.files.write_tag(manifest)

        return write

    def scheduler_object(self) -> Any:
        """The torch scheduler (or the plateau rule) users may inspect."""
        return self.clock.scheduler if self.clock else self.plateau

    # ----------------------------------------------------------------- lifecycle steps
    def epochs(self) -> range:
        """Global epoch indices this call trains."""
        return range(self.start_epoch, self.params.n_epochs + self.phase_offset)

    def train_epoch(self, epoch: int) -> None:
        """Run every batch of the epoch through the step (default or custom)."""
        loader = self.params.train_loader
        for obj in (loader, getattr(loader, "sampler", None)):
            if hasattr(obj, "set_epoch"):
                obj.set_epoch(epoch)
        self.model.net.train()
        self.stats = EpochStats()
        self.epoch_updates = 0
        self.summary = (
            EpochAccumulator(self.task, self.model.head.width, self.specs, full_scores=False)
            if self.summary_wanted
            else None
        )
        step = self._custom_step if self.train_step_fn is not None else self._default_step
        batch_idx = -1
        for batch_idx, (batch, is_last) in enumerate(lookahead(loader)):
            step(batch, epoch, batch_idx, is_last)
            if self.stopped_update:
                return
        if batch_idx < 0:
            raise TrainingInputError(f"train_loader yielded no batches in epoch {epoch}; give it at least one batch")
        if self.clock is not None and self.clock.clock == "optimizer_update" and self.epoch_updates == 0:
            warnings.warn(
                f"epoch {epoch} reported no optimizer update on the optimizer_update clock; a custom step must "
                "call ctx.report_update() after each optimizer.step()",
                RuntimeWarning,
                stacklevel=2,
            )

    def _default_step(self, batch: Any, epoch: int, batch_idx: int, is_last: bool) -> None:
        loss, count, correct, rows = self._default_update(batch, epoch, batch_idx, is_last)
        stats = self.stats
        stats.losses.append(loss)
        stats.counts.append(count)
        if correct is not None:
            stats.corrects.append(correct)
        stats.rows.append(rows)
        stats.lrs.append(self.opt.optimizer.param_groups[0]["lr"])
        stats.updates.append(self.update_count)

    def _default_update(
        self, batch: Any, epoch: int, batch_idx: int, is_last: bool
    ) -> tuple[torch.Tensor, int, torch.Tensor | None, int | None]:
        """Forward, loss numerator, backward, window accounting, and the update at the window's end.

        Returns the batch's on-device statistics (loss sum, valid count, correct count, rows).
        """
        inputs, target = split_batch(batch)
        inputs, target = to_device(inputs, self.device), to_device(target, self.device)
        net = self.model.net
        with self.autocast():
            output = net(*inputs) if isinstance(inputs, (tuple, list)) else net(inputs)
        task = self.task
        task.check(output, target)
        loss_sum, count = task.loss_terms(output, target)
        if count and self.window.accumulate == 1:
            # A one-microbatch window divides by its own count: seed the backward with 1/count
            # (the same gradient as dividing afterwards, without a pass over every gradient).
            loss_sum.backward(torch.full((), 1.0 / count, dtype=loss_sum.dtype, device=loss_sum.device))
            self.window.add(1)
        else:
            loss_sum.backward()
            self.window.add(count)
        detached = loss_sum.detach()
        self._window_loss = detached if self._window_loss is None else self._window_loss + detached
        correct, rows = task.correct(output.detach(), target)
        if self.summary is not None:
            self.summary.add_loss(detached, count)
            self.summary.update(output, target)
        if self.window.ends(is_last):
            self._close_window(epoch, batch_idx)
        return detached, count, correct, rows

    def _close_window(self, epoch: int, batch_idx: int) -> None:
        weight, micro = self.window.close()
        window_loss, self._window_loss = self._window_loss, None
        committed = commit_update(
            self.opt,
            weight,
            max_norm=self.optim_params.grad_clip_norm,
            check_finite=lambda: math.isfinite(window_loss.item()),  # one read, no extra kernel
        )
        if committed:
            self._on_update(epoch, batch_idx, micro)
        else:
            self.skipped_windows += 1

    def _custom_step(self, batch: Any, epoch: int, batch_idx: int, is_last: bool) -> None:
        ctx = TrainStepContext(
            model=self.model,
            batch=batch,
            optimizer=self.opt.optimizer,
            scheduler=self.scheduler_object(),
            grad_clip_norm=self.optim_params.grad_clip_norm,
            accumulate_grad_batches=self.optim_params.accumulate_grad_batches,
            batch_idx=batch_idx,
            epoch_idx=epoch,
            is_last_batch=is_last,
            precision=self.model.precision,
            report_update=lambda: self._on_update(epoch, batch_idx, 1),
            session=self,
        )
        record = self.train_step_fn(ctx)  # type: ignore[misc]
        if not isinstance(record, EvaluationDataPoint):
            raise TrainingInputError(
                f"train_step_fn must return an EvaluationDataPoint (e.g. nnx.EvaluationDataPoint(loss=...)), "
                f"got {type(record).__name__}"
            )
        self.stats.records.append(record)
        self.stats.lrs.append(self.opt.optimizer.param_groups[0]["lr"])
        self.stats.updates.append(self.update_count)

    def _on_update(self, epoch: int, batch_idx: int, microbatches: int) -> None:
        """A committed update: callbacks first, then update-clock schedules (seed §2)."""
        self.update_count += 1
        self.epoch_updates += 1
        self.ctx.update_count = self.update_count
        hooks = self.table["on_optimizer_update"]
        if hooks:
            event = UpdateEvent(
                optimizer="default", update_idx=self.update_count, epoch_idx=epoch, batch_idx=batch_idx,
                microbatches=microbatches,
            )
            for hook in hooks:
                hook(self.ctx, event)
        clock = self.clock
        if clock is not None and clock.clock == "optimizer_update":
            if clock.budget is not None and clock.ticks >= clock.budget:
                raise ScheduleBudgetError(
                    f"update {self.update_count} is past the schedule's horizon of {clock.budget} updates; "
                    "raise total_steps (or T_max) to cover the whole run"
                )
            clock.tick()
            self.ctx.update_lrs.append((self.update_count, self.opt.optimizer.param_groups[0]["lr"]))
        for listener in self.ctx.update_listeners:
            listener(self.ctx)
        if self.ctx.stop_at_update:
            self.stopped_update = True

    def validate(self, epoch: int) -> None:
        """Validation (built-in or eval_step_fn), the epoch's records and training summary."""
        val_loader = self.params.val_loader
        val: EvaluationDataPoint | None = None
        if val_loader is not None:
            if self.eval_step_fn is not None:
                with torch.no_grad():
                    val = self.eval_step_fn(
                        EvalStepContext(model=self.model, val_loader=val_loader, epoch_idx=epoch, metrics=self.specs)
                    )
                if not isinstance(val, EvaluationDataPoint):
                    raise TrainingInputError(f"eval_step_fn must return an EvaluationDataPoint, got {type(val).__name__}")
            else:
                val = self.model.evaluate(val_loader, metrics=self.specs)
        summary = EvaluationDataPoint(**self.summary.result()) if self.summary is not None else None
        self._record_epoch(epoch, val, summary)

    def _record_epoch(self, epoch: int, val: EvaluationDataPoint | None, summary: EvaluationDataPoint | None) -> None:
        """The epoch's iteration records; validation, summary and update count on the last one."""
        edps = self.stats.edps()
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
        """Epoch-clock schedules step once; plateau follows the decision."""
        if self.plateau is not None:
            d = self.decision
            assert d is not None
            groups = self.opt.optimizer.param_groups
            self.plateau.step(epoch, d.improved, d.status, [g["lr"] for g in groups], lambda i, lr: groups[i].__setitem__("lr", lr))
        elif self.clock is not None and self.clock.clock == "epoch":
            self.clock.tick()

    def payload(self, epoch: int) -> dict[str, Any]:
        """Everything a stateful resume needs, as tensors and plain types."""
        loaders = [self.params.train_loader, self.params.val_loader]
        return {
            "kind": "nnmodel",
            "epoch": epoch,
            "weights": self.model.net.state_dict(),
            "optimizer": self.opt.state(),
            "schedule": self.plateau.state() if self.plateau else self.clock.state(),  # type: ignore[union-attr]
            "rng": torch_state.capture_rng([ld for ld in loaders if ld is not None]),
            "components": {name: obj.component_state() for name, obj in self.components.items()},
            "update_count": self.update_count,
            "transforms": [dict(t) for cb in reversed(self.callbacks) for t in cb.checkpoint_transforms()],
        }

    def commit(self, epoch: int) -> None:
        """history → LAST → phase/BEST → deferred writes → blob collection; then attempt.json."""
        tags: list[str] = []
        if self.params.save_phase_checkpoints:
            tags.extend(phase_tags(epoch - self.phase_offset, self.params.n_epochs))
        if self.decision is not None and self.decision.improved:
            tags.append(BEST)
        journal = self.history if isinstance(self.history, JournalWriter) else None  # chunks + manifest
        history = self.history.render() if journal is None else None
        meta = {"update_count": self.update_count, "selection": self.history.idps[-1].selection.state()}  # type: ignore[union-attr]
        commit_epoch(
            self.files,
            EpochCommit(
                epoch=epoch,
                payload=torch_state.encoder(self.payload(epoch)),
                history=history,
                previous_history=self._prev_history,
                history_step=journal,
                tags=tags,
                meta=meta,
                deferred=list(self.ctx.deferred_checkpoint_writes),
            ),
        )
        self._prev_history = history
        self.committed_epoch = epoch
        self.committed_this_call = True
        self.attempt.last_committed_epoch, self.attempt.last_committed_tag = epoch, LAST
        self.attempt.save(self.files)

    def should_stop(self) -> bool:
        """EarlyStopping (or any callback) asked to stop after this commit."""
        return self.ctx.should_stop

    def stopped_at_update(self) -> bool:
        """A callback stopped the run at an update boundary (LAST stays at the last epoch)."""
        return self.stopped_update

    def finalize(self) -> None:
        """Refresh LAST from the final model (on_train_end changes and transforms persisted)."""
        if self.committed_epoch is None:
            return
        epoch = self.committed_epoch
        previous = self.files.read_tag(LAST)
        ref = self.files.put_blob(torch_state.encoder(self.payload(epoch)))
        meta = dict(previous.meta) if previous else {}
        self.files.write_tag(TagManifest(tag=LAST, run_id=self.files.run_id, epoch=epoch, blobs={"state": ref}, meta=meta))
        self.files.collect_garbage()

    # ----------------------------------------------------------------- resume
    def restore(self, payload: Mapping[str, Any], *, stateful: bool) -> None:
        """Restore a checkpoint payload; validates everything before mutating anything, and puts
        weights, optimizer state and RNG streams back if any part of the restore fails."""
        if not stateful:
            self.model.net.load_state_dict(payload["weights"])
            return
        problems = self._resume_problems(payload)
        if problems:
            raise ComponentRestoreError(problems)
        net = self.model.net
        saved_weights = {k: v.detach().clone() for k, v in net.state_dict().items()}
        saved_rng = torch_state.capture_rng()
        saved_optimizers = self._optimizer_states()
        try:
            net.load_state_dict(payload["weights"])
            self._load_training_state(payload)
            for name, obj in self.components.items():
                if name in payload["components"]:
                    obj.load_component_state(payload["components"][name])
            self.ctx.update_count = self.update_count
            loaders = [ld for ld in (self.params.train_loader, self.params.val_loader) if ld is not None]
            torch_state.restore_rng(payload["rng"], loaders)
        except BaseException:
            net.load_state_dict(saved_weights)
            self._load_optimizer_states(saved_optimizers)
            torch_state.restore_rng(saved_rng)
            raise

    def _optimizer_states(self) -> dict[str, Any]:
        """Every optimizer's state by name (for rollback of a failed restore)."""
        return {"default": self.opt.state()}

    def _load_optimizer_states(self, states: Mapping[str, Any]) -> None:
        self.opt.load_state(states["default"])

    def _load_training_state(self, payload: Mapping[str, Any]) -> None:
        """Optimizer, schedule and update counter from a payload."""
        self.opt.load_state(payload["optimizer"])
        if self.plateau is not None:
            self.plateau.load_state(payload["schedule"])
        else:
            self.clock.load_state(payload["schedule"])  # type: ignore[union-attr]
        self.update_count = int(payload["update_count"])

    def _resume_problems(self, payload: Mapping[str, Any]) -> list[str]:
        problems = []
        if payload.get("kind") != "nnmodel":
            problems.append(f"checkpoint was written by {payload.get('kind')!r}; resume it with that entry point")
        saved_opt = payload["optimizer"]
        if saved_opt["type"] != self.opt.state()["type"]:
            problems.append(f"optimizer type {saved_opt['type']} != {self.opt.state()['type']}")
        if saved_opt["topology"] != self.opt.topology():
            problems.append("optimizer parameter topology differs (names/shapes of the parameter groups)")
        have_plateau = "bad_epochs" in payload["schedule"]
        if have_plateau != (self.plateau is not None):
            problems.append("scheduler kind differs from the checkpoint's")
        elif self.clock is not None and payload["schedule"]["type"] != self.clock.state()["type"]:
            problems.append(f"scheduler type {payload['schedule']['type']} != {self.clock.state()['type']}")
        return problems + self._component_problems(payload["components"])

    def _component_problems(self, saved: Mapping[str, Any]) -> list[str]:
        """Saved vs registered checkpointed components: every mismatch, before anything is restored."""
        problems = []
        for name, obj in self.components.items():
            if name not in saved:
                problems.append(f"component {name!r} has no saved state in the checkpoint")
            elif hasattr(obj, "check_component_state"):
                problems.extend(obj.check_component_state(saved[name]))
        for name in saved:
            if name not in self.components:
                problems.append(f"the checkpoint holds state of component {name!r}, which this run does not register")
        return problems


def default_train_step(ctx: TrainStepContext) -> EvaluationDataPoint:
    """The built-in supervised step, callable from a custom ``train_step_fn``.

    Forward, loss numerator over valid targets, backward; at the window's end the gradient is
    divided by the window's valid-target count, clipped and applied, and the update reported
    (never report it again). Returns the batch's record (reads the loss: one host sync).
    """
    loss, count, correct, rows = ctx.session._default_update(ctx.batch, ctx.epoch_idx, ctx.batch_idx, ctx.is_last_batch)
    denominator = rows if rows is not None else count
    accuracy = float(correct) / denominator if correct is not None and denominator else None
    return EvaluationDataPoint(
        loss=float(loss) / count if count else None,
        accuracy=accuracy,
        error=None if accuracy is None else 1.0 - accuracy,
        count=count,
    )


def new_attempt(run_id: str) -> AttemptRecord:
    """A fresh attempt record."""
    return AttemptRecord(attempt_id=uuid.uuid4().hex, run_id=run_id, started_at=now())


@contextlib.contextmanager
def restored_modes(net: torch.nn.Module) -> Iterator[None]:
    """Record every submodule's train/eval flag and restore them afterwards."""
    flags = [(m, m.training) for m in net.modules()]
    try:
        yield
    finally:
        for module, flag in flags:
            module.training = flag
