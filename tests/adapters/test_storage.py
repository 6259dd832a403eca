"""Tests of the two Storage adapters: FileStorage (real disk) and MemoryStorage (crash model).

Their agreement with the contract (and each other) is the kit's side-by-side machine in
``test_storage_contract.py``; here are targeted cases and the crash model's own rules.
"""

from __future__ import annotations

import errno
import hashlib
import os
import subprocess
import sys
from collections import Counter

import portalocker
import pytest

from nnx_core.errors import InvalidRunIdError, RunLeaseError
from nnx_core.ports import Receipt, Storage
from nnx_adapters.storage.fs import FileStorage
from nnx_adapters.storage.memory import MemoryStorage, SimulatedCrash
from nnx_adapters.testing.model import visible_tree as tree


@pytest.fixture(params=["file", "memory"])
def store(request: pytest.FixtureRequest, tmp_path) -> Storage:
    return FileStorage(tmp_path / "store") if request.param == "file" else MemoryStorage()


def temporaries_on_disk(root) -> list[str]:
    return [n for _, _, names in os.walk(root) for n in names if n.startswith(".tmp-")]


# -- shared behaviour -----------------------------------------------------------------------


def test_both_adapters_satisfy_the_port(store):
    assert isinstance(store, Storage)


def test_write_read_receipt_and_overwrite(store):
    receipt = store.write("runs/r1/weights.bin", b"abc")
    assert receipt == Receipt("runs/r1/weights.bin", 3, hashlib.sha256(b"abc").hexdigest())
    assert store.read("runs/r1/weights.bin") == b"abc"
    assert store.write("runs/r1/weights.bin", bytearray(b"xy")).size == 2
    assert store.read("runs/r1/weights.bin") == b"xy"
    assert store.write("empty", b"") == Receipt("empty", 0, hashlib.sha256(b"").hexdigest())
    assert store.read("empty") == b""


def test_exists_list_delete(store):
    store.write("a/b/c.txt", b"1")
    store.write("a/d.txt", b"2")
    assert store.exists("a/d.txt") and store.exists("a/b/c.txt")
    assert not store.exists("a/b")  # folders are not files
    assert not store.exists("a/nope")
    assert not store.exists("a/d.txt/x")
    assert store.list("") == ["a"]
    assert store.list("a") == ["b", "d.txt"]
    assert store.list("missing") == []
    store.delete("a/d.txt")
    store.delete("a/d.txt")  # missing is fine
    store.delete("nowhere/x")
    assert not store.exists("a/d.txt")
    assert store.list("a") == ["b"]
    with pytest.raises(FileNotFoundError):
        store.read("a/d.txt")
    with pytest.raises(IsADirectoryError):
        store.read("a/b")
    with pytest.raises(NotADirectoryError):
        store.list("a/b/c.txt")


def test_append_creates_then_appends(store):
    store.append("logs/events.jsonl", b"one\n")
    store.append("logs/events.jsonl", memoryview(b"two\n"))
    assert store.read("logs/events.jsonl") == b"one\ntwo\n"
    with pytest.raises(IsADirectoryError):
        store.append("logs", b"x")


def test_remove_tree(store):
    store.write("runs/r1/a", b"1")
    store.write("runs/r1/sub/b", b"2")
    store.write("runs/r2/c", b"3")
    store.remove_tree("runs/r1")
    assert store.list("runs") == ["r2"]
    assert tree(store) == ({"runs/r2/c": b"3"}, {"runs", "runs/r2"})
    store.remove_tree("runs/r1")  # missing is fine
    with pytest.raises(NotADirectoryError):
        store.remove_tree("runs/r2/c")
    with pytest.raises(ValueError):
        store.remove_tree("")


def _run_tree(store):
    store.write("runs/r1/a", b"1")
    store.write("runs/r1/sub/b", b"\x00two")
    store.write("runs/r1/empty/.keep", b"")
    store.delete("runs/r1/empty/.keep")  # an empty folder moves too
    store.write("runs/r2/c", b"3")


def test_rename_folder_moves_every_file_with_its_bytes(store):
    _run_tree(store)
    store.rename_folder("runs/r1", "runs/r1-old")
    assert tree(store) == (
        {"runs/r1-old/a": b"1", "runs/r1-old/sub/b": b"\x00two", "runs/r2/c": b"3"},
        {"runs", "runs/r1-old", "runs/r1-old/sub", "runs/r1-old/empty", "runs/r2"},
    )
    store.write("runs/r1/new", b"n")  # the old name is free again
    assert store.read("runs/r1/new") == b"n" and store.read("runs/r1-old/a") == b"1"
    store.write("top/f", b"t")
    store.rename_folder("top", "moved")  # in the root
    assert store.list("") == ["moved", "runs"] and store.read("moved/f") == b"t"
    assert store.temporaries("") == []


@pytest.mark.parametrize("existing", ["folder", "empty folder", "file"])
def test_rename_folder_onto_an_existing_name_changes_nothing(store, existing):
    _run_tree(store)
    if existing == "file":
        store.write("runs/x", b"x")
    else:
        store.write("runs/x/f" if existing == "folder" else "runs/x/.keep", b"x")
        if existing == "empty folder":
            store.delete("runs/x/.keep")
    before = tree(store)
    with pytest.raises(FileExistsError):
        store.rename_folder("runs/r1", "runs/x")
    with pytest.raises(FileExistsError):
        store.rename_folder("runs/r1", "runs/r1")  # onto itself
    assert tree(store) == before


def test_rename_folder_refuses_a_file_a_missing_folder_and_another_parent(store):
    _run_tree(store)
    before = tree(store)
    with pytest.raises(NotADirectoryError):
        store.rename_folder("runs/r2/c", "runs/r2/d")
    with pytest.raises(NotADirectoryError):  # below a file, as POSIX resolves it
        store.rename_folder("runs/r2/c/x", "runs/r2/c/y")
    with pytest.raises(FileNotFoundError):
        store.rename_folder("runs/r9", "runs/r10")
    with pytest.raises(FileNotFoundError):
        store.rename_folder("nowhere/r1", "nowhere/r2")
    for source, destination in (
        ("runs/r1", "other/r1"),  # a different parent
        ("runs/r1", "r1"),
        ("runs/r9", "elsewhere/r9"),  # ValueError before the missing source is noticed
        ("runs", ""),  # the root
        ("", "x"),
        ("runs/r1", "runs/.tmp-r1"),  # reserved names
        ("runs", ".leases"),
        ("runs/r1", "runs/r1/inner"),
    ):
        with pytest.raises(ValueError):
            store.rename_folder(source, destination)
    assert tree(store) == before


def test_file_storage_rename_folder_is_one_rename_and_one_fsync(tmp_path):
    fs = FileStorage(tmp_path / "store")
    fs.write("runs/r1/a", b"1")
    before = Counter(fs.ops)
    fs.rename_folder("runs/r1", "runs/r0")
    assert Counter(fs.ops) - before == {"rename": 1, "fsync": 1}
    assert os.path.isdir(tmp_path / "store" / "runs" / "r0") and not os.path.exists(tmp_path / "store" / "runs" / "r1")
    before = Counter(fs.ops)
    os.mkdir(tmp_path / "store" / "runs" / "empty")  # os.rename alone would replace it silently
    with pytest.raises(FileExistsError):
        fs.rename_folder("runs/r0", "runs/empty")
    assert fs.ops == before and fs.read("runs/r0/a") == b"1"


def test_memory_rename_folder_matches_file_storage_operations(tmp_path):
    fs, mem = FileStorage(tmp_path), MemoryStorage()
    for s in (fs, mem):
        s.write("runs/r1/a", b"1")
        s.rename_folder("runs/r1", "runs/r2")
    assert fs.ops == mem.ops
    assert [(kind, path) for _, kind, path in mem.log[-2:]] == [("rename", "runs/r2"), ("fsync_dir", "runs")]


@pytest.mark.parametrize("metadata_flushed", [False, True])
def test_a_power_cut_inside_rename_folder_finds_the_folder_under_one_name(metadata_flushed):
    mem = MemoryStorage()
    mem.write("runs/r1/a", b"1")
    mem.write("runs/r1/sub/b", b"2")
    old = {"runs/r1/a": b"1", "runs/r1/sub/b": b"2"}
    new = {"runs/r0/a": b"1", "runs/r0/sub/b": b"2"}
    found = []
    for n in (1, 2):  # a cut after the rename, after the parent's fsync
        trial = mem.reopen()
        trial.crash_after(n, metadata_flushed=metadata_flushed)
        with pytest.raises(SimulatedCrash):
            trial.rename_folder("runs/r1", "runs/r0")
        after = trial.reopen()
        found.append(after.snapshot(include_temporaries=True))
        assert after.list("runs") == sorted({p.split("/")[1] for p in found[-1]})
    assert found == ([old, new] if not metadata_flushed else [new, new])


def test_memory_rename_folder_failing_its_fsync_is_visible_but_not_durable():
    mem = MemoryStorage()
    mem.write("runs/r1/a", b"1")
    error = OSError(errno.EIO, "Input/output error")
    mem.fail_on(2, error)
    with pytest.raises(OSError) as caught:
        mem.rename_folder("runs/r1", "runs/r0")
    assert caught.value is error
    assert mem.snapshot() == {"runs/r0/a": b"1"}
    assert mem.reopen().snapshot() == {"runs/r1/a": b"1"}
    mem.fail_on(1, error)  # the rename itself fails: nothing happens
    with pytest.raises(OSError):
        mem.rename_folder("runs/r0", "runs/r9")
    assert mem.snapshot() == {"runs/r0/a": b"1"}


def test_conflicting_kinds_raise_like_posix(store):
    store.write("f", b"x")
    with pytest.raises(NotADirectoryError):
        store.write("f/g", b"y")
    store.write("d/e", b"z")
    with pytest.raises(IsADirectoryError):
        store.write("d", b"y")
    with pytest.raises(IsADirectoryError):
        store.delete("d")
    assert tree(store) == ({"f": b"x", "d/e": b"z"}, {"d"})


@pytest.mark.parametrize(
    "bad",
    ["/abs", "a/../b", "..", "a//b", "a/", "", "a\x00b", "a\\b", "./a", "a/.tmp-x", ".leases/r.lock",
     "x" * 256],
)
def test_path_validation_refuses_before_touching(store, bad):
    for call in (
        lambda: store.write(bad, b"x"),
        lambda: store.append(bad, b"x"),
        lambda: store.read(bad),
        lambda: store.delete(bad),
        lambda: store.remove_tree(bad),
        lambda: store.rename_folder(bad, "x"),
        lambda: store.rename_folder("x", bad),
    ):
        with pytest.raises(ValueError):
            call()
    assert tree(store) == ({}, set())


def test_exists_is_false_for_temporaries_and_reserved(store):
    assert store.exists("a/.tmp-x-1") is False
    assert store.exists(".leases/r.lock") is False
    with pytest.raises(ValueError):
        store.exists("/etc/passwd")


def test_list_skips_temporaries_and_the_lease_folder(tmp_path):
    fs = FileStorage(tmp_path)
    fs.write("a/f", b"1")
    (tmp_path / "a" / ".tmp-f-123").write_bytes(b"partial")
    with fs.lease("r1"):
        pass
    assert (tmp_path / ".leases").is_dir()
    assert fs.list("") == ["a"]
    assert fs.list("a") == ["f"]
    assert fs.exists("a/f") and not fs.exists("a/.tmp-f-123")


def test_clean_temporaries_on_disk(tmp_path):
    fs = FileStorage(tmp_path)
    fs.write("a/b/f", b"1")
    (tmp_path / "a" / ".tmp-x-123").write_bytes(b"stale")
    (tmp_path / "a" / "b" / ".tmp-f-456").write_bytes(b"")
    assert fs.clean_temporaries("a/b") == 1
    assert fs.clean_temporaries("") == 1
    assert fs.clean_temporaries("") == 0
    assert fs.clean_temporaries("missing") == 0
    assert temporaries_on_disk(tmp_path) == []
    assert fs.read("a/b/f") == b"1"


def test_large_write_round_trips(store):
    data = os.urandom(1 << 20) * 8  # 8 MiB
    receipt = store.write("big.bin", data)
    assert receipt.sha256 == hashlib.sha256(data).hexdigest() and receipt.size == len(data)
    assert store.read("big.bin") == data


def test_ops_counters_match_between_adapters(tmp_path):
    fs, mem = FileStorage(tmp_path), MemoryStorage()
    for s in (fs, mem):
        s.write("x/y/f", b"1")
        s.write("x/y/f", b"2")
        s.append("x/log", b"a")
        s.append("x/log", b"b")
        s.delete("x/y/f")
        s.remove_tree("x")
    # write into new x/y: mkdir x + fsync root, mkdir y + fsync x, then create/write/fsync/rename/fsync dir
    assert fs.ops == mem.ops
    assert fs.ops["mkdir"] == 2 and fs.ops["rename"] == 2 and fs.ops["create"] == 3
    fresh = FileStorage(tmp_path / "other")
    fresh.write("f", b"1")
    assert fresh.ops == Counter(create=1, write=1, fsync=2, rename=1)


# -- failure injection ----------------------------------------------------------------------


def test_failed_fsync_keeps_old_bytes_on_disk(tmp_path, monkeypatch):
    fs = FileStorage(tmp_path)
    fs.write("d/f", b"old")
    error = OSError(errno.EIO, "Input/output error")
    real_fsync = os.fsync
    calls = []

    def failing_fsync(fd):
        calls.append(fd)
        if len(calls) == 1:
            raise error
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(OSError) as caught:
        fs.write("d/f", b"new")
    assert caught.value is error
    assert fs.read("d/f") == b"old"
    assert temporaries_on_disk(tmp_path) == []


def test_failed_write_syscall_keeps_old_bytes_on_disk(tmp_path, monkeypatch):
    fs = FileStorage(tmp_path)
    fs.write("f", b"old")
    error = OSError(errno.ENOSPC, "No space left on device")

    def failing_write(fd, data):
        raise error

    monkeypatch.setattr(os, "write", failing_write)
    with pytest.raises(OSError) as caught:
        fs.write("f", b"new")
    monkeypatch.undo()
    assert caught.value is error
    assert fs.read("f") == b"old"
    assert temporaries_on_disk(tmp_path) == []


WRITE_OPS = ["create", "write", "fsync", "rename", "fsync_dir"]


@pytest.mark.parametrize("n", range(1, len(WRITE_OPS) + 1))
def test_memory_fail_on_each_write_operation(n):
    mem = MemoryStorage()
    mem.write("d/f", b"old")
    start = mem.count_ops()
    error = OSError(errno.ENOSPC, "No space left on device")
    mem.fail_on(n, error)
    with pytest.raises(OSError) as caught:
        mem.write("d/f", b"new")
    assert caught.value is error
    kinds = [kind for _, kind, _ in mem.log[start:]]
    assert kinds[: n - 1] == WRITE_OPS[: n - 1]
    assert mem.snapshot(include_temporaries=True) == mem.snapshot()  # temporary removed
    if WRITE_OPS[n - 1] == "fsync_dir":
        # the rename happened: new bytes are visible but not durable
        assert mem.read("d/f") == b"new"
        assert mem.reopen().read("d/f") == b"old"
    else:
        assert kinds[n - 1 :] == (["unlink"] if n > 1 else [])
        assert mem.read("d/f") == b"old"
    mem.write("d/f", b"later")  # injection consumed
    assert mem.read("d/f") == b"later"


def test_memory_disarm_and_simulated_crash_is_not_an_exception():
    mem = MemoryStorage()
    mem.fail_on(1, OSError(errno.EIO, "boom"))
    mem.disarm()
    mem.write("f", b"1")
    assert not issubclass(SimulatedCrash, Exception)
    mem.crash_after(1)
    try:
        mem.write("g", b"2")
    except Exception:  # noqa: BLE001 - must not catch the crash
        pytest.fail("SimulatedCrash was caught by except Exception")
    except SimulatedCrash:
        pass
    assert mem.crashed
    for call in (lambda: mem.read("f"), lambda: mem.list(""), lambda: mem.write("h", b"")):
        with pytest.raises(SimulatedCrash):
            call()


# -- crash model ----------------------------------------------------------------------------

SEQUENCE = [
    ("write", "a", b"A1"),
    ("write", "dir/b", b"B1"),
    ("write", "a", b"A2"),
    ("delete", "dir/b", None),
    ("append", "c", b"x"),
    ("append", "c", b"y"),
]


def apply(store: Storage, op: tuple) -> None:
    kind, path, data = op
    if kind == "delete":
        store.delete(path)
    else:
        getattr(store, kind)(path, data)


def expected_states() -> list[dict[str, bytes]]:
    """Visible files after 0, 1, ... calls of SEQUENCE."""
    states = [{}]
    for kind, path, data in SEQUENCE:
        state = dict(states[-1])
        if kind == "write":
            state[path] = data
        elif kind == "append":
            state[path] = state.get(path, b"") + data
        else:
            state.pop(path, None)
        states.append(state)
    return states


def total_ops() -> int:
    mem = MemoryStorage()
    for op in SEQUENCE:
        apply(mem, op)
    return mem.count_ops()


@pytest.mark.parametrize("metadata_flushed", [False, True])
def test_crash_after_every_operation_never_tears_a_write(metadata_flushed):
    states = expected_states()
    n_ops = total_ops()
    for n in range(1, n_ops + 1):
        mem = MemoryStorage()
        mem.crash_after(n, metadata_flushed=metadata_flushed)
        returned = 0
        with pytest.raises(SimulatedCrash):
            for op in SEQUENCE:
                apply(mem, op)
                returned += 1
        assert mem.crashed and mem.count_ops() == n
        after = mem.reopen()
        seen = after.snapshot()
        before, done = states[returned], states[min(returned + 1, len(SEQUENCE))]
        kind, touched, _ = SEQUENCE[returned]
        for path in set(seen) | set(before) | set(done):
            allowed = {before.get(path), done.get(path)}
            if kind == "append" and path == touched and path not in before:
                allowed.add(b"")  # a created, not yet fsynced append target may survive empty
            if kind == "append" and path == touched and path in before and metadata_flushed:
                grown = len(done[path]) - len(before[path])  # its size survived, its bytes did not:
                allowed.add(before[path] + b"\0" * grown)  # the zero-filled tail of a torn append
            assert seen.get(path) in allowed, (n, path, seen)
            if path != touched:  # every call that returned is fully durable
                assert seen.get(path) == before.get(path), (n, path, seen)
        # the recovered store works and stale temporaries can be cleaned
        stale = len(after.snapshot(include_temporaries=True)) - len(seen)
        assert after.clean_temporaries("") == stale
        assert after.snapshot(include_temporaries=True) == seen
        after.write("a", b"again")
        assert after.read("a") == b"again"


def test_rename_without_folder_fsync_reverts():
    mem = MemoryStorage()
    mem.write("d/f", b"old")
    mem.crash_after(4)  # create, write, fsync, rename -> crash before fsync_dir
    with pytest.raises(SimulatedCrash):
        mem.write("d/f", b"new")
    assert mem.log[-1][1] == "rename"
    assert mem.reopen().read("d/f") == b"old"


def test_rename_after_folder_fsync_survives():
    mem = MemoryStorage()
    mem.write("d/f", b"old")
    mem.crash_after(5)
    with pytest.raises(SimulatedCrash):
        mem.write("d/f", b"new")
    assert mem.reopen().read("d/f") == b"new"


def test_durable_tmp_survives_crash_and_is_cleaned():
    mem = MemoryStorage()
    mem.write("d/f", b"old")
    mem.crash_after(2, metadata_flushed=True)  # temporary created and written, never fsynced
    with pytest.raises(SimulatedCrash):
        mem.write("d/f", b"new")
    after = mem.reopen()
    temps = [p for p in after.snapshot(include_temporaries=True) if "/.tmp-f-" in p]
    assert len(temps) == 1
    assert after.snapshot(include_temporaries=True)[temps[0]] == b""  # torn: never fsynced
    assert after.list("d") == ["f"] and not after.exists(temps[0])
    assert after.read("d/f") == b"old"
    assert after.clean_temporaries("d") == 1
    assert after.snapshot(include_temporaries=True) == {"d/f": b"old"}


def test_unfsynced_new_folder_is_lost_but_durable_snapshot_tracks_it():
    mem = MemoryStorage()
    mem.crash_after(1)  # mkdir x, no fsync of the root yet
    with pytest.raises(SimulatedCrash):
        mem.write("x/f", b"1")
    assert mem.reopen().list("") == []
    mem = MemoryStorage()
    mem.write("x/f", b"1")
    assert mem.durable_snapshot() == mem.snapshot() == {"x/f": b"1"}


def test_reopen_drops_leases_and_log():
    mem = MemoryStorage()
    with mem.lease("r1"):
        mem.write("f", b"1")
        mem.crash_after(0)
    after = mem.reopen()
    assert after.log == [] and not after.crashed
    with after.lease("r1"):
        assert after.read("f") == b"1"


# -- leases ---------------------------------------------------------------------------------

CHILD = """
import sys
from nnx_adapters.storage.fs import FileStorage
from nnx_core.errors import RunLeaseError
try:
    with FileStorage(sys.argv[1]).lease(sys.argv[2]):
        pass
except RunLeaseError:
    sys.exit(3)
"""


def test_second_lease_refused(store):
    with store.lease("r1"):
        with pytest.raises(RunLeaseError, match="another process is training or overwriting run"):
            with store.lease("r1"):
                pass
        with store.lease("r2"):
            pass
    with store.lease("r1"):  # released: can be taken again
        pass


def test_lease_run_id_validation(store):
    for bad in ("", "..", "a/b", "a\x00"):
        with pytest.raises(InvalidRunIdError):
            with store.lease(bad):
                pass


def test_lease_conflicts_across_file_storages_and_descriptors(tmp_path):
    with FileStorage(tmp_path).lease("r1"):
        with pytest.raises(RunLeaseError):
            with FileStorage(str(tmp_path)).lease("r1"):
                pass
        # flock locks belong to the open file description: a second open conflicts too
        with open(tmp_path / ".leases" / "r1.lock", "a+b") as handle:
            with pytest.raises(portalocker.LockException):
                portalocker.lock(handle, portalocker.LOCK_EX | portalocker.LOCK_NB)


def test_lease_conflicts_with_another_process(tmp_path):
    def child() -> int:
        return subprocess.run(
            [sys.executable, "-c", CHILD, str(tmp_path), "r1"], timeout=60, check=False
        ).returncode

    fs = FileStorage(tmp_path)
    with fs.lease("r1"):
        assert child() == 3
    assert child() == 0


# -- sync_group --------------------------------------------------------------------------------


def _grouped_writes(mem: MemoryStorage) -> None:
    mem.write("d/a", b"new a")
    mem.write("e/c", b"new c")
    mem.delete("d/old")
    mem.write("d/b", b"new b")


def _seeded() -> MemoryStorage:
    mem = MemoryStorage()
    for path, data in (("d/a", b"old a"), ("d/old", b"x"), ("e/c", b"old c")):
        mem.write(path, data)
    return mem


def test_sync_group_syncs_each_changed_folder_once_in_first_changed_order():
    mem = _seeded()
    mem.log.clear()
    with mem.sync_group():
        _grouped_writes(mem)
        assert [op for _, op, _ in mem.log].count("fsync_dir") == 0
        assert mem.read("d/a") == b"new a" and not mem.exists("d/old")  # readers see each call at once
    assert [(op, path) for _, op, path in mem.log if op == "fsync_dir"] == [("fsync_dir", "d"), ("fsync_dir", "e")]
    assert mem.durable_snapshot() == mem.snapshot() == {"d/a": b"new a", "d/b": b"new b", "e/c": b"new c"}


def test_sync_group_crash_before_its_exit_loses_whole_calls_never_tears_one():
    seeded = _seeded()
    before = seeded.snapshot()
    n_ops = 4 + 4 + 1 + 4  # write: create, write, fsync, rename; delete: unlink (folder fsyncs deferred)
    for n in range(n_ops + 1):
        mem = _seeded()
        mem.crash_after(n)
        with pytest.raises(SimulatedCrash):
            with mem.sync_group():
                _grouped_writes(mem)
                mem.write("e/late", b"1")  # crosses the cut when n == n_ops
        after = mem.reopen().snapshot()
        assert after == before, f"crash after op {n} inside the group: {after}"


def test_sync_group_left_by_an_exception_syncs_nothing_and_a_nested_group_joins():
    mem = _seeded()
    mem.log.clear()
    with pytest.raises(KeyError):
        with mem.sync_group():
            with mem.sync_group():
                mem.write("d/a", b"new a")
            assert [op for _, op, _ in mem.log].count("fsync_dir") == 0  # the inner exit synced nothing
            raise KeyError("boom")
    assert [op for _, op, _ in mem.log].count("fsync_dir") == 0
    assert mem.read("d/a") == b"new a"
    mem.write("d/z", b"1")  # outside any group again: synced at once
    assert mem.log[-1][1] == "fsync_dir"


def test_file_storage_sync_group_defers_folder_fsyncs(tmp_path):
    fs = FileStorage(tmp_path / "store")
    for path, data in (("d/a", b"old a"), ("d/old", b"x"), ("e/c", b"old c")):
        fs.write(path, data)
    alone = Counter(fs.ops)
    fs.write("d/a", b"again")
    alone = Counter(fs.ops) - alone
    before = Counter(fs.ops)
    with fs.sync_group():
        fs.write("d/a", b"new a")
        fs.write("e/c", b"new c")
        fs.delete("d/old")
        fs.write("d/b", b"new b")
    grouped = Counter(fs.ops) - before
    assert grouped["fsync"] == 3 * (alone["fsync"] - 1) + 2  # one file fsync per write, one per folder
    assert {p: fs.read(p) for p in ("d/a", "d/b", "e/c")} == {"d/a": b"new a", "d/b": b"new b", "e/c": b"new c"}
    assert not fs.exists("d/old")


# -- copy (the port's optional capability) ----------------------------------------------------


def test_a_copy_has_the_source_bytes_and_stays_apart_from_it(store):
    store.write("d/src", b"first")
    store.write("e/dst", b"old")
    store.copy("d/src", "e/dst")
    assert (store.read("e/dst"), store.read("d/src")) == (b"first", b"first")
    store.write("d/src", b"second")  # replacing one name leaves the other
    assert store.read("e/dst") == b"first"
    store.copy("d/src", "e/dst")
    store.append("d/src", b"+")  # an append to one name, too (a shared file is replaced first)
    store.append("e/dst", b"-")
    assert (store.read("d/src"), store.read("e/dst")) == (b"second+", b"second-")
    store.copy("d/src", "d/src")  # onto itself: nothing changes
    assert store.read("d/src") == b"second+" and store.temporaries("") == []


def test_a_copy_of_a_missing_source_or_onto_a_folder_leaves_nothing_behind(store):
    with pytest.raises(FileNotFoundError):
        store.copy("x/missing", "y/dst")
    assert store.list("") == []  # not even the destination's folder
    store.write("a", b"1")
    store.write("f/g", b"2")
    with pytest.raises(IsADirectoryError):
        store.copy("f", "b")
    with pytest.raises(IsADirectoryError):
        store.copy("a", "f")
    assert store.temporaries("") == [] and store.read("f/g") == b"2"


def test_file_storage_copies_by_a_hard_link_without_writing_a_byte(tmp_path):
    fs = FileStorage(tmp_path / "store")
    fs.write("d/src", b"x" * 4096)
    fs.write("d/dst", b"old")
    before = Counter(fs.ops)
    fs.copy("d/src", "d/dst")
    assert Counter(fs.ops) - before == {"link": 1, "rename": 1, "fsync": 1}  # the folder's fsync only
    src, dst = os.stat(fs.root + "/d/src"), os.stat(fs.root + "/d/dst")
    assert (src.st_ino, src.st_nlink) == (dst.st_ino, 2)
    before = Counter(fs.ops)
    with fs.sync_group():
        fs.copy("d/src", "d/a")
        fs.copy("d/src", "d/b")
    assert Counter(fs.ops) - before == {"link": 2, "rename": 2, "fsync": 1}  # one folder fsync for both


def test_file_storage_copies_the_bytes_where_the_file_system_has_no_hard_links(tmp_path, monkeypatch):
    fs = FileStorage(tmp_path / "store")
    fs.write("src", b"bytes")

    def refused(*args, **kwargs):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", refused)
    fs.copy("src", "dst")
    assert fs.read("dst") == b"bytes" and fs.ops["link"] == 0
    assert os.stat(fs.root + "/dst").st_ino != os.stat(fs.root + "/src").st_ino

    def broken(*args, **kwargs):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "link", broken)
    with pytest.raises(OSError, match="Input/output error"):  # any other link error is the caller's
        fs.copy("src", "other")
    assert not fs.exists("other") and fs.temporaries("") == []


@pytest.mark.parametrize("metadata_flushed", [False, True])
def test_a_power_cut_inside_a_copy_leaves_the_old_or_the_new_bytes_whole(metadata_flushed):
    mem = MemoryStorage()
    mem.write("d/src", b"new")
    mem.write("d/dst", b"old")
    found = []
    for n in (1, 2, 3):  # a cut after the link, the rename, the folder fsync
        trial = mem.reopen()
        trial.crash_after(n, metadata_flushed=metadata_flushed)
        with pytest.raises(SimulatedCrash):
            trial.copy("d/src", "d/dst")
        after = trial.reopen()
        after.clean_temporaries("")  # a cut after the link leaves its temporary
        found.append(after.snapshot(include_temporaries=True))
    old, new = {"d/src": b"new", "d/dst": b"old"}, {"d/src": b"new", "d/dst": b"new"}
    assert found == ([old, old, new] if not metadata_flushed else [old, new, new])
