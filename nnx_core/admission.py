"""Admission: what one ``train()`` call may do with the run folder its configuration names.

Decided by the writer under the run lease, before any session starts (``admit``)::

    no run folder                                  → fresh
    no LAST, and the attempt record says "running" → its writer was killed before the first
                                                     commit (we hold the lease, so it is not
                                                     alive): the folder is removed → fresh
    resume="auto" and LAST exists
        LAST holds the last epoch, or the last attempt completed (an early stop)  → finished
        otherwise                                                                 → continue
    resume="auto" and no LAST                      → the folder is removed → fresh
    overwrite_existing=True                        → the folder is removed → fresh
    otherwise                                      → RunExistsError, saying how to proceed

The attempt record (``attempt.json``) is written when an attempt starts ("running") and when it
ends ("completed"; "stopped" after a stop at an update boundary; "failed"). It is not rewritten
per epoch: LAST's manifest is the commit marker and names the committed epoch. A "running" record
whose lease is free belongs to an interrupted attempt (killed, or stopped with Ctrl-C):
``attempt_status`` reports it as "interrupted".

A fresh run whose attempt failed before its first commit is removed (``discard_uncommitted``) so
the same configuration can simply be retried; a kill leaves it for the next admission (above).

A checkpoint resumes statefully only through the entry point whose kind wrote it
(``kind_refusal``); a data-parallel checkpoint only at its own world size and partition
(``nnx_core.agreement.resume_refusal``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import attrs

from nnx_core.commit import LAST, RunFiles, TagManifest, write_json
from nnx_core.errors import RunExistsError

FRESH, CONTINUE, FINISHED = "fresh", "continue", "finished"
RUNNING, COMPLETED, STOPPED, FAILED, INTERRUPTED = "running", "completed", "stopped", "failed", "interrupted"


@attrs.frozen
class Admission:
    """The writer's answer: ``action`` (fresh / continue / finished) and, to continue or return,
    the committed LAST."""

    action: str
    last: TagManifest | None = None


def admit(files: RunFiles, *, resume: bool, overwrite: bool, n_epochs: int, where: str = "the runs root") -> Admission:
    """Admission of a run under its lease (the module docstring's table)."""
    if not files.exists():
        return Admission(FRESH)
    last = files.read_tag(LAST)
    if last is None and attempt_status(read_attempt(files), lease_free=False) == RUNNING:
        files.storage.remove_tree(files.run_id)  # a killed first attempt: nothing was committed
        return Admission(FRESH)
    if resume and last is not None:
        finished = last.epoch + 1 >= n_epochs or (read_attempt(files) or {}).get("status") == COMPLETED
        return Admission(FINISHED if finished else CONTINUE, last)
    if not resume and not overwrite:
        raise RunExistsError(
            f"run {files.run_id} already exists under {where}. Pass overwrite_existing=True to replace it, "
            "salt='...' or data_id='...' for a distinct run, or resume='auto' to continue it"
        )
    files.storage.remove_tree(files.run_id)
    return Admission(FRESH)


def read_attempt(files: RunFiles) -> dict[str, Any] | None:
    """The run's attempt record, None when absent or unreadable."""
    try:
        doc = json.loads(files.storage.read(files.attempt))
    except (FileNotFoundError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def attempt_status(record: Mapping[str, Any] | None, *, lease_free: bool) -> str | None:
    """What an attempt record means now: its status, with "running" read as "interrupted" when
    nobody holds the run's lease (its writer is gone)."""
    if record is None:
        return None
    status = record.get("status")
    return INTERRUPTED if status == RUNNING and lease_free else status


@attrs.define(kw_only=True)
class AttemptRecord:
    """The writer's record of one ``train()`` attempt (``attempt.json``)."""

    attempt_id: str
    run_id: str
    status: str = RUNNING
    started_at: str
    finished_at: str | None = None
    last_committed_epoch: int | None = None
    last_committed_tag: str | None = None
    error: str | None = None

    def save(self, files: RunFiles) -> None:
        """Atomically replace attempt.json."""
        write_json(files.storage, files.attempt, attrs.asdict(self))

    def finish(self, files: RunFiles, status: str, at: str, *, error: BaseException | None = None) -> None:
        """Record the attempt's end: its status, when, the committed epoch (LAST's) and any error."""
        last = files.read_tag(LAST)
        self.status, self.finished_at = status, at
        self.last_committed_epoch, self.last_committed_tag = (last.epoch, LAST) if last is not None else (None, None)
        if error is not None:
            self.error = f"{type(error).__name__}: {str(error)[:500]}"
        self.save(files)


def discard_uncommitted(files: RunFiles) -> bool:
    """Remove a run folder that holds no committed epoch (no LAST); return whether it did."""
    if files.storage.exists(files.tag_path(LAST)):
        return False
    files.storage.remove_tree(files.run_id)
    return True


def kind_refusal(saved: str | None, entry: str, *, accepted: tuple[str, ...] = ()) -> str | None:
    """Why a checkpoint written by entry kind ``saved`` cannot be restored statefully by ``entry``
    (None when it can: the same kind, or one of ``accepted``)."""
    if saved == entry or saved in accepted:
        return None
    if entry == "trainer":
        return (
            f"checkpoint was written by {saved!r}, not a Trainer; resume it with NNModel.train "
            "(or use resume_mode='weights_only' to start from its weights)"
        )
    return f"checkpoint was written by {saved!r}; resume it with that entry point"
