"""Replacing a whole run (``overwrite_existing=True``) without ever losing the committed one.

A run that has committed an epoch is never removed before its replacement has committed one.
Under the run lease, the replacement's first write moves the old run's folder aside — one
durable rename within the runs root, ``<id>`` → ``.replaced-<id>`` — and the new attempt writes
a fresh ``<id>``. Then::

    the new attempt commits its first epoch (LAST durable)  → the folder aside is removed
    the new attempt fails before that                       → ``<id>`` is removed and the folder
                                                              aside renamed back, with a note
    the writer is killed before that                        → the next writer (``train()`` on
                                                              that run id, or ``nnx runs verify
                                                              --repair``) does the same, first

So at every instant the run is exactly one of two things, and readers see that one:

* **the old run, intact** — while ``.replaced-<id>`` exists and ``<id>`` holds no LAST, readers
  read the folder aside (``reading_folder``): every file of it, byte for byte;
* **the new run, with at least one committed epoch** — once ``<id>`` holds a LAST; a folder aside
  still left is garbage that the next writer removes.

Each outcome is written down in ``replacement.json`` of the run that stays (``describe`` says it
in one line for ``nnx runs list`` / ``verify``): the replacement's record, written with its first
files ("replaced by attempt …" once it has committed), or the rollback's note ("replacement
failed; previous run kept"), written into the folder aside before it is renamed back.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from nnx_core.commit import LAST, RunFiles, write_json
from nnx_core.errors import CorruptRunError
from nnx_core.identity import validate_run_id
from nnx_core.ports import Storage

ASIDE_PREFIX = ".replaced-"
"""The folder a run is moved aside to, in the runs root, while its replacement has not committed."""

NOTE = "replacement.json"
"""The record of the last replacement, in the folder of the run that stays."""

KEPT, RETIRED = "previous run kept", "previous run removed"


def aside(run_id: str) -> str:
    """The store path of ``run_id``'s folder while a replacement of it has not committed."""
    return ASIDE_PREFIX + validate_run_id(run_id)


def run_id_of(name: str) -> str | None:
    """The run id a runs-root entry named ``name`` is the folder aside of; None for other names."""
    return name[len(ASIDE_PREFIX):] if name.startswith(ASIDE_PREFIX) and len(name) > len(ASIDE_PREFIX) else None


def _committed(storage: Storage, folder: str) -> bool:
    return bool(storage.exists(f"{folder}/checkpoints/{LAST}.json"))


def reading_folder(storage: Storage, run_id: str) -> str:
    """Where readers find ``run_id``'s committed state: the folder aside while a replacement of the
    run has not committed its first epoch, else the run's own folder."""
    moved = aside(run_id)
    if storage.exists(f"{moved}/run.yaml") and not _committed(storage, run_id):
        return moved
    return run_id


def begin(files: RunFiles, attempt_id: str, started_at: str) -> None:
    """The replacement's first write (under the lease, every check passed): move the committed run
    aside, then record the replacement in the new folder. Call ``settle`` first."""
    storage, moved = files.storage, aside(files.run_id)
    previous = _read_json(storage, files.attempt) or {}
    last = files.read_tag(LAST)
    storage.rename_folder(files.run_id, moved)
    write_json(storage, files.root + "/" + NOTE, {
        "status": "replacing", "attempt_id": attempt_id, "started_at": started_at,
        "previous": {"attempt_id": previous.get("attempt_id"), "last_epoch": None if last is None else last.epoch},
    })


def retire(files: RunFiles) -> None:
    """The replacement committed (its LAST is durable): remove the old run kept aside."""
    files.storage.remove_tree(aside(files.run_id))


def settle(files: RunFiles, *, at: str, error: BaseException | None = None) -> str | None:
    """Finish or roll back a replacement left unsettled (under the lease): a committed ``<id>``
    retires the folder aside; an uncommitted one is removed and the old run renamed back, with a
    note naming the failed attempt (``error``: its error; else it was interrupted). Returns
    ``RETIRED``, ``KEPT`` or None (nothing was pending)."""
    storage, moved = files.storage, aside(files.run_id)
    if not storage.list(moved):
        storage.remove_tree(moved)  # an empty leftover of an interrupted removal (or nothing)
        return None
    if _committed(storage, files.run_id):
        retire(files)
        return RETIRED
    if not storage.exists(f"{moved}/run.yaml"):
        raise CorruptRunError(
            f"run {files.run_id}: neither {files.run_id}/ (no committed LAST) nor {moved}/ (no run.yaml) is a whole "
            "run; nothing was changed. Inspect both folders before removing either"
        )
    failed = _read_json(storage, f"{files.root}/{NOTE}") or _read_json(storage, files.attempt) or {}
    reason = f"{type(error).__name__}: {str(error)[:500]}" if error is not None else "interrupted (killed) before its first commit"
    write_json(storage, f"{moved}/{NOTE}", {
        "status": "failed", "attempt_id": failed.get("attempt_id"), "at": at, "error": reason,
    })
    storage.remove_tree(files.run_id)
    storage.rename_folder(moved, files.run_id)
    return KEPT


def describe(storage: Storage, run_id: str, *, detail: bool = False) -> str | None:
    """The one line ``nnx runs list`` (and, with ``detail``, ``show`` / ``verify``) shows about the
    run's last replacement; None when it has none."""
    moved = aside(run_id)
    pending, committed = storage.exists(f"{moved}/run.yaml"), _committed(storage, run_id)
    if pending and not committed:
        return "being replaced; previous run kept until the replacement commits" + (
            " (if that attempt is gone, `nnx runs verify ID --repair` or the next train() of the run restores it)"
            if detail else "")
    note = _read_json(storage, f"{run_id}/{NOTE}")
    if note is None:
        return None
    attempt = str(note.get("attempt_id") or "?")[:8]
    if note.get("status") == "failed":
        return f"replacement failed; previous run kept (attempt {attempt}" + (f": {note.get('error')})" if detail else ")")
    if not committed:
        return None
    line = f"replaced by attempt {attempt}"
    if not detail:
        return line
    epoch = (note.get("previous") or {}).get("last_epoch")
    line += f" (the previous run had committed epoch {epoch})" if epoch is not None else ""
    return line + ("; the previous run's folder is left over: the next writer removes it" if pending else "")


def _read_json(storage: Storage, path: str) -> Mapping[str, Any] | None:
    try:
        doc = json.loads(storage.read(path))
    except (FileNotFoundError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None
