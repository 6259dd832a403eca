"""The resume point and admission, as the pipeline's writer rank performs them.

``resume_point`` reads and verifies (SHA-256) the checkpoint ``resume_from_run_id`` names and
refuses a stateful resume of another entry point, world size or partition — before anything is
written. ``admit`` takes the run lease and applies ``nnx_core.admission``'s rules (fresh,
continue from LAST, finished); ``write_admitted`` makes the run's first writes once every check
has passed. The answers travel to every rank as a ``Plan``.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Mapping
from typing import Any

import attrs

from nnx_core import admission as adm
from nnx_core.commit import LAST, RunFiles
from nnx_core.errors import ComponentRestoreError, CorruptRunError, ResumeMismatchError, ResumePointError, RunNotFoundError
from nnx_core.identity import validate_run_id, validate_tag
from nnx_adapters.pytorch import state as torch_state
from nnx_api.runs.run import NNRun, dump_yaml
from nnx_api.training import history
from nnx_api.training.session import named_state


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


def resume_point(entry: Any, group: Any, storage: Any) -> Plan | None:
    """``resume_from_run_id``'s checkpoint (verified against its SHA-256) and how to restore it."""
    train = entry.train
    if train.resume_from_run_id is None:
        return None
    source_id, tag = validate_run_id(train.resume_from_run_id), validate_tag(train.resume_from_checkpoint)
    source = NNRun.load(source_id, entry.root, storage=storage)
    checkpoint = source.checkpoint(tag)
    if checkpoint is None:
        raise RunNotFoundError(f"run {source_id} has no committed {tag!r} checkpoint (tags: {source.tags()})")
    data, payload = verified(source.files(), checkpoint.manifest, f"run {source_id} tag {tag!r}")
    stateful = "optimizer" in payload
    if train.resume_mode == "stateful" and not stateful:
        raise ResumeMismatchError(f"{source_id}:{tag} holds weights only; use resume_mode='weights_only'")
    if not stateful and train.resume_mode == "auto":
        warnings.warn(
            f"checkpoint {tag!r} of run {source_id} holds weights only: the weights are restored, but the optimizer, "
            "schedule and components restart from their defaults (resume_mode='weights_only' asks for exactly that)",
            RuntimeWarning, stacklevel=2,
        )
    stateful = stateful and train.resume_mode != "weights_only"
    refuse(entry, group, payload, stateful)
    status = {"mode": "stateful" if stateful else "weights_only", "source_run_id": source_id, "source_checkpoint": tag,
              "source_epoch": checkpoint.epoch}
    return Plan(action=adm.FRESH, data=data, stateful=stateful, status=status, schedules=named_state(payload)[1] if stateful else None)


def verified(files: RunFiles, manifest: Any, where: str) -> tuple[bytes, dict[str, Any]]:
    """A resume point's bytes, verified against its SHA-256, and its payload (safe loader); a torn
    or corrupted one is a ``ResumePointError`` before anything is restored."""
    try:
        data = files.read_blob(manifest.blobs["state"], verify=True)
        return data, torch_state.decode(data, where=where)
    except ResumePointError:
        raise
    except CorruptRunError as exc:
        raise ResumePointError(f"{where}: the resume point cannot be trusted: {exc}") from exc


def refuse(entry: Any, group: Any, payload: Mapping[str, Any], stateful: bool) -> None:
    """A checkpoint of another entry point, world size or partition is refused for a stateful resume."""
    if not stateful:
        return
    kind = adm.kind_refusal(payload.get("kind"), group.kind(entry.kind), accepted=group.accepted_kinds)
    if kind is not None:
        raise ComponentRestoreError([kind])
    reason = group.refusal(payload, stateful)
    if reason is not None:
        raise ResumeMismatchError(reason)


def admit(entry: Any, group: Any, files: RunFiles, lease: contextlib.ExitStack, source: Plan | None) -> Plan:
    """Under the run lease: fresh (with the resume point, if any), continue from LAST, or finished."""
    lease.enter_context(files.storage.lease(files.run_id))
    files.storage.clean_temporaries(files.run_id)  # a hard kill can leave temporaries behind (never visible)
    train = entry.train
    decided = adm.admit(
        files, resume=train.resume == "auto", overwrite=train.overwrite_existing, n_epochs=train.n_epochs,
        where=str(getattr(files.storage, "root", "the runs root")),
    )
    if decided.action == adm.FRESH:
        return source or Plan(action=adm.FRESH)
    loaded = NNRun.load(files.run_id, entry.root, storage=files.storage)
    data, payload = verified(files, decided.last, f"run {files.run_id} LAST")
    if decided.action == adm.FINISHED:
        return Plan(action=adm.FINISHED, data=data, status=loaded.resume_status, idps=loaded.idps)
    refuse(entry, group, payload, True)
    history.check_continuation(files, entry.history)
    status = {"mode": "stateful", "source_run_id": files.run_id, "source_checkpoint": LAST, "source_epoch": decided.last.epoch}  # type: ignore[union-attr]
    return Plan(action=adm.CONTINUE, data=data, stateful=True, status=status, idps=loaded.idps)


def write_admitted(files: RunFiles, run: NNRun, journal: Any, fresh: bool, attempt: adm.AttemptRecord) -> None:
    """The writer's first writes, once every check passed: a fresh run's run.yaml, metadata and
    empty history, or a continuation's metadata; then the attempt record."""
    if fresh:
        run.save(eager_history=journal is None)
    else:
        files.storage.write(files.metadata_yaml, dump_yaml(run.metadata()))
    attempt.save(files)
