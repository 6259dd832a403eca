"""``run.idps`` as ``NNRun`` holds it, and the one check of an eager history that only a reader of
the whole run can make.

``Records`` is a tuple (a run's records are read-only: ``run.with_idps(...)`` is a copy) that
also equals a list of the same records, as NNx's ``run.idps`` (a list) does: ``run.idps == []``
holds for a run without records. ``refuse_truncated_history``: an eager run's ``idps.csv`` of zero
bytes under a committed LAST was cut outside any writer (every write of it starts with its
header), so ``NNRun.load`` refuses it rather than show a run without records; a missing file
only warns (deleted on purpose; the checkpoints are intact).
"""

from __future__ import annotations

from typing import Any

from nnx_core.commit import RunFiles, TagManifest
from nnx_core.errors import CorruptRunError, ParamsError
from nnx_core.records import IterationDataPoint


class Records(tuple):
    """A run's records, read-only; equal to a tuple or a list of the same records."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        return tuple.__eq__(self, tuple(other)) if isinstance(other, list) else tuple.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    __hash__ = tuple.__hash__


def as_records(idps: Any) -> Records:
    """``idps`` (an iterable of records; None, NNx's default, is none) as ``Records``."""
    return Records(() if idps is None else idps)


def checked_records(idps: Any, call: str) -> Records:
    """``as_records``, each one an ``IterationDataPoint`` (``ParamsError`` naming ``call`` otherwise)."""
    records = as_records(idps)
    for record in records:
        if not isinstance(record, IterationDataPoint):
            raise ParamsError(call, f"takes IterationDataPoints, got {type(record).__name__}")
    return records


def refuse_truncated_history(files: RunFiles, last: TagManifest | None, history: Any) -> None:
    """``CorruptRunError`` when an eager run's committed ``history`` is empty because its
    ``idps.csv`` is a file of zero bytes though LAST committed an epoch (module docstring)."""
    if last is None or history or not files.storage.exists(files.history) or files.storage.read(files.history):
        return
    raise CorruptRunError(
        f"run {files.run_id}: its history (idps.csv) is empty, though LAST committed epoch {last.epoch}: the file was "
        "truncated. Put idps.csv back from a backup; deleting it loads the run without its records (the checkpoints "
        f"are intact). `nnx runs verify {files.run_id[:8]}` checks the run"
    )


__all__ = ["Records", "as_records", "checked_records", "refuse_truncated_history"]
