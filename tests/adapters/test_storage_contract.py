"""The kit's ``StorageContract`` on every built-in store side by side, and what it catches.

One machine drives ``MemoryStorage``, ``FileStorage`` and ``FsspecStorage`` on fsspec's local and
memory filesystems with the same calls and demands each agrees with ``ReferenceStore`` (and so
with the others), and that ``MemoryStorage`` counts exactly the operations ``FileStorage`` makes.
Then deliberately broken adapters fail the kit with a counterexample naming what went wrong.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile

import fsspec
import pytest
from hypothesis import Phase, settings
from hypothesis.stateful import invariant, run_state_machine_as_test

from nnx_core.ports import Receipt
from nnx_adapters.storage.fs import FileStorage
from nnx_adapters.storage.fsspec import FsspecStorage
from nnx_adapters.storage.memory import MemoryStorage
from nnx_adapters.storage.paths import check_run_id, split_path
from nnx_adapters.testing import CommitContract, StorageContract, contract_settings

DEEP = os.environ.get("NNX_DEEP") == "1"
SIDE_BY_SIDE = contract_settings(examples=30, steps=30, deep_examples=500, deep_steps=50)


def fresh_memory_fs():
    return fsspec.filesystem("memory", global_store=False, skip_instance_cache=True)


class AllStores(StorageContract):
    """The four built-in stores, side by side."""

    def make_storages(self):
        self.workdir = tempfile.mkdtemp()
        self.memory_fs = fresh_memory_fs()
        return [
            MemoryStorage(),
            FileStorage(os.path.join(self.workdir, "file")),
            FsspecStorage("file", os.path.join(self.workdir, "fsspec")),
            FsspecStorage(self.memory_fs, "/runs"),
        ]

    def another_handle(self, store):
        if isinstance(store, FileStorage):
            return FileStorage(store.root)
        if isinstance(store, FsspecStorage):  # the local one shares its lease with FileStorage
            return FileStorage(store.root) if store.guarantees.local else FsspecStorage(store.fs, store.root)
        return None  # a MemoryStorage is its own machine

    def dispose_storage(self, store):
        shutil.rmtree(self.workdir, ignore_errors=True)

    @invariant()
    def the_memory_model_counts_what_the_file_system_does(self):
        assert self.stores[0].ops == self.stores[1].ops


@pytest.mark.timeout(1800 if DEEP else 300)
def test_every_built_in_store_keeps_the_contract_side_by_side():
    run_state_machine_as_test(AllStores, settings=SIDE_BY_SIDE)


# -- deliberately broken adapters fail the kit ---------------------------------------------------

# The kit's failure message names the broken rule whether or not hypothesis shrinks the steps that
# led there, and shrinking a stateful counterexample is most of such a run's time (seconds to a
# minute), so these runs stop at the first failure.
QUICK = settings(SIDE_BY_SIDE, max_examples=200, database=None, print_blob=False,
                 phases=(Phase.explicit, Phase.generate))


class ShowsTemporaries(MemoryStorage):
    """Lists its owned temporaries to readers."""

    def list(self, folder):
        ino = self._lookup(split_path(folder, root_ok=True))
        return [] if ino is None else sorted(self._dir(ino, folder))


class SharedLease(MemoryStorage):
    """Grants every lease, held or not."""

    def lease(self, run_id):
        check_run_id(run_id)
        return contextlib.nullcontext()


class WritesInPlace(MemoryStorage):
    """``write`` opens the destination itself and writes into it: no temporary, no rename."""

    def write(self, path, data, *, sha256=None):
        parts = split_path(path)
        payload = bytes(data)
        self._check_alive()
        parent = self._make_parents(parts[:-1])
        ino = self._dir(parent).get(parts[-1])
        if ino is None:
            ino = self._create(parent, parts[-1], path)
            self._op("fsync_dir", "/".join(parts[:-1]), lambda: self._fsync(parent))
        target = ino
        self._op("write", path, lambda: self._set_bytes(target, payload))
        self._op("fsync", path, lambda: self._fsync(target))
        return Receipt(path, len(payload), sha256 or hashlib.sha256(payload).hexdigest())


def kit_failure(machine, kit_settings=QUICK) -> str:
    with pytest.raises(AssertionError) as failed:
        run_state_machine_as_test(machine, settings=kit_settings)
    return str(failed.value)


def test_an_adapter_showing_its_temporaries_fails_the_kit():
    class Contract(StorageContract):
        def make_storage(self):
            return ShowsTemporaries()

    message = kit_failure(Contract)
    assert "write_blob" in message and "half-way" in message and ".tmp-blob-" in message, message


def test_an_adapter_without_an_exclusive_lease_fails_the_kit():
    class Contract(StorageContract):
        def make_storage(self):
            return SharedLease()

    message = kit_failure(Contract)
    assert ".lease(" in message and "granted" in message and "RunLeaseError" in message, message


def test_an_adapter_whose_write_is_not_atomic_fails_the_crash_kit():
    class Contract(CommitContract):
        def make_storage(self):
            return WritesInPlace()

    message = kit_failure(Contract, settings(contract_settings(steps=3), max_examples=50))  # NNX_MAX_EXAMPLES aside
    assert "power cut after op" in message and "readers cannot load a committed state" in message, message


def test_contract_settings_follow_the_environment(monkeypatch):
    monkeypatch.delenv("NNX_DEEP", raising=False)
    monkeypatch.delenv("NNX_MAX_EXAMPLES", raising=False)
    assert contract_settings(examples=25).max_examples == 25
    monkeypatch.setenv("NNX_DEEP", "1")
    assert contract_settings(examples=25, deep_examples=300).max_examples == 300
    monkeypatch.setenv("NNX_MAX_EXAMPLES", "5")  # a cap, never a raise
    assert contract_settings(examples=25, deep_examples=300).max_examples == 5
    assert contract_settings(examples=3, deep_examples=4).max_examples == 4
