"""THE training pipeline: every ``train()`` — NNModel, Trainer, one process or ``DDP()`` — runs here.

    checks → identity → resume point → budgets → lease → admission → session → lifecycle → finish

One process is a group of one (``SingleProcess``: every agreement is a no-op); ``DDP()`` supplies
a torch collective and its session behaviour (``nnx_api.distributed``). Every step that can fail
on one rank only is agreed: each rank runs the checks, the writer alone reads the resume point,
holds the lease, admits the run and writes, and every rank gets the writer's answer or its error.
Nothing is written before the checks, the budgets and the restore problems pass; a fresh run that
never committed an epoch is removed when its attempt fails, so the same call can be retried.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import time
import uuid
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from nnx_core import admission as adm
from nnx_core import replacement
from nnx_core.admission import attempt_now
from nnx_core.agreement import agreed, share
from nnx_core.commit import LAST, Position, RunFiles
from nnx_core.errors import ComponentRestoreError, ParamsError
from nnx_core.identity import canonical_json, text_id
from nnx_core.identity import run_id as content_address
from nnx_core.lifecycle import run_lifecycle
from nnx_core.monitor import Monitor
from nnx_core.precision import run_surfaces
from nnx_core.schedules import ClockComponent
from nnx_adapters.pytorch import state as torch_state
from nnx_adapters.pytorch.metrics import metric_mode
from nnx_adapters.pytorch.optim import TorchClock
from nnx_adapters.storage.fs import FileStorage
from nnx_api.callbacks import Callback, normalize_callbacks
from nnx_api.callbacks.progress import ProgressBar, message_stream, progress_enabled
from nnx_api.config import identity
from nnx_api.runs.curves import flatten_config
from nnx_api.runs.partial import PartialEpoch
from nnx_api.runs.payload import CheckpointPayload, Payload, decode_payload
from nnx_api.runs.run import NNRun
from nnx_api.runs.store import load_yaml, run_folders, runs_root
from nnx_api.training import batch_checks, checks, compilation, fingerprint, history_setup, optimizers, resume
from nnx_api.training import code as user_code
from nnx_api.training.builtin_step import default_train_step
from nnx_api.training.checkpoint import collect_components, restore_problems
from nnx_api.training.defaults import defaults_problem
from nnx_api.training.group import SingleProcess
from nnx_api.training.owners import owner_for
from nnx_api.training.preemption import Preemption
from nnx_api.training.roles import EntryKind
from nnx_api.training.session import SessionSetup, TrainingSession


@attrs.frozen(kw_only=True)
class TrainingEntry:
    """One ``train()`` call as an entry point describes it (NNModel: one optimizer, "default")."""

    kind: EntryKind  # NNMODEL | TRAINER: the checkpoint kind, the step's name, named optimizers
    model: Any
    params: Any  # as given: NNTrainParams | NNTrainerParams
    train: Any  # the representative NNTrainParams (epochs, loaders, metrics, monitor, resume)
    config: Mapping[str, Any]  # the run's configuration: its SHA-256 is the run id
    optims: Mapping[str, Any]  # name → NNOptimParams
    schedulers: Mapping[str, Any]  # name → NNSchedulerParams
    primary: str
    strict_groups: bool = False
    auto_step: bool = True
    step_fn: Any = None  # the kind's step function (train_step_fn= / trainer_step_fn=)
    objective: Any = None
    eval_step_fn: Any = None
    callbacks: Sequence[Any] = ()
    components: Sequence[Any] = ()
    history: Any = None
    root: Any = None
    storage: Any = None
    distributed: Any = None  # nnx_api.distributed.DDP | None
    trainer: Any = None
    compile: Any = None  # nnx_api.config.compilation.CompileSpec | None


def launch(entry: TrainingEntry) -> NNRun:
    """Run one training entry through the pipeline; every rank returns the same ``NNRun``.

    Ctrl-C (``KeyboardInterrupt``) while it trains propagates as it is, nothing more committed,
    carrying the run id as ``exc.nnx_run_id`` and, on the writer, a note: the last committed epoch
    and that the same call with ``resume="auto"`` continues the run."""
    started = time.monotonic()  # the summary line's seconds: this call's wall time (callbacks/progress.py)
    group = entry.distributed.group() if entry.distributed is not None else SingleProcess()
    try:
        return _launch(entry, group, started)
    except OSError as exc:  # a full disk, a read-only root: say what is committed and how to go on
        resume.note_write_failure(entry, exc)
        raise
    finally:
        group.close()


def _launch(entry: TrainingEntry, group: Any, started: float) -> NNRun:
    c = group.collective
    group.agree_given(entry)  # 0. what each rank was given, agreed before any other collective
    train = entry.train
    storage = entry.storage if entry.storage is not None else FileStorage(runs_root(entry.root))
    precision = entry.model.resolved_precision.scoped(run_surfaces(  # what this run applies its precision to
        trainer=entry.kind.owner_required, step_function=entry.step_fn not in (None, default_train_step)))
    run = NNRun(config=entry.config, root=runs_root(entry.root), storage=storage, precision=precision,
                trained=user_code.trained(entry))
    # 0. where the run lives: each rank's own root may hold it; the newest committed state's holder writes
    note, writer = group.place_writer(run.id, storage), group.writer_rank
    if note is not None and c.rank == writer:
        _say(f"run {run.id[:8]}: {note}", train)
    # 1. checks and identity, on every rank
    ready = agreed(c, "setup", lambda: _checks(entry, group))
    group.setup(run.id, train)
    # 2. the resume point: the writer reads and verifies it; refusals come before anything is written
    source = share(c, writer, "resume point", lambda: resume.resume_point(entry, group, storage))
    # 3. budgets (a planned resume trains what is left of its source's plan)
    planned = source is not None and train.resume_epochs == "planned"
    this_call = train.n_epochs - int(source.status["source_epoch"]) - 1 if planned else train.n_epochs  # type: ignore[union-attr,index]
    agreed(c, "setup", lambda: optimizers.check_schedule_budgets(
        entry.schedulers, entry.optims, n_epochs=this_call, train_loader=train.train_loader,
        owns_windows=entry.step_fn is None,
        resumed=source.schedules if source is not None else None, named=entry.kind.named_optimizers,
    ))
    files = RunFiles(storage, run.id)
    with contextlib.ExitStack() as lease:
        # 4–5. the lease and admission, on the writer
        plan = share(c, writer, "admission", lambda: resume.admit(entry, group, files, lease, source, ready.data, ready.code))
        payload = decode_payload(plan.data, f"run {run.id} resume point") if plan.data is not None else None
        run = attrs.evolve(run, idps=plan.idps, resume_status=plan.status, data_fingerprint=ready.data, compile=plan.compile,
                           code_fingerprint=ready.code)
        if plan.action == adm.FRESH and c.rank == writer:
            _note_earlier_identity(entry, storage, run.id)
            if (taken := defaults_problem(entry)) is not None:  # several optimizers left to one net's defaults
                warnings.warn(taken, UserWarning, stacklevel=3)
        if plan.action == adm.FINISHED:
            entry.model.net.load_state_dict(payload.weights)  # type: ignore[union-attr]  # the caller's model is the finished one
            epochs = len({r.epoch_idx for r in run.idps})
            _say(f"run {run.id[:8]} already finished ({epochs} epochs committed): returning it, nothing trained. "
                 "Pass overwrite_existing=True (without resume='auto') to train it again", train)
            return run
        return _train(entry, group, run, files, plan, payload, ready, started)


@attrs.frozen(kw_only=True)
class Ready:
    """What the checks built: the callbacks that run on this rank, the history journal (None:
    eager), and the named optimizers and schedules (built before anything is written, so their
    refusals — parameter groups, schedule horizons — come first)."""

    callbacks: list[Callback]
    journal: Any
    optimizers: Mapping[str, Any]
    schedules: Mapping[str, Any]
    data: Mapping[str, Any] | None = None  # the writer's data fingerprint (nnx_api.training.fingerprint)
    code: Mapping[str, Any] | None = None  # the writer's code fingerprint (nnx_api.training.code)
    compiled: Any = None  # the compiled forward (nnx_adapters.pytorch.compilation), None without compile=


def _checks(entry: TrainingEntry, group: Any) -> Ready:
    """Every check before anything is written."""
    declared, here = group.resolve_callbacks(normalize_callbacks(checks.check_callbacks(entry.callbacks)))
    checks.check_run(
        entry.model, entry.params, declared, params_type=type(entry.params), optimizers=tuple(entry.optims),
        step_fn=entry.step_fn, step_name=entry.kind.step_name, objective=entry.objective,
        needs_owner=entry.kind.owner_required,
    )
    group.check(entry)
    checks.check_eval_step(entry.eval_step_fn, entry.train.val_loader)
    checks.check_components(entry.components)
    eval_check = getattr(entry.eval_step_fn, "check_run", None)  # a built-in eval step's own refusals
    if eval_check is not None:
        eval_check(entry.train)
    journal = history_setup.check_history(entry.history, declared)
    train = entry.train
    _check_commit_points(train, group)
    loaders = {"train_loader": train.train_loader, "val_loader": train.val_loader}
    # a rank's validation shard (nnx.distributed.validation_loader) may hold no rows: nothing to check on this rank
    firsts = {name: fingerprint.take_first_batch(ld) for name, ld in loaders.items()
              if ld is not None and not (getattr(ld, "rank_shard", False) and len(ld) == 0)}
    builtin_step = entry.step_fn is None and entry.objective is None and not entry.kind.owner_required
    batch_checks.check_first_batches(entry.model, firsts, train_step=builtin_step, eval_step=entry.eval_step_fn is None,
                                     extra_metrics=train.extra_metrics)
    writes = group.collective.rank == group.writer_rank
    data = fingerprint.data_fingerprint(loaders, firsts) if writes else None
    code = user_code.code_fingerprint(entry, declared) if writes else None
    compiled = compilation.prepare(entry, declared)
    opts = optimizers.build_optimizers(entry.model.net, entry.optims, strict=entry.strict_groups)
    schedules = optimizers.build_schedules(opts, entry.schedulers, entry.optims, n_epochs=train.n_epochs, train_loader=train.train_loader)
    return Ready(callbacks=here, journal=journal, optimizers=opts, schedules=schedules, data=data, code=code, compiled=compiled)


def _train(
    entry: TrainingEntry, group: Any, run: NNRun, files: RunFiles, plan: resume.Plan, payload: Payload | None,
    ready: Ready, started: float,
) -> NNRun:
    c, model, train = group.collective, entry.model, entry.train
    fresh, is_writer = plan.action == adm.FRESH, c.rank == group.writer_rank
    callbacks, journal, schedules = ready.callbacks, ready.journal, ready.schedules
    stateful = payload if plan.stateful and isinstance(payload, CheckpointPayload) else None  # restored in full
    # 6. the session: the update owner, components; restore problems before any write
    owned = owner_for(
        model=model, kind=entry.kind, optimizers=ready.optimizers, optim_params=entry.optims, primary=entry.primary,
        step_fn=entry.step_fn, objective=entry.objective, group=group,
    )
    monitor = Monitor(train.monitor, metric_mode(train.monitor.metric, tuple(train.metrics)) if train.monitor else "min")
    clocks = [
        ClockComponent(s, entry.kind.clock_component(n))
        for n, s in schedules.items()
        if isinstance(s, TorchClock) and s.clock == "optimizer_update"
    ]
    components = agreed(c, "setup", lambda: collect_components(  # NNx's order: callbacks, given, monitor, clocks, engine
        [*callbacks, *entry.components, monitor, *clocks, *owned.owner.components]))
    if run.resume_status:  # which components the resume point restored, or which start fresh
        saved = stateful.components if stateful is not None else {}
        # an undeclared (fallback) monitor is no component the user registered, as in NNx; its best
        # is still saved and restored as "nnx.monitor", so decisions after a resume stay exact
        declared = [n for n, obj in components.items() if obj is not monitor or train.monitor is not None]
        named = {"restored_components": tuple(n for n in declared if n in saved),
                 "fresh_components": tuple(n for n in declared if n not in saved)}
        run = attrs.evolve(run, resume_status=attrs.evolve(run.resume_status, **named))
    if stateful is not None:
        problems = restore_problems(stateful, owned.optimizers, schedules, components)
        agreed(c, "restore", lambda: _raise(ComponentRestoreError(problems) if problems else None))
    attempt = adm.AttemptRecord(attempt_id=uuid.uuid4().hex, run_id=run.id, started_at=resume.now())
    preemption = Preemption(train.preempt_signals)
    compiled = ready.compiled  # with compile=: its record goes on the run and the attempt, now and at the end
    run = compilation.noted(run, attempt, compiled)
    bar = None
    try:
        share(c, group.writer_rank, "admission", lambda: resume.write_admitted(files, run, journal, fresh, attempt, replace=plan.replace))
        # the writer opens the journal (under the lease); the other ranks keep its window
        opened = history_setup.open_history(files, journal, fresh=fresh, idps=run.idps) if is_writer or journal is None else None
        if c.world_size > 1:
            opened = history_setup.shared_history(opened, journal, lambda fn: share(c, group.writer_rank, "history", fn))
        shown = history_setup.with_history_access(callbacks, opened)
        # a lineage run trains n_epochs more; resume_epochs="planned" up to its source's plan (logical epochs)
        offset = int(payload.epoch) + 1 if payload is not None and fresh and train.resume_epochs != "planned" else 0
        mid_epoch = stateful is not None and stateful.position is not None  # LAST is a commit inside its epoch
        start = int(payload.epoch) + (0 if mid_epoch else 1) if payload is not None else 0
        data_seed = _data_seed(stateful, train.seed)
        if is_writer and progress_enabled(train.progress):  # dispatched like any callback (batches: on_optimizer_update)
            bar = ProgressBar(train.n_epochs + offset - start, _batches(train.train_loader), started=started)
            shown = [*shown, bar]
        session = TrainingSession(SessionSetup(
            kind=entry.kind, model=model, params=train, run=run, files=files, optimizers=owned.optimizers,
            schedules=schedules, primary=entry.primary, optim_params=entry.optims, auto_step=entry.auto_step,
            owner=owned.owner, task=owned.task, monitor=monitor, callbacks=shown, components=components,
            eval_step_fn=entry.eval_step_fn, history=opened, group=group,
            start_epoch=start, phase_offset=offset, trainer=entry.trainer, compiled=compiled,
            after_first_commit=(lambda: replacement.retire(files)) if plan.replace else None,
            positioned=group.positioned(train.train_loader, data_seed),
            preemption=preemption, data_seed=data_seed,
        ))
        agreed(c, "restore", lambda: _restore(session, payload, plan.stateful, train.seed, c.rank))
        if plan.action == adm.CONTINUE and is_writer:
            _say(_continuing(run, start), train)
        # 7. the lifecycle, in the seed's order; a preemption signal only sets a flag the session reads
        with preemption:
            run_lifecycle(session, shown, session.ctx, base=Callback, agree=session.agree)
        # 8. finish
        status = adm.STOPPED if session.stopped_at_update() else adm.COMPLETED
        run = compilation.noted(run, attempt, compiled)
        share(c, group.writer_rank, "finish", lambda: resume.finish(files, run, attempt, status))
        if preemption.signal is not None:  # after the last commit point: answered as without NNx
            signal.raise_signal(preemption.signal)
    except BaseException as exc:
        if is_writer:
            compilation.noted(run, attempt, compiled)  # a kept attempt.json says how compilation ended
            resume.on_failure(files, attempt, exc, fresh, replace=plan.replace)
        if isinstance(exc, KeyboardInterrupt):
            _note_interrupt(exc, run.id, files if is_writer else None)
        if bar is not None:
            with contextlib.suppress(Exception):  # the training error is the one to report
                bar.summarize()
        raise
    if bar is not None:
        bar.summarize()  # at the call's end, so its seconds are the call's wall time
    result = _returned(run, session)
    if is_writer:
        _say(f"Run saved to {_display_path(result.path)}", train)
    return result


def _continuing(run: NNRun, start: int) -> str:
    """The line a continued interrupted run prints: from which epoch, and which are committed."""
    first = min((r.epoch_idx for r in run.idps), default=0)
    committed = f"epoch {first}" if first == start - 1 else f"epochs {first}..{start - 1}"
    return f"continuing run {run.id[:8]} from epoch {start} ({committed} committed)"


def _note_interrupt(exc: KeyboardInterrupt, run_id: str, files: RunFiles | None) -> None:
    """Ctrl-C stays a ``KeyboardInterrupt``: it carries the run id (``exc.nnx_run_id``, on every
    rank) and, on the writer (``files``), a note naming the last committed epoch and how to go on."""
    exc.nnx_run_id = run_id  # type: ignore[attr-defined]
    if files is None:
        return
    try:
        last = files.read_tag(LAST)
    except Exception:  # the interrupt is the error to report
        return
    if last is None:
        exc.add_note(f"NNx: run {run_id} was interrupted with no committed epoch; run the same call again to start it.")
        return
    exc.add_note(
        f"NNx: run {run_id} was interrupted; epoch {last.epoch} is committed (LAST). Run the same call with "
        f"resume='auto' to continue it from epoch {last.epoch + 1}."
    )


def _note_earlier_identity(entry: TrainingEntry, storage: Any, new_id: str) -> None:
    """A fresh run whose module class was named ``__main__.<class>`` by earlier versions, whose
    configuration differs from a run in the root only in ``n_epochs``, or from an interrupted run
    in a few fields: say where that run is and how to go on from it."""
    other = _other_epochs(entry.config, set(run_folders(storage)))
    if other is not None:
        old_id, epochs = other
        warnings.warn(
            f"run {new_id[:8]} starts fresh: run {old_id} in this root has the same configuration with n_epochs={epochs} "
            f"(n_epochs is part of a run's id). To train that run on instead, pass resume_from_run_id='{old_id}' (without "
            "resume='auto'): a new run that continues its epochs, weights, optimizer and schedules for n_epochs more epochs",
            UserWarning, stacklevel=4,
        )
    near = _interrupted_neighbour(entry.config, storage, set(run_folders(storage)))
    if near is not None and (other is None or other[0] != near[0]):
        old_id, changed, epoch = near
        warnings.warn(
            f"run {new_id[:8]} starts fresh: run {old_id} in this root is interrupted ({epoch}) and its configuration "
            f"differs only in {changed}. resume='auto' continues a run of the same configuration only: to continue "
            f"it, give its settings; to start from its last checkpoint with these, pass resume_from_run_id='{old_id}'",
            UserWarning, stacklevel=4,
        )
    earlier = identity.earlier_config(entry.config, type(entry.model.net))
    if earlier is None:
        return
    old_id = content_address(earlier)
    if RunFiles(storage, old_id).exists():
        warnings.warn(
            f"run {new_id[:8]} starts fresh: a module defined in the started script is now named "
            f"{entry.config['module']['class']} (as importing it names it), and the run of this configuration "
            f"trained when it was named {earlier['module']['class']} is {old_id}. It stays readable "
            f"(NNRun.load('{old_id}')); to start from its last checkpoint pass resume_from_run_id='{old_id}'",
            UserWarning, stacklevel=4,
        )


def _interrupted_neighbour(config: Mapping[str, Any], storage: Any, ids: set[str], most: int = 3) -> tuple[str, str, str] | None:
    """The interrupted run among ``ids`` whose configuration differs least from ``config`` (in
    ``most`` fields at most): its id, the fields as ``name old → new``, and its committed epoch.
    Reads each run's attempt record, and the configuration of the interrupted ones only."""
    mine, best = flatten_config(config), None
    for run_id in sorted(ids):
        files = RunFiles(storage, run_id)
        try:
            record = attempt_now(files)
            if not record or record.get("status") != "interrupted":
                continue
            doc = load_yaml(storage.read(files.run_yaml), where=f"run {run_id} run.yaml")
        except Exception:  # an unreadable neighbour is not this run's concern (nnx runs verify reports it)
            continue
        theirs = flatten_config({k: v for k, v in doc.items() if k not in ("id", "trained")})
        diff = sorted(k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k))
        if diff and len(diff) <= most and (best is None or len(diff) < len(best[1])):
            epoch = record.get("last_committed_epoch")
            best = (run_id, diff, "no epoch committed" if epoch is None else f"epoch {epoch} committed", theirs)
    if best is None:
        return None
    run_id, diff, epoch, theirs = best
    return run_id, ", ".join(f"{k} {theirs.get(k)!r} → {mine.get(k)!r}" for k in diff), epoch


def _other_epochs(config: Mapping[str, Any], ids: set[str], most: int = 5_000) -> tuple[str, int] | None:
    """The run among ``ids`` whose configuration is ``config`` with another ``n_epochs`` (1 to
    ``most``), and its n_epochs: each candidate's id is hashed, nothing is read."""
    train = config.get("train")
    if not isinstance(train, Mapping) or not isinstance(train.get("n_epochs"), int) or not ids:
        return None
    mark = 7_919_000_001  # an n_epochs no configuration holds: its canonical text, then each candidate's
    text = canonical_json({**config, "train": {**train, "n_epochs": mark}})
    if text.count(f'"n_epochs":{mark}') != 1:
        return None
    for epochs in range(1, most + 1):
        if epochs != train["n_epochs"]:
            candidate = text_id(text.replace(f'"n_epochs":{mark}', f'"n_epochs":{epochs}'))
            if candidate in ids:
                return candidate, epochs
    return None


def _raise(error: BaseException | None) -> None:
    if error is not None:
        raise error


def _restore(session: TrainingSession, payload: Payload | None, stateful: bool, seed: int | None, rank: int) -> None:
    if payload is not None:
        session.restore(payload, stateful=stateful)
        if stateful:
            _warn_workers(session.params, session.positioned, inside=payload.position is not None)
    if seed is not None and not stateful:
        torch_state.set_seed(seed + rank)  # each rank draws its own stream (e.g. dropout); rank 0 = the seed


def _returned(run: NNRun, session: TrainingSession) -> NNRun:
    """The run ``train()`` returns, as ``NNRun.load`` reads it: a stop at an update that committed
    inside its epoch (``commit_every``) keeps that epoch's records apart, in ``partial``."""
    records, partial = list(session.history.idps), session.last_partial
    if partial is None:
        return attrs.evolve(run, idps=tuple(records))
    done = PartialEpoch(epoch=partial.epoch, records=tuple(r for r in records if r.epoch_idx == partial.epoch),
                        position=Position(**partial.meta()))
    return attrs.evolve(run, idps=tuple(r for r in records if r.epoch_idx != partial.epoch), partial=done)


def _check_commit_points(train: Any, group: Any) -> None:
    """``commit_every`` needs a train loader NNx can position inside an epoch (the group's:
    ``position_refusal``); anything else is refused before anything is written."""
    if train.commit_every is None:
        return
    refusal = group.position_refusal(train.train_loader)
    if refusal is not None:
        raise ParamsError("NNTrainParams.commit_every", f"commits inside an epoch need a train_loader NNx can position: {refusal}")


def _data_seed(stateful: CheckpointPayload | None, seed: int | None) -> int:
    """The seed of every sample's randomness in loader workers: the resume point's, the run's
    ``seed``, or one drawn from the OS (never from torch's stream: a run with ``seed=None`` draws
    nothing before its first epoch), kept in every checkpoint."""
    if stateful is not None and stateful.data_seed is not None:
        return int(stateful.data_seed)
    return seed if seed is not None else secrets.randbits(63)


def _warn_workers(train: Any, positioned: Any, *, inside: bool) -> None:
    """A stateful resume is exact with worker processes: torch reseeds a loader's workers each
    epoch from the loader's generator (or torch's global stream), and both are in the checkpoint;
    a train loader NNx positions by index seeds each sample in its workers (``exact_workers``).
    Persistent workers of any other loader are seeded once, when the first epoch starts, and keep
    their streams from epoch to epoch: a resumed run starts new ones, and its first iterator draws
    their seed from the restored stream before the shuffle does. A loader positioned by its own
    state (``inside`` an epoch) restarts its workers at the position, their streams at the epoch's
    start. Said once, naming the loaders."""
    names = ("val_loader",) if positioned is not None and positioned.exact_workers else ("train_loader", "val_loader")
    persistent = [name for name in names
                  if getattr(getattr(train, name), "persistent_workers", False) and getattr(getattr(train, name), "num_workers", 0)]
    if persistent:
        warnings.warn(
            f"{' and '.join(persistent)} keep{'s' if len(persistent) == 1 else ''} persistent_workers=True: its worker "
            "processes were seeded once and kept their random streams from epoch to epoch, and this resumed run "
            "starts new ones, so the shuffle order and the randomness drawn in Dataset.__getitem__ (augmentations) "
            "differ from an uninterrupted run's from here on. For a bit-identical resume pass persistent_workers=False "
            "(workers are then reseeded exactly each epoch)", RuntimeWarning, stacklevel=3,
        )
    elif inside and positioned is not None and not positioned.exact_workers and getattr(train.train_loader, "num_workers", 0):
        warnings.warn(
            f"train_loader ({type(train.train_loader).__name__}) resumes inside an epoch from its own state_dict() with "
            "new worker processes, whose random streams start where the epoch's started: randomness drawn in "
            "Dataset.__getitem__ (augmentations) differs from an uninterrupted run's until the epoch ends. For a "
            "bit-identical resume pass num_workers=0, or a plain torch DataLoader (NNx then seeds each sample)",
            RuntimeWarning, stacklevel=3,
        )


def _say(message: str, train: Any) -> None:
    """A line a ``train()`` call prints (when progress output is on)."""
    if progress_enabled(train.progress):
        print(message, file=message_stream())


def _batches(loader: Any) -> int | None:
    """Batches per epoch, when the loader knows."""
    try:
        return len(loader)
    except TypeError:
        return None


def _display_path(path: os.PathLike[str]) -> str:
    """Where the run lives, as NNx prints it: relative to the working directory (so the output
    names no machine's folders) and saying so, or the absolute path outside it."""
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return str(path)
    if rel.startswith(".."):
        return str(path)
    return rel.replace(os.sep, "/") + " (relative to the working directory)"
