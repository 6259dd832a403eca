"""Replacing a whole run (``nnx_core.replacement``) over ``MemoryStorage``: no torch, no disk.

Oracle: the old run's own bytes (a snapshot taken before the replacement began) and the two
states the module promises — the old run intact, or a new run holding a LAST. The power-cut
proof of the whole sequence is ``CommitContract``'s ``replace`` rule
(``tests/property/test_commit_machine.py``); these pin each branch of ``settle`` and what
readers and ``describe`` say.
"""

from __future__ import annotations

import pytest

from nnx_core import replacement
from nnx_core.commit import LAST, RunFiles, TagManifest
from nnx_core.errors import CorruptRunError
from nnx_adapters.storage.memory import MemoryStorage

RUN = "cd" * 16
AT = "2026-01-01T00:00:00+00:00"


def committed(files: RunFiles, epoch: int, state: bytes) -> None:
    files.storage.write(files.run_yaml, b"id: x\n")
    files.write_tag(TagManifest(tag=LAST, run_id=RUN, epoch=epoch, blobs={"state": files.put_blob(state)}))


def old_run() -> tuple[RunFiles, dict[str, bytes]]:
    files = RunFiles(MemoryStorage(), RUN)
    committed(files, 3, b"old weights")
    files.storage.write(files.attempt, b'{"attempt_id": "0ld0ld0ld", "status": "completed"}')
    return files, files.storage.snapshot()


def under(snapshot: dict[str, bytes], folder: str) -> dict[str, bytes]:
    return {p.split("/", 1)[1]: b for p, b in snapshot.items() if p.startswith(folder + "/")}


def test_begin_moves_the_old_run_aside_and_readers_read_it_there():
    files, before = old_run()
    replacement.begin(files, "new" * 8, AT)
    after = files.storage.snapshot()
    assert under(after, replacement.aside(RUN)) == under(before, RUN)  # every file, byte for byte
    assert replacement.reading_folder(files.storage, RUN) == replacement.aside(RUN)
    assert "being replaced" in replacement.describe(files.storage, RUN)
    committed(files, 0, b"new weights")  # the replacement's first commit
    assert replacement.reading_folder(files.storage, RUN) == RUN


def test_settle_rolls_back_an_uncommitted_replacement_with_a_note():
    files, before = old_run()
    replacement.begin(files, "new" * 8, AT)
    files.storage.write(files.run_yaml, b"id: y\n")  # the new attempt's first files, no LAST
    assert replacement.settle(files, at=AT, error=ValueError("a NaN row")) == replacement.KEPT
    after = files.storage.snapshot()
    note = after.pop(f"{RUN}/{replacement.NOTE}")
    assert after == before and b"ValueError: a NaN row" in note
    line = replacement.describe(files.storage, RUN, detail=True)
    assert line.startswith("replacement failed; previous run kept (attempt newnewne") and "a NaN row" in line


def test_settle_retires_the_old_run_once_the_replacement_committed():
    files, _ = old_run()
    replacement.begin(files, "new" * 8, AT)
    committed(files, 0, b"new weights")
    assert replacement.settle(files, at=AT) == replacement.RETIRED
    assert files.storage.list(replacement.aside(RUN)) == []
    assert replacement.describe(files.storage, RUN) == "replaced by attempt newnewne"
    assert "committed epoch 3" in replacement.describe(files.storage, RUN, detail=True)
    assert replacement.settle(files, at=AT) is None  # nothing left to settle


def test_settle_refuses_two_halves_and_changes_nothing():
    files, _ = old_run()
    replacement.begin(files, "new" * 8, AT)
    files.storage.delete(f"{replacement.aside(RUN)}/run.yaml")  # damaged by hand
    before = files.storage.snapshot()
    with pytest.raises(CorruptRunError, match="neither"):
        replacement.settle(files, at=AT)
    assert files.storage.snapshot() == before


def test_an_empty_leftover_aside_is_removed_and_nothing_else_changes():
    files, before = old_run()
    files.storage.write(f"{replacement.aside(RUN)}/x", b"")
    files.storage.delete(f"{replacement.aside(RUN)}/x")  # an empty folder, as an interrupted removal leaves it
    assert replacement.settle(files, at=AT) is None
    assert files.storage.list("") == [RUN] and files.storage.snapshot() == before
    replacement.begin(files, "new" * 8, AT)  # and the name is free again


def test_run_id_of_names_only_folders_aside():
    assert replacement.run_id_of(replacement.aside(RUN)) == RUN
    assert replacement.run_id_of(RUN) is None and replacement.run_id_of(".leases") is None
    assert replacement.run_id_of(replacement.ASIDE_PREFIX) is None
