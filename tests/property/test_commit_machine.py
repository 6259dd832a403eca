"""The epoch commit protocol under every crash and every fault: the kit's ``CommitContract``.

``nnx_adapters.testing.CommitContract`` (read its docstring for what is checked) driven against
each built-in store:

* ``MemoryStorage`` — it offers crash injection, so the kit cuts the power after every primitive
  operation (with and without the metadata journal flushed) and fails every operation with
  ENOSPC/EIO;
* ``FileStorage`` — ENOSPC at every ``os.write``, EIO at every ``os.fsync`` and a process kill at
  every ``os`` call (``kit_stores.File``);
* ``FsspecStorage`` on fsspec's local and memory filesystems — port-level kills and faults.

``NNX_DEEP=1`` runs 300 examples instead of 25 (15 for FileStorage, 10 for the fsspec stores).
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

import pytest
from hypothesis.stateful import run_state_machine_as_test

from nnx_adapters.storage.fs import FileStorage
from nnx_adapters.storage.memory import MemoryStorage
from nnx_adapters.testing import EXERCISED, CommitContract, contract_settings
from nnx_adapters.testing.commit import Plan

from kit_stores import File, FsspecLocal, FsspecMemory, Memory, no_fsync

DEEP = os.environ.get("NNX_DEEP") == "1"


class MemoryCommits(Memory, CommitContract):
    pass


class FileCommits(File, CommitContract):
    pass


class FsspecLocalCommits(FsspecLocal, CommitContract):
    pass


class FsspecMemoryCommits(FsspecMemory, CommitContract):
    pass


@pytest.mark.timeout(1800 if DEEP else 300)
def test_commit_protocol_survives_every_crash_and_fault_in_memory():
    run_state_machine_as_test(MemoryCommits, settings=contract_settings())
    assert EXERCISED["MemoryStorage: power cuts"] > 0 and EXERCISED["MemoryStorage: power cuts (metadata flushed)"] > 0
    assert EXERCISED["MemoryStorage: ENOSPC/EIO in calls"] > 0
    assert EXERCISED["MemoryStorage: replacements replayed"] > 0  # overwrite_existing=True, failed everywhere


@pytest.mark.timeout(3600 if DEEP else 300)
def test_commit_protocol_survives_every_fault_and_kill_on_the_file_system(tmp_path, monkeypatch):
    FileCommits.base_dir = str(tmp_path)
    no_fsync(monkeypatch)
    run_state_machine_as_test(FileCommits, settings=contract_settings(examples=15))
    assert EXERCISED["FileStorage: process kills"] > 0 and EXERCISED["FileStorage: EIO at os.fsync"] > 0
    assert EXERCISED["FileStorage: ENOSPC at os.write"] > 0


@pytest.mark.timeout(1800 if DEEP else 300)
@pytest.mark.parametrize("machine", [FsspecLocalCommits, FsspecMemoryCommits], ids=["local", "memory"])
def test_commit_protocol_on_fsspec_survives_every_port_kill_and_fault(machine, tmp_path, monkeypatch):
    FsspecLocalCommits.base_dir = str(tmp_path)
    no_fsync(monkeypatch)
    run_state_machine_as_test(machine, settings=contract_settings(examples=10))
    assert EXERCISED["FsspecStorage: port kills"] > 0 and EXERCISED["FsspecStorage: port ENOSPC/EIO"] > 0



@pytest.mark.parametrize("store", ["memory", "file"])
def test_a_blob_is_hashed_once_per_commit(store, tmp_path, monkeypatch):
    """put_blob hashes the payload for its address; the store reuses that digest for its receipt."""
    storage = MemoryStorage() if store == "memory" else FileStorage(tmp_path / "store")
    payload = b"P" * 4096
    real = hashlib.sha256
    sizes: list[int] = []

    def counting(data: bytes = b"", *args: Any, **kwargs: Any) -> Any:
        sizes.append(len(memoryview(data).cast("B")))
        return real(data, *args, **kwargs)

    monkeypatch.setattr(hashlib, "sha256", counting)
    Plan(epoch=0, payload=payload, streamed=False, snapshot=None, tags=(), old_records=(), rows=()).run(storage, None)
    assert sizes.count(len(payload)) == 1
