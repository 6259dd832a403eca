"""The resume point and admission, as the pipeline's writer rank performs them.

``resume_point`` reads and verifies (SHA-256) the checkpoint ``resume_from_run_id`` names and
refuses a stateful resume of another entry point, world size or partition — before anything is
written. ``admit`` takes the run lease and applies ``nnx_core.admission``'s rules (fresh,
continue from LAST, finished); ``write_admitted`` makes the run's first writes once every check
has passed. The answers travel to every rank as a ``Plan``. ``on_failure`` undoes admission when
a fresh run never committed (the never-committed cleanup), and ``note_write_failure`` tells a
user whose disk filled up which epoch is committed.
"""

from __future__ import annotations

import contextlib
import errno
import os
import warnings
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import attrs

from nnx_core import admission as adm
from nnx_core import eager_history, replacement
from nnx_core.commit import LAST, RunFiles, complete_tags
from nnx_core.errors import (
    ComponentRestoreError,
    CorruptRunError,
    ParamsError,
    ResumeMismatchError,
    ResumePointError,
    TrainingPreempted,
)
from nnx_core.identity import validate_run_id, validate_tag
from nnx_adapters.storage.fs import FileStorage
from nnx_api.runs.payload import CheckpointPayload, Payload, decode_payload
from nnx_api.runs.run import NNRun
from nnx_api.runs.store import dump_yaml, runs_root
from nnx_api.training import code as user_code
from nnx_api.training import history_setup


@attrs.frozen(kw_only=True)
class Plan:
    """What admission decided, as every rank receives it: the action, the resume point's blob
    (verified against its SHA-256) and whether to restore it statefully, the resume status to
    record, and a continuation's committed records."""

    action: str
    data: bytes | None = None
    stateful: bool = False
    status: Mapping[str, Any] | None = None
    idps: tuple[Any, ...] = ()
    schedules: Mapping[str, Any] | None = None  # a stateful resume point's schedule states (budgets)
    compile: Any = None  # a finished run's recorded CompileRecord (metadata.yaml), returned as it is
    replace: bool = False  # fresh over a committed run, which stays until the first commit (nnx_core.replacement)


def resume_point(entry: Any, group: Any, storage: Any) -> Plan | None:
    """``resume_from_run_id``'s checkpoint (verified against its SHA-256) and how to restore it."""
    train = entry.train
    planned = getattr(train, "resume_epochs", "additional") == "planned"
    if train.resume_from_run_id is None:
        if planned:
            raise ParamsError("NNTrainParams.resume_epochs", "'planned' continues a run's plan: set resume_from_run_id "
                                                             "(it does nothing on a fresh run)")
        return None
    source_id, tag = validate_run_id(train.resume_from_run_id), validate_tag(train.resume_from_checkpoint)
    source = NNRun.load(source_id, entry.root, storage=storage)
    checkpoint = source.require_checkpoint(tag)
    data, payload = verified(source.files(), checkpoint.manifest, f"run {source_id} tag {tag!r}")
    stateful = payload.stateful
    if train.resume_mode in ("stateful", "reshard") and not stateful:
        raise ResumeMismatchError(f"{source_id}:{tag} is a weights-only checkpoint (no training state); "
                                  "use resume_mode='weights_only'")
    if not stateful and train.resume_mode == "auto":
        warnings.warn(
            f"checkpoint {tag!r} of run {source_id} holds weights only: the weights are restored, but the optimizer, "
            "schedule and components restart from their defaults (resume_mode='weights_only' asks for exactly that)",
            RuntimeWarning, stacklevel=2,
        )
    stateful = stateful and train.resume_mode != "weights_only"
    if stateful and isinstance(payload, CheckpointPayload) and payload.position is not None:
        raise ResumeMismatchError(
            f"{source_id}:{tag} was committed in the middle of epoch {payload.epoch}; a new run starts from a whole "
            f"epoch: continue run {source_id[:8]} itself with resume='auto' (its own parameters), or start from another "
            "tag, or pass resume_mode='weights_only'"
        )
    if planned:
        check_plan(source, checkpoint.epoch, train.n_epochs, stateful)
    check_weights_fit(entry.model.net, payload.weights, f"run {source_id[:8]} tag {tag!r}")
    refuse(entry, group, payload, stateful)
    changed = optimizer_changes(source.config, entry.config) if stateful else []
    if changed:
        raise ResumeMismatchError(
            f"resume_from_run_id='{source_id[:8]}' restores its optimizer's state, whose hyperparameters would replace "
            f"this call's ({'; '.join(changed)}). Give the source's values to continue its optimizer as it was, or pass "
            "resume_mode='weights_only' to start a fresh optimizer with yours from its weights"
        )
    status = {"mode": "stateful" if stateful else "weights_only", "source_run_id": source_id, "source_checkpoint": tag,
              "source_epoch": checkpoint.epoch}
    schedules = payload.named_state()[1] if stateful and isinstance(payload, CheckpointPayload) else None
    return Plan(action=adm.FRESH, data=data, stateful=stateful, status=status, schedules=schedules)


def planned_end(run: NNRun) -> int:
    """The epoch a run's plan ends before: its ``n_epochs`` after the epochs it continued (a
    resume with ``resume_epochs="additional"`` trains n_epochs more than its source had)."""
    train = run.config.get("train") or {}
    status = run.resume_status or {}
    continued = train.get("parent_run_id") and train.get("resume_epochs", "additional") != "planned"
    source_epoch = status.get("source_epoch") if continued else None
    return int(train["n_epochs"]) + (0 if source_epoch is None else int(source_epoch) + 1)


def check_plan(source: NNRun, epoch: int, n_epochs: int, stateful: bool) -> None:
    """``resume_epochs="planned"``: the resume restores the training state, keeps the source's
    plan and has epochs left of it; refused before anything is restored."""
    where = f"resume_from_run_id={source.id!r}"
    if not stateful:
        raise ResumeMismatchError(f"{where}: resume_epochs='planned' continues a run's training state; this resume "
                                  "restores the weights only (resume_mode='weights_only', or a checkpoint without "
                                  "training state): resume statefully, or use resume_epochs='additional'")
    plan = planned_end(source)
    if plan != n_epochs:
        raise ResumeMismatchError(f"{where}: run {source.id[:8]} planned {plan} epochs; a planned resume continues that "
                                  f"plan: set n_epochs={plan}, or use resume_epochs='additional' to train n_epochs more")
    if epoch + 1 >= plan:
        raise ResumeMismatchError(f"{where}: run {source.id[:8]} already completed its planned {plan} epochs (through "
                                  f"epoch {epoch}): nothing is left to resume; resume_epochs='additional' trains more")


OPTIMIZER_STATE = ("max_lr", "momentum", "weight_decay", "eps")  # what a restored optimizer's param_groups carry


def optimizer_changes(source: Mapping[str, Any], config: Mapping[str, Any]) -> list[str]:
    """The optimizer hyperparameters a stateful continuation would silently replace: each one
    ``config`` gives otherwise than the source run's configuration (``optim``, or a Trainer's
    ``optims``), as ``"optim.max_lr 0.1 → 0.01"``. Another optimizer kind is not compared: its
    state does not fit at all, which the restore refuses (``ComponentRestoreError``)."""
    before, now = source.get("train") or {}, config.get("train") or {}
    pairs = [("optim", before.get("optim"), now.get("optim"))]
    pairs += [(f"optims.{name}", (before.get("optims") or {}).get(name), o) for name, o in (now.get("optims") or {}).items()]
    return [f"{where}.{key} {b.get(key)!r} → {n.get(key)!r}" for where, b, n in pairs
            if isinstance(b, Mapping) and isinstance(n, Mapping) and b.get("name") == n.get("name")
            for key in OPTIMIZER_STATE if b.get(key) != n.get(key)]


def check_weights_fit(net: Any, weights: Mapping[str, Any], where: str) -> None:
    """A resume point's weights must fit the model, names and shapes (also for
    ``resume_mode='weights_only'``): refused before anything is written, naming what differs."""
    mine = net.state_dict()
    missing, extra = sorted(set(mine) - set(weights)), sorted(set(weights) - set(mine))
    shapes = [f"{k} {tuple(weights[k].shape)} → {tuple(mine[k].shape)}" for k in sorted(set(mine) & set(weights))
              if tuple(weights[k].shape) != tuple(mine[k].shape)]
    parts = [f"{label}: {', '.join(names[:6])}{' …' if len(names) > 6 else ''}"
             for label, names in (("shapes (checkpoint → model)", shapes), ("only in this model", missing),
                                  ("only in the checkpoint", extra)) if names]
    if parts:
        raise ResumeMismatchError(
            f"{where}'s weights do not fit this model ({'; '.join(parts)}); a resume, also resume_mode='weights_only', "
            "needs the same architecture. To start another one from the parts that fit, use "
            "model.load_pretrained(source, strict=False) and train without resume_from_run_id"
        )


def verified(files: RunFiles, manifest: Any, where: str) -> tuple[bytes, Payload]:
    """A resume point's bytes, verified against its SHA-256, and its payload (safe loader); a torn
    or corrupted one is a ``ResumePointError`` before anything is restored."""
    try:
        data = files.read_blob(manifest.blobs["state"], verify=True)
        return data, decode_payload(data, where)
    except ResumePointError:
        raise
    except CorruptRunError as exc:
        raise ResumePointError(f"{where}: the resume point cannot be trusted: {exc}") from exc


def refuse(entry: Any, group: Any, payload: Payload, stateful: bool) -> None:
    """A checkpoint of another entry point, world size or partition is refused for a stateful resume."""
    if not stateful:
        return
    kind = adm.kind_refusal(payload.kind, group.kind(entry.kind.name), accepted=group.accepted_kinds(entry.kind.name))
    if kind is not None or not isinstance(payload, CheckpointPayload):  # a weights-only one: kind 'weights'
        raise ComponentRestoreError([kind or f"checkpoint of kind {payload.kind!r} holds no training state"])
    reason = group.refusal(payload, stateful)
    if reason is not None:
        raise ResumeMismatchError(reason)


def admit(
    entry: Any, group: Any, files: RunFiles, lease: contextlib.ExitStack, source: Plan | None, current: Any,
    code: Any = None,
) -> Plan:
    """Under the run lease: fresh (with the resume point, if any), continue from LAST, or finished.
    ``current`` / ``code``: this call's data and code fingerprints; a run recorded with other data
    (``DataChangedError``) or other code (``CodeChangedError``) is refused before it is continued
    or returned."""
    lease.enter_context(files.storage.lease(files.run_id))
    settled = replacement.settle(files, at=now())  # a replacement a killed writer left: finished or rolled back
    if settled is not None:
        warnings.warn(f"run {files.run_id[:8]}: an interrupted replacement was settled ({settled})", RuntimeWarning, stacklevel=2)
    files.storage.clean_temporaries(files.run_id)  # a hard kill can leave temporaries behind (never visible)
    restored = complete_tags(files)  # a crash after LAST left its BEST / phase tags undone: finished as the commit would
    if restored:
        warnings.warn(
            f"run {files.run_id[:8]}: checkpoints/{', '.join(f'{tag}.json' for tag in restored)} lagged behind LAST, which "
            "lists them (a commit stopped after LAST, or a file removed): written again from LAST", RuntimeWarning,
            stacklevel=2,
        )
    train = entry.train
    with eager_history.parsed_once():  # admission and NNRun.load read the same history: parsed once
        decided = adm.admit(
            files, resume=train.resume == "auto", overwrite=train.overwrite_existing, n_epochs=train.n_epochs,
            where=str(getattr(files.storage, "root", "the runs root")),
        )
        if decided.action == adm.FRESH:
            return attrs.evolve(source or Plan(action=adm.FRESH), replace=decided.replace)
        loaded = NNRun.load(files.run_id, entry.root, storage=files.storage)
    refused = adm.data_refusal(files.run_id, loaded.data_fingerprint, current) or user_code.code_refusal(
        files.run_id, loaded.code_fingerprint, code or {})
    if refused is not None:
        raise refused
    unchecked = user_code.unreadable(loaded.code_fingerprint, code or {})
    if unchecked:
        warnings.warn(
            f"run {files.run_id[:8]}: the source of {', '.join(unchecked)} cannot be read, so NNx cannot tell whether it "
            "changed since the run was trained", RuntimeWarning, stacklevel=2,
        )
    data, payload = verified(files, decided.last, f"run {files.run_id} LAST")
    if decided.action == adm.FINISHED:
        return Plan(action=adm.FINISHED, data=data, status=loaded.resume_status, idps=loaded.idps, compile=loaded.compile)
    refuse(entry, group, payload, True)
    history_setup.check_continuation(files, entry.history)
    lost = loaded.lost_best()
    if lost is not None:
        warnings.warn(
            f"run {files.run_id[:8]}: checkpoints/best.json is missing, though epoch {lost} was the best: BEST is written "
            "again only by an epoch that improves on it (`nnx runs verify` reports it)", RuntimeWarning, stacklevel=2,
        )
    status = {"mode": "stateful", "source_run_id": files.run_id, "source_checkpoint": LAST, "source_epoch": decided.last.epoch}  # type: ignore[union-attr]
    partial = loaded.partial.records if loaded.partial is not None else ()  # a mid-epoch LAST's epoch goes on
    return Plan(action=adm.CONTINUE, data=data, stateful=True, status=status, idps=(*loaded.idps, *partial))


def write_admitted(
    files: RunFiles, run: NNRun, journal: Any, fresh: bool, attempt: adm.AttemptRecord, *, replace: bool = False
) -> None:
    """The writer's first writes, once every check passed: a fresh run's run.yaml, metadata and
    empty history (a replacement first moves the committed run aside), or a continuation's
    metadata; then the attempt record (a continuation's counts on from the previous one's)."""
    if replace:
        replacement.begin(files, attempt.attempt_id, attempt.started_at)
    if fresh:
        run.save(eager_history=journal is None)
    else:
        attempt.follow(adm.attempt_now(files, lease_held=True))  # a killed attempt settled: interrupted, LAST's epoch
        files.storage.write(files.metadata_yaml, dump_yaml(run.metadata()))
    attempt.save(files)


def finish(files: RunFiles, run: NNRun, attempt: adm.AttemptRecord, status: str) -> None:
    """The attempt's end; a compiled run first rewrites metadata.yaml with its final ``CompileRecord``."""
    if run.compile is not None:
        files.storage.write(files.metadata_yaml, dump_yaml(run.metadata()))
    attempt.finish(files, status, now())


def now() -> str:
    """UTC timestamp for attempt records."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def on_failure(files: RunFiles, attempt: adm.AttemptRecord, exc: BaseException, fresh: bool, *, replace: bool = False) -> None:
    """A fresh run that never committed is removed (so the same call can be retried) — a replacement
    that never committed is rolled back, the previous run renamed back; otherwise the attempt is
    recorded as failed. Ctrl-C (``KeyboardInterrupt``) records the attempt as interrupted (and
    rolls back a replacement that never committed); a crash or kill leaves everything as it is
    (the next writer settles a replacement). A preemption (``TrainingPreempted``) is recorded as
    interrupted, like Ctrl-C: what it committed stays."""
    if isinstance(exc, (KeyboardInterrupt, TrainingPreempted)):  # Ctrl-C or a signal: an orderly stop, so say so
        with contextlib.suppress(Exception):
            if not (replace and replacement.settle(files, at=now(), error=exc) == replacement.KEPT) and files.exists():
                attempt.finish(files, adm.INTERRUPTED, now(), error=exc)
        return
    if not isinstance(exc, Exception):
        return
    with contextlib.suppress(Exception):  # the training error is the one to report
        if replace and replacement.settle(files, at=now(), error=exc) == replacement.KEPT:
            return
        if not (fresh and adm.discard_uncommitted(files)) and files.exists():
            attempt.finish(files, adm.FAILED, now(), error=exc)


WRITE_ERRNOS = frozenset(
    getattr(errno, name) for name in ("EIO", "EACCES", "EPERM", "EFBIG", "ENOSPC", "EROFS", "EDQUOT") if hasattr(errno, name)
)
"""The errno values of a failed write: a full disk or quota, a read-only or unwritable root, EIO."""


def note_write_failure(entry: Any, exc: OSError) -> None:
    """A failed write of the run (see ``nnx_core.admission.write_failure_note``) names what is
    committed; an ``OSError`` of the user's own files (a data file) is left as it is."""
    storage = entry.storage if entry.storage is not None else FileStorage(runs_root(entry.root))
    root = getattr(storage, "root", None)
    inside = exc.filename is None or root is None or os.path.abspath(str(exc.filename)).startswith(os.path.abspath(str(root)))
    if exc.errno not in WRITE_ERRNOS or not inside or getattr(exc, "__notes__", None):
        return
    run_id = NNRun(config=entry.config, root=runs_root(entry.root)).id
    with contextlib.suppress(Exception):
        last = RunFiles(storage, run_id).read_tag(LAST)
        exc.add_note(adm.write_failure_note(run_id, last))
