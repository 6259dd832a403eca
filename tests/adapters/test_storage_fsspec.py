"""FsspecStorage: which backends it accepts, and the guarantees that depend on the backend.

The contract itself (agreement, blobs, leases, commit protocol) is the kit's, run on both
backends in ``test_storage_contract.py`` and ``tests/property``; here: the refusal, the shared
local lease, and faults inside a call on the local backend.
"""

from __future__ import annotations

import errno
import os

import fsspec
import pytest

from nnx_core.errors import NNxError, RunLeaseError
from nnx_adapters.storage.fs import FileStorage
from nnx_adapters.storage.fsspec import GUARANTEES_NEEDED, FsspecStorage, StorageGuaranteeError


def test_an_unknown_backend_is_refused_naming_the_missing_guarantees(tmp_path):
    wrapped = fsspec.filesystem("dir", path=str(tmp_path), fs=fsspec.filesystem("file"))
    with pytest.raises(StorageGuaranteeError) as refused:
        FsspecStorage(wrapped, "runs")
    assert isinstance(refused.value, NNxError) and refused.value.missing == GUARANTEES_NEEDED
    message = str(refused.value)
    assert "DirFileSystem" in message and "atomic replace" in message and "durability" in message
    assert "run lease" in message and "docs/adapters.md" in message
    assert list(tmp_path.iterdir()) == []  # nothing written before the refusal


def test_backends_say_whether_they_are_durable(tmp_path):
    assert FsspecStorage("file", str(tmp_path)).durable
    assert not FsspecStorage("memory", "/volatile").durable


def test_the_local_backend_shares_its_lease_with_file_storage(tmp_path):
    with FsspecStorage("file", str(tmp_path)).lease("r1"):
        with pytest.raises(RunLeaseError):
            with FileStorage(tmp_path).lease("r1"):
                pass
    with FileStorage(tmp_path).lease("r1"), pytest.raises(RunLeaseError):
        with FsspecStorage("file", str(tmp_path)).lease("r1"):
            pass


def test_memory_backends_share_leases_through_their_store():
    fs = fsspec.filesystem("memory", global_store=False, skip_instance_cache=True)
    with FsspecStorage(fs, "/runs").lease("r1"):
        with pytest.raises(RunLeaseError):
            with FsspecStorage(fs, "/runs").lease("r1"):
                pass
        with FsspecStorage(fs, "/other").lease("r1"):  # another root is another store
            pass


@pytest.mark.parametrize("failing", ["fsync", "mv"])
def test_a_failure_inside_write_keeps_the_old_bytes_and_no_temporary(tmp_path, monkeypatch, failing):
    store = FsspecStorage("file", str(tmp_path))
    store.write("d/f", b"old")
    error = OSError(errno.EIO, "injected EIO")

    def fail(*args, **kwargs):
        raise error

    if failing == "fsync":
        monkeypatch.setattr(os, "fsync", fail)
    else:
        monkeypatch.setattr(store.fs, "mv", fail)
    with pytest.raises(OSError) as raised:
        store.write("d/f", b"new")
    monkeypatch.undo()
    assert raised.value is error
    assert store.read("d/f") == b"old" and store.temporaries("") == []
