"""History journals at the API: ``history=HistoryJournal(...)`` for training, and the readers.

    model.train(params, history=nnx.HistoryJournal(retention=1000))   # bounded memory, O(1) commits
    for idp in nnx.iter_history(run_id, lineage=True): ...            # every committed record
    nnx.export_history_csv(run_id, "history.csv")                      # the eager idps.csv layout
    nnx.migrate_history(run_id)                                        # an eager run → a journal

The format lives in ``nnx_core.journal_format``, the reader in ``nnx_core.journal_reader`` and the
commit step in ``nnx_core.journal``; what training checks and opens lives in
``nnx_api.training.history_setup``. Here: the readers over both history formats (journal runs
and eager ``idps.csv`` runs), the CSV export and the migration.
"""

from __future__ import annotations

import csv
import io
import os
import warnings
from collections.abc import Iterator
from typing import Any

from nnx_core.commit import LAST, RunFiles, TagManifest, committed_coverage, history_cut, history_tail, position_of, read_history
from nnx_core.eager_history import flatten
from nnx_core.errors import HistoryCorruptionError, ParamsError, RunNotFoundError
from nnx_core.identity import validate_run_id
from nnx_core.journal import HistoryJournal, JournalWriter
from nnx_core.journal_format import read_chunk
from nnx_core.journal_reader import JournalReader, has_journal
from nnx_core.records import IterationDataPoint
from nnx_adapters.storage.fs import FileStorage
from nnx_api.runs.partial import committed_journal
from nnx_api.runs.run import NNRun
from nnx_api.runs.store import run_not_found, runs_root

# -- readers over both formats --------------------------------------------------------------------


def _lineage(run: NNRun, root: Any, seen: set[str]) -> list[tuple[NNRun, int | None]]:
    """``[(ancestor, branch epoch), ..., (run, None)]``: each ancestor contributes records up to the
    epoch its child resumed from (``None``: unknown, all of them, with a warning)."""
    parent = (run.config.get("train") or {}).get("parent_run_id")
    if not parent or parent == run.id or parent in seen:
        return [(run, None)]
    seen.add(run.id)
    try:
        source = NNRun.load(parent, root)
    except RunNotFoundError:
        warnings.warn(f"run {run.id} was resumed from run {parent}, which is gone (no longer saved); its records are left out",
                      RuntimeWarning, stacklevel=3)
        return [(run, None)]
    status = run.resume_status or {}
    branch = status.get("source_epoch") if status.get("source_run_id") == parent else None
    if branch is None:
        first = next(run.committed_records(), None)
        if first is not None:
            branch = first.epoch_idx - 1  # epochs continue across a resume
        else:
            warnings.warn(
                f"run {run.id}: the epoch it resumed from in run {parent} is unknown; all of the parent's "
                "committed records are included",
                RuntimeWarning,
                stacklevel=3,
            )
    return [*_lineage(source, root, seen)[:-1], (source, branch), (run, None)]


def iter_history(
    run_id: str, root: str | os.PathLike[str] | None = None, *, lineage: bool = False
) -> Iterator[IterationDataPoint]:
    """Every committed record of a run, oldest first, in either history format, streamed.

    With ``lineage=True`` a run resumed from another (``resume_from_run_id``) is preceded by its
    ancestors' committed records up to the epoch it resumed from. A resumed-in-place run
    (``resume="auto"``) is one run already. Chunks are verified as they are read
    (``HistoryCorruptionError``).
    """
    run = NNRun.load(run_id, root)
    plan = _lineage(run, runs_root(root), set()) if lineage else [(run, None)]

    def stream() -> Iterator[IterationDataPoint]:
        for member, branch in plan:
            for idp in member.committed_records():
                if branch is not None and idp.epoch_idx > branch:
                    break
                yield idp

    return stream()


def export_history_csv(
    run_id: str, path: str | os.PathLike[str], root: str | os.PathLike[str] | None = None, *, lineage: bool = False
) -> int:
    """Write a run's committed history as CSV in the eager ``idps.csv`` layout; return the count.

    Two streaming passes (columns, then rows), so memory stays bounded; the file is replaced
    atomically and durably (``FileStorage.write_stream``: temporary, fsync, rename, folder fsync).
    """
    columns: list[str] = []
    known: set[str] = set()
    for idp in iter_history(run_id, root, lineage=lineage):
        for key in flatten(idp.state()):
            if key not in known:
                known.add(key)
                columns.append(key)
    target = os.path.abspath(os.fspath(path))
    count = 0

    def produce(sink: Any) -> None:
        nonlocal count
        text = io.TextIOWrapper(_Sink(sink), encoding="utf-8", newline="", write_through=True)
        writer = csv.writer(text, lineterminator="\n")  # as EagerHistory.render writes idps.csv
        writer.writerow(columns)
        for idp in iter_history(run_id, root, lineage=lineage):
            flat = flatten(idp.state())
            writer.writerow([_csv_cell(flat.get(c)) for c in columns])
            count += 1
        text.flush()
        text.detach()

    FileStorage(os.path.dirname(target)).write_stream(os.path.basename(target), produce)
    return count


class _Sink(io.RawIOBase):
    """A storage writer as a raw binary stream (for ``io.TextIOWrapper``)."""

    def __init__(self, sink: Any) -> None:
        self._sink = sink

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        return self._sink.write(bytes(data))


def _csv_cell(value: Any) -> Any:
    """Booleans as ``true``/``false`` (idps.csv's spelling); None → empty; the rest as csv writes it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return value


def migrate_history(
    run_id: str,
    root: str | os.PathLike[str] | None = None,
    *,
    spec: HistoryJournal | None = None,
    discard_uncommitted: bool = False,
) -> int:
    """Convert an eager run's ``idps.csv`` into a journal; return the number of records moved.

    Takes the run's lease (``RunLeaseError`` while it trains). Only committed rows move: rows
    newer than LAST (an interrupted commit) are refused unless ``discard_uncommitted=True``. The
    manifest is published before ``idps.csv`` is deleted, so an interruption leaves either the
    eager run or the journal (rerunning finishes the job). Continue a migrated run with
    ``history=HistoryJournal(...)``. A run whose LAST is mid-epoch is refused: a journal cannot
    go on with an epoch committed in part (finish the epoch with ``resume="auto"`` first).
    """
    run_id = validate_run_id(run_id)
    if spec is not None and not isinstance(spec, HistoryJournal):
        raise ParamsError("spec", f"must be nnx.HistoryJournal(...) or None, got {type(spec).__name__}")
    base = runs_root(root)
    storage = FileStorage(base)
    files = RunFiles(storage, run_id)
    if not files.exists():
        raise run_not_found(run_id, base)
    with storage.lease(run_id):
        last = files.read_tag(LAST)
        if has_journal(storage, run_id):  # already migrated (maybe interrupted before the delete)
            count = len(committed_journal(storage, run_id, last) or ())
            storage.delete(files.history)
            return count
        committed = read_history(files, last)
        if (tail := history_tail(files, last)) and not discard_uncommitted:
            raise ParamsError(
                "discard_uncommitted",
                f"run {run_id}'s idps.csv holds {tail} byte(s) newer than LAST (an "
                "interrupted commit); pass discard_uncommitted=True to leave them out",
            )
        writer = JournalWriter(storage, run_id, spec or HistoryJournal(), last_epoch=None)
        writer.extend(committed, closes=not history_cut(last)[1])  # a mid-epoch LAST's epoch goes on
        writer.commit()
        writer.ensure_published()
        storage.delete(files.history)
        return len(committed)


# -- what `nnx runs show / verify` read -----------------------------------------------------------


def epoch_summaries(storage: Any, run_id: str, last: Any, root: str | None = None) -> list[dict[str, Any]] | None:
    """A journal run's per-epoch rows of the complete epochs up to LAST (a mid-epoch LAST's epoch
    is not one; None for an eager run); ``root``: the run's folder when it is not the one its id
    names (``RunFiles.root``)."""
    reader = committed_journal(storage, run_id, last, root)
    return None if reader is None else reader.epoch_rows()


def check_journal(
    storage: Any, run_id: str, last: Any, problems: list[str], notes: list[str], root: str | None = None
) -> None:
    """``nnx runs verify`` for a journal: every chunk re-hashed, the chain, and epochs 0..LAST."""
    reader = JournalReader.open(storage, run_id, None if last is None else last.epoch, root)
    if reader is None:
        return
    try:
        entries = reader.all_entries()
        for entry in entries:
            read_chunk(storage, reader.files, entry)
        rows = reader.epoch_lines()
    except HistoryCorruptionError as exc:
        problems.append(str(exc))
        return
    files = reader.files
    for path, size in ((files.index, reader.manifest.index_bytes), (files.epochs, reader.manifest.epochs_bytes)):
        extra = len(storage.read(path)) - size if storage.exists(path) else 0
        if extra > 0:
            notes.append(f"{extra} byte(s) appended to {path.split('/')[-1]} but never published (ignored by readers)")
    if last is None:
        if entries:
            notes.append(f"{sum(e.records for e in entries)} journal record(s) without a committed LAST (ignored)")
        return
    whole = last.epoch - (position_of(last) is not None)  # the newest epoch LAST commits whole
    epochs = sorted({e.last_epoch for e in entries if e.last_epoch <= whole})
    tail = sum(e.records for e in entries if e.last_epoch > last.epoch) + _past_position(entries, last)
    problems.extend(committed_coverage(_record_epochs(entries, last), last, "the history journal"))
    if sorted(r["epoch"] for r, _ in rows if r["epoch"] <= whole) != epochs:
        problems.append("history/epochs.jsonl does not have one row per committed epoch")
    if tail:
        notes.append(f"{tail} journal record(s) newer than LAST (an interrupted commit; readers ignore them)")


def _record_epochs(entries: list[Any], last: TagManifest) -> list[int]:
    """The epochs of the journal's records up to LAST, for ``committed_coverage``: one per chunk
    (a chunk holds one epoch's records), one per record of a mid-epoch LAST's epoch."""
    partial = last.epoch if position_of(last) is not None else None
    return [e.last_epoch for e in entries if e.last_epoch <= last.epoch for _ in range(e.records if e.last_epoch == partial else 1)]


def _past_position(entries: list[Any], last: TagManifest) -> int:
    """How many records of a mid-epoch LAST's epoch the journal holds past its position (0 for an
    epoch-end LAST)."""
    position = position_of(last)
    if position is None:
        return 0
    return max(0, sum(e.records for e in entries if e.last_epoch == last.epoch) - position.records)


__all__ = ["HistoryJournal", "export_history_csv", "iter_history", "migrate_history"]
