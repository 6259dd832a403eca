"""Admission: what one ``train()`` call may do with the run folder its configuration names.

Decided by the writer under the run lease, before any session starts (``admit``)::

    no run folder                                  → fresh
    no LAST, and the attempt record says "running" → its writer was killed (or stopped with
    or "interrupted"                                 Ctrl-C) before the first commit (we hold the
                                                     lease, so it is not alive): the folder is
                                                     removed → fresh
    resume="auto" and LAST exists
        the history lacks an epoch LAST committed   → CorruptRunError (``nnx runs verify``)
        (or, for a mid-epoch LAST, the records of its epoch it committed)
        LAST is mid-epoch (``nnx_core.commit.Position``)                          → continue
        LAST holds the last epoch, or the last attempt completed (an early stop)  → finished
        otherwise                                                                 → continue
    no LAST, but the run committed before (its history spans two epochs, or its
        attempt record names a committed epoch): checkpoints/ vanished   → CorruptRunError
    resume="auto" and no LAST                      → the folder is removed → fresh
    overwrite_existing=True, no LAST               → the folder is removed → fresh
    overwrite_existing=True, LAST exists           → fresh, replacing: the committed run is kept
                                                     until the new attempt commits its first
                                                     epoch (``nnx_core.replacement``)
    otherwise                                      → RunExistsError, saying how to proceed

The attempt record (``attempt.json``) is written when an attempt starts ("running") and when it
ends ("completed"; "stopped" after a stop at an update boundary; "failed"; "interrupted" after
Ctrl-C). A continuation's record counts on from the previous one (``number``) and lists the
earlier attempts (``earlier``: each one's id, status, times and committed epoch), so restarts
— a relaunch, or torchrun's ``--max-restarts`` — show in the run's own files. It is not rewritten
per epoch: LAST's manifest is the commit marker and names the committed epoch. A "running" record
whose lease is free belongs to an interrupted attempt (killed, or stopped with Ctrl-C):
``attempt_status`` reports it as "interrupted". Every reader reads the record through
``attempt_now``, which applies that rule and takes the committed epoch from LAST.

The committed epoch of a record (``last_committed_epoch``) is always one committed whole: LAST's
epoch, or for a mid-epoch LAST the epoch before it (``nnx_core.commit.complete_epoch``; None at
epoch 0). ``last_committed_position`` says how far the epoch in progress is committed:
``{"epoch": e, **Position.state()}`` for a mid-epoch LAST, None (absent from a saved record)
otherwise. So a reader that knows only ``last_committed_epoch`` never takes a partial epoch for
a finished one, and an epoch-end LAST reads exactly as before.

A fresh run whose attempt failed before its first commit is removed (``discard_uncommitted``) so
the same configuration can simply be retried; a kill leaves it for the next admission (above).

On a continuation or return, ``data_refusal`` compares the data fingerprint recorded with the run
(``nnx_api.training.fingerprint``) with this call's: other data is refused (``DataChangedError``)
rather than continued or returned as if it were the same. ``write_failure_note`` is what a
failed write (a full disk, a read-only root) adds to its ``OSError``: which epoch is committed,
and how to continue.

A checkpoint resumes statefully only through the entry point whose kind wrote it
(``kind_refusal``); a data-parallel checkpoint only at its own world size and partition
(``nnx_core.agreement.resume_refusal``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import attrs

from nnx_core.commit import LAST, RunFiles, TagManifest, committed_coverage, complete_epoch, position_of, read_history, write_json
from nnx_core.eager_history import parse_history
from nnx_core.errors import CorruptRunError, DataChangedError, RunExistsError, RunLeaseError
from nnx_core.journal_reader import JournalReader, has_journal

FRESH, CONTINUE, FINISHED = "fresh", "continue", "finished"
RUNNING, COMPLETED, STOPPED, FAILED, INTERRUPTED = "running", "completed", "stopped", "failed", "interrupted"


@attrs.frozen
class Admission:
    """The writer's answer: ``action`` (fresh / continue / finished) and, to continue or return,
    the committed LAST."""

    action: str
    last: TagManifest | None = None
    replace: bool = False  # fresh over a committed run: nnx_core.replacement keeps it until the first commit


def admit(files: RunFiles, *, resume: bool, overwrite: bool, n_epochs: int, where: str = "the runs root") -> Admission:
    """Admission of a run under its lease (the module docstring's table)."""
    if not files.exists():
        return Admission(FRESH)
    last = files.read_tag(LAST)
    if last is None and not overwrite:
        _refuse_vanished(files)
    if last is None and attempt_status(read_attempt(files), lease_free=False) in (RUNNING, INTERRUPTED):
        files.storage.remove_tree(files.run_id)  # a killed (or Ctrl-C'd) first attempt: nothing was committed
        return Admission(FRESH)
    if resume and last is not None:
        _refuse_history_gap(files, last)
        finished = position_of(last) is None and (
            last.epoch + 1 >= n_epochs or (read_attempt(files) or {}).get("status") == COMPLETED
        )
        return Admission(FINISHED if finished else CONTINUE, last)
    if not resume and not overwrite:
        raise RunExistsError(
            f"run {files.run_id} already exists under {where}. Pass overwrite_existing=True to replace it, "
            "salt='...' or data_id='...' for a distinct run, or resume='auto' to continue it"
        )
    if last is not None:
        return Admission(FRESH, replace=True)
    files.storage.remove_tree(files.run_id)
    return Admission(FRESH)


def _eager_epochs(files: RunFiles, last: TagManifest | None) -> list[int] | None:
    """The epochs an eager history (idps.csv) holds, up to ``last`` (every row without it); None
    for a journal run, or no idps.csv and nothing committed (a deleted idps.csv under a LAST holds
    no epoch: ``[]``)."""
    if has_journal(files.storage, files.run_id):
        return None
    if not files.storage.exists(files.history):
        return None if last is None else []
    if last is None:
        return [r.epoch_idx for r in parse_history(files.storage.read(files.history))]
    return [r.epoch_idx for r in read_history(files, last)]


def _refuse_history_gap(files: RunFiles, last: TagManifest) -> None:
    """An eager history that lacks an epoch LAST committed (or records of a mid-epoch LAST's
    epoch it committed) would be continued (or returned) with a hole in it: refused, as ``nnx runs
    verify`` reports it."""
    epochs = _eager_epochs(files, last)
    problems = committed_coverage(epochs, last, "its history (idps.csv)", "rows") if epochs is not None else []
    if epochs == [] and not files.storage.exists(files.history):
        problems = [f"its history (idps.csv) is missing, though LAST committed epoch {last.epoch} (the checkpoints "
                    "are intact); put idps.csv back from a backup to continue it"]
    if problems:
        raise CorruptRunError(
            f"run {files.run_id} cannot be resumed: {problems[0]}; nothing was changed. Inspect it with "
            f"`nnx runs verify {files.run_id[:8]}`; to start this configuration over, pass overwrite_existing=True "
            "(without resume='auto')"
        )


def _refuse_vanished(files: RunFiles) -> None:
    """No LAST, yet the run committed before: its checkpoints were removed. Restarting would write
    a new history over the old one, so it is refused. Commit order: the history of epoch e+1 is
    written only after LAST named epoch e, so a history of two epochs proves a commit — in
    ``idps.csv`` or in the journal's manifest alike; one epoch's history is what a kill inside
    the first commit leaves (before its LAST), which is restarted."""
    epochs = sorted(set(_eager_epochs(files, None) or ()))
    journal = JournalReader.open(files.storage, files.run_id, None)
    journal_epochs = journal.manifest.epochs + bool(journal.manifest.open_records) if journal is not None else 0
    record = read_attempt(files) or {}
    committed = record.get("last_committed_epoch")
    committed = committed if committed is not None else record.get("last_committed_position")  # a mid-epoch one
    if len(epochs) < 2 and committed is None and journal_epochs < 2:
        return
    if len(epochs) >= 2:
        seen = f"history for epochs {epochs[0]}..{epochs[-1]}"
    elif journal_epochs >= 2:
        seen = f"a journal of {journal_epochs} epochs"
    else:
        seen = "a record of committed epochs"
    raise CorruptRunError(
        f"run {files.run_id} holds {seen} but no committed checkpoint (its checkpoints/ folder is missing or "
        "emptied); refusing to train over its history. Put checkpoints/ back, or pass overwrite_existing=True "
        "(without resume='auto') to discard the run and start over"
    )


def data_refusal(run_id: str, recorded: Mapping[str, Any] | None, current: Mapping[str, Any]) -> DataChangedError | None:
    """Why this call's data fingerprint does not fit the one ``run_id`` recorded (None: it fits, or
    the run recorded none — it predates fingerprints)."""
    if recorded is None:
        return None
    changes = []
    for loader in sorted(set(recorded) | set(current)):
        before, now = recorded.get(loader), current.get(loader)
        if before is None or now is None:
            changes.append(f"{loader} {'is given now, not then' if before is None else 'was given then, not now'}")
            continue
        diff = [f"rows {before.get('rows')} → {now.get('rows')}"] if before.get("rows") != now.get("rows") else []
        if None not in (before.get("batches"), now.get("batches")) and before.get("batches") != now.get("batches"):
            diff.append(f"batches {before.get('batches')} → {now.get('batches')}")  # None: not known (a rank's share)
        if before.get("batch") != now.get("batch"):
            diff.append(f"first batch {now.get('batch')} (was {before.get('batch')})")
        if before.get("sample") != now.get("sample") and not diff:
            diff.append(f"the sampled rows differ ({now.get('sampled', 'a sample')})")
        if diff:
            changes.append(f"{loader}: {', '.join(diff)}")
    if not changes:
        return None
    return DataChangedError(
        f"run {run_id[:8]} was trained on other data ({'; '.join(changes)}), so resume='auto' will not continue "
        "or return it. For a distinct run on this data pass data_id='<a name for this data>' to NNTrainParams; "
        "to replace the old run, drop resume='auto' and pass overwrite_existing=True"
    )


def write_failure_note(run_id: str, committed: TagManifest | int | None) -> str:
    """The note a failed write (a full disk, a read-only root) carries: which epoch is committed
    and how to go on. It is added to the error as it is (``BaseException.add_note``).

    ``committed``: LAST's manifest (a mid-epoch one is said as "epoch e is committed up to update
    U of it"), or the epoch an epoch-end LAST names; None when nothing is committed."""
    position = position_of(committed) if isinstance(committed, TagManifest) else None
    if isinstance(committed, TagManifest) and position is not None:
        of = "" if position.epoch_updates is None else f" (of {position.epoch_updates})"
        return (
            f"NNx: run {run_id[:8]}: epoch {committed.epoch} is committed up to update {position.updates} of it{of} "
            "(LAST, mid-epoch) and intact. Once the runs root is writable and has space, rerun with resume='auto' to "
            f"continue epoch {committed.epoch} from there."
        )
    committed_epoch = committed.epoch if isinstance(committed, TagManifest) else committed
    if committed_epoch is None:
        return (
            f"NNx: run {run_id[:8]} has no committed epoch (nothing of it is left half-written). Once the runs "
            "root is writable and has space, run the same call again."
        )
    return (
        f"NNx: run {run_id[:8]}: epoch {committed_epoch} is committed (LAST) and intact. Once the runs root is "
        f"writable and has space, rerun with resume='auto' to continue from epoch {committed_epoch + 1}."
    )


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


def attempt_now(files: RunFiles, *, lease_held: bool = False) -> dict[str, Any] | None:
    """THE reader of a run's attempt record (None when there is none): the record as it stands now,
    so every reader — ``NNRun.attempt()``, ``nnx runs list / show / verify``, the next writer's
    ``AttemptRecord.follow`` — tells one truth. A killed writer cannot rewrite its record, so
    its "running" is read here: ``status`` is "interrupted" when nobody holds the run's lease
    (``attempt_status``; a live writer's lease, or a root where the lease cannot be probed,
    keeps "running"), and ``last_committed_epoch`` / ``last_committed_position`` /
    ``last_committed_tag`` are LAST's (the commit marker; the record is not rewritten per epoch;
    ``committed_fields``). ``lease_held``: the caller holds the lease (the writer under
    admission), so a "running" record is a gone writer's."""
    record = read_attempt(files)
    if record is None:
        return None
    lease_free = lease_held
    if record.get("status") == RUNNING and not lease_held:
        try:
            with files.storage.lease(files.run_id):
                lease_free = True
        except (RunLeaseError, OSError):  # its writer holds it; or a read-only root: it cannot be probed
            lease_free = False
    return {**record, "status": attempt_status(record, lease_free=lease_free), **committed_fields(files.read_tag(LAST))}


def committed_fields(last: TagManifest | None) -> dict[str, Any]:
    """An attempt record's view of LAST (module docstring): ``last_committed_epoch`` (the newest
    epoch committed whole), ``last_committed_position`` (``{"epoch": e, **Position.state()}``
    for a mid-epoch LAST, else None) and ``last_committed_tag``."""
    position = None if last is None else position_of(last)
    return {
        "last_committed_epoch": complete_epoch(last),
        "last_committed_position": None if last is None or position is None else {"epoch": last.epoch, **position.state()},
        "last_committed_tag": None if last is None else LAST,
    }


EARLIER_KEPT = 100  # earlier attempts an attempt record lists (its ``number`` keeps counting past them)
EARLIER_FIELDS = ("attempt_id", "status", "started_at", "finished_at", "last_committed_epoch", "error")


@attrs.define(kw_only=True)
class AttemptRecord:
    """The writer's record of one ``train()`` attempt (``attempt.json``)."""

    attempt_id: str
    run_id: str
    status: str = RUNNING
    started_at: str
    finished_at: str | None = None
    last_committed_epoch: int | None = None  # committed whole (module docstring)
    last_committed_tag: str | None = None
    last_committed_position: Mapping[str, Any] | None = None  # a mid-epoch LAST's epoch and position
    error: str | None = None
    compile: Mapping[str, Any] | None = None  # the CompileRecord's state, only when compilation was asked for
    number: int = 1  # this attempt's place among the run's attempts (1: the attempt that started it)
    earlier: list[dict[str, Any]] = attrs.Factory(list)  # the run's earlier attempts, oldest first (at most EARLIER_KEPT)

    def follow(self, previous: Mapping[str, Any] | None) -> None:
        """Continue the count of a run's attempts from the record the last one left (read by the
        writer under the lease, so a "running" record is an attempt that was killed or lost:
        it is kept as "interrupted"). Restarts show here, counted from the run's own files, not
        from the launcher's environment."""
        if previous is None:
            return
        earlier = [dict(e) for e in previous.get("earlier", ()) if isinstance(e, Mapping)]
        number = previous.get("number", 1)
        number = number if isinstance(number, int) and not isinstance(number, bool) and number >= 1 else len(earlier) + 1
        summary = {key: previous.get(key) for key in EARLIER_FIELDS}
        if previous.get("last_committed_position") is not None:  # it ended inside an epoch
            summary["last_committed_position"] = previous["last_committed_position"]
        summary["number"], summary["status"] = number, attempt_status(previous, lease_free=True)
        self.number, self.earlier = number + 1, (earlier + [summary])[-EARLIER_KEPT:]

    def save(self, files: RunFiles) -> None:
        """Atomically replace attempt.json (``compile`` and ``last_committed_position`` only when set)."""
        optional = ("compile", "last_committed_position")
        write_json(files.storage, files.attempt, attrs.asdict(self, filter=lambda a, v: a.name not in optional or v is not None))

    def finish(self, files: RunFiles, status: str, at: str, *, error: BaseException | None = None) -> None:
        """Record the attempt's end: its status, when, what LAST commits (``committed_fields``)
        and any error."""
        fields = committed_fields(files.read_tag(LAST))
        self.status, self.finished_at = status, at
        self.last_committed_epoch, self.last_committed_tag = fields["last_committed_epoch"], fields["last_committed_tag"]
        self.last_committed_position = fields["last_committed_position"]
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
