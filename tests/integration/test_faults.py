"""ENOSPC / EIO injected at each ``os.write`` and ``os.fsync`` of a real ``NNModel.train``.

A 2-epoch run makes its admission writes, two epoch commits (blob, history, LAST, phase/BEST
tags, attempt record) and the finalization refresh of LAST. For every k, the k-th ``os.write``
(ENOSPC) or the k-th ``os.fsync`` (EIO) of the run's file operations fails. Each time:

* the error surfaces from ``train`` (never swallowed), with the injected errno;
* the committed state on disk is the one committed before the failing file operation, or — when
  only the folder fsync after LAST's rename failed — the one it was committing: LAST's blob is
  the uninterrupted run's blob of that epoch, the history rows are the uninterrupted run's, and
  the bytes of idps.csv itself are the ones the uninterrupted run had beside that LAST (a failed
  LAST rolled the file back: readers truncate to LAST, so only the bytes can show it) — or, when
  a folder fsync after idps.csv's own rename failed (a ``sync_group``'s deferred folder fsyncs
  are injected too), its new bytes, which readers truncate;
  a run that never committed is removed (so the id can be retried);
* no ``.tmp-*`` file remains on disk;
* rerunning the script (``resume="auto"``) ends bit-identical to the uninterrupted run.

``NNX_DEEP=1`` also injects the other errno at each call (EIO on write, ENOSPC on fsync).
"""

from __future__ import annotations

import errno
import json
import os

import pytest
import tinyrun
import torch

from nnx_core.commit import LAST, RunFiles
from nnx_adapters.storage.fs import FileStorage
import nnx_api as nnx

pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("one_thread")]

N_EPOCHS = 2
DEEP = os.environ.get("NNX_DEEP") == "1"
STORAGE_OPS = ("write", "write_blob", "append", "copy", "delete", "remove_tree", "clean_temporaries")
GROUP_SYNC = " (sync_group)"


class Injector:
    """Counts ``os.write`` / ``os.fsync`` / ``os.link`` calls made inside FileStorage operations
    (a copy's under its destination); fails one."""

    def __init__(self, mp: pytest.MonkeyPatch, fail: tuple[str, int, int] | None = None) -> None:
        self.fail = fail  # (function, k, errno)
        self.calls = {"write": 0, "fsync": 0, "link": 0}
        self.inside: str | None = None
        self.last_epoch: int | None = None
        self.trace: list[tuple[str, int, str, int | None, int | None]] = []  # fn, k, path, LAST before/after
        self.injected: OSError | None = None
        for name in STORAGE_OPS:
            mp.setattr(FileStorage, name, self._storage_op(getattr(FileStorage, name), copies=name == "copy"))
        mp.setattr(FileStorage, "_fsync_dir", self._group_sync(FileStorage._fsync_dir))
        for fn in self.calls:
            mp.setattr(os, fn, self._os_call(fn, getattr(os, fn)))

    def _storage_op(self, original, copies=False):
        def op(storage, path, *args, **kwargs):
            outer, self.inside = self.inside, args[0] if copies else path
            start = len(self.trace)
            try:
                result = original(storage, path, *args, **kwargs)
            finally:
                self.inside = outer
            if path.endswith("checkpoints/last.json") and args and not copies:
                self.last_epoch = json.loads(bytes(args[0]))["epoch"]
            for i in range(start, len(self.trace)):  # LAST as it stands after this operation
                self.trace[i] = (*self.trace[i][:4], self.last_epoch)
            return result

        return op

    def _group_sync(self, original):
        """A folder fsync a ``sync_group`` deferred to its exit runs outside every storage
        operation: trace it (and fail it) as one of its own, named ``<folder> (sync_group)``."""
        op = self._storage_op(lambda storage, label: original(storage, label[: -len(GROUP_SYNC)]))

        def sync(storage, folder):
            return original(storage, folder) if self.inside is not None else op(storage, folder + GROUP_SYNC)

        return sync

    def _os_call(self, fn, original):
        def call(*args):
            if self.inside is None:
                return original(*args)
            self.calls[fn] += 1
            self.trace.append((fn, self.calls[fn], self.inside, self.last_epoch, None))
            if self.fail is not None and self.fail[:2] == (fn, self.calls[fn]):
                self.injected = OSError(self.fail[2], f"injected {errno.errorcode[self.fail[2]]} at {fn} #{self.calls[fn]}")
                raise self.injected
            return original(*args)

        return call


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted 2-epoch run: its os-call trace and the LAST blob of every epoch."""
    root = tmp_path_factory.mktemp("faults-reference")
    mp = pytest.MonkeyPatch()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        injector = Injector(mp)
        last_blobs: dict[int, str] = {}
        history_bytes: dict[int, bytes] = {}  # idps.csv as it stands when LAST names the epoch
        real_write = FileStorage.write

        def write(storage, path, data, **kwargs):
            if path.endswith("checkpoints/last.json"):
                doc = json.loads(bytes(data))
                last_blobs[doc["epoch"]] = doc["blobs"]["state"]["sha256"]
                history_bytes[doc["epoch"]] = (root / doc["run_id"] / "idps.csv").read_bytes()
            return real_write(storage, path, data, **kwargs)

        mp.setattr(FileStorage, "write", write)
        model, run = tinyrun.train(root, N_EPOCHS)
    finally:
        mp.undo()
        torch.set_num_threads(threads)
    return {
        "id": run.id,
        "trace": injector.trace,
        "calls": dict(injector.calls),
        "last_blobs": last_blobs,
        "history_bytes": history_bytes,
        "idps": list(run.idps),
        "weights": {k: v.clone() for k, v in model.net.state_dict().items()},
    }


def fault_points(reference) -> list[tuple[str, int, int]]:
    points = []
    for fn, count in reference["calls"].items():
        errnos = (errno.ENOSPC, errno.EIO) if DEEP else ((errno.ENOSPC,) if fn == "write" else (errno.EIO,))
        points += [(fn, k, e) for k in range(1, count + 1) for e in errnos]
    return points


def test_the_reference_trace_covers_every_file_of_a_commit(reference):
    paths = {path.rsplit("/", 1)[-1] for _, _, path, _, _ in reference["trace"]}
    assert {"run.yaml", "metadata.yaml", "idps.csv", "attempt.json", "last.json", "first.json"} <= paths
    assert "objects" in paths  # the payload blobs, streamed by write_blob
    assert any(p.endswith(GROUP_SYNC) for p in paths)  # the folder fsyncs a commit's sync_group deferred
    # every file written is fsynced, and so are the folders of its renames (one per folder and group)
    assert reference["calls"]["write"] >= 10 and reference["calls"]["fsync"] > reference["calls"]["write"]


def test_a_fault_at_each_write_and_fsync_surfaces_and_keeps_the_committed_state(reference, tmp_path, monkeypatch):
    trace = {(fn, k): (path, before, after) for fn, k, path, before, after in reference["trace"]}
    points = fault_points(reference)
    for n, (fn, k, code) in enumerate(points):
        root = tmp_path / f"fault-{n:03d}"
        path, before, after = trace[(fn, k)]
        where = f"{errno.errorcode[code]} at os.{fn} #{k} (writing {path})"
        with monkeypatch.context() as mp:
            injector = Injector(mp, (fn, k, code))
            with pytest.raises(OSError) as raised:
                tinyrun.train(root, N_EPOCHS)
        assert raised.value is injector.injected, f"{where}: a different error surfaced: {raised.value!r}"
        assert tinyrun.disk_temporaries(root) == [], f"{where}: a temporary remains"

        rid = reference["id"]
        committed = tinyrun.check_committed_state(root, rid)
        assert committed in (before, after), f"{where}: LAST is {committed}, expected {before} or {after}"
        if committed is None:
            assert not RunFiles(FileStorage(root), rid).exists(), f"{where}: an uncommitted run was left behind"
        else:
            last = RunFiles(FileStorage(root), rid).read_tag(LAST)
            assert last.blobs["state"].sha256 == reference["last_blobs"][committed], where
            run = nnx.NNRun.load(rid, root)
            assert list(run.idps) == [i for i in reference["idps"] if i.epoch_idx <= committed], where
            expected = [reference["history_bytes"][committed]]
            if fn == "fsync" and path.endswith(("/idps.csv", GROUP_SYNC)):  # a folder fsync after idps.csv's
                expected.append(reference["history_bytes"].get(committed + 1))  # rename: the new rows are visible
            assert (root / rid / "idps.csv").read_bytes() in expected, where

        model, run = tinyrun.train(root, N_EPOCHS)  # the script, rerun after the disk was fixed
        assert tinyrun.same_weights(model.net.state_dict(), reference["weights"]), where
        assert list(run.idps) == reference["idps"], where
    if os.environ.get("NNX_REPORT") == "1":
        by_fn = {fn: sum(1 for f, _, _ in points if f == fn) for fn in reference["calls"]}
        print(f"\nfaults: {len(points)} injected ({by_fn['write']} at os.write, {by_fn['fsync']} at os.fsync, "
              f"{by_fn['link']} at os.link) "
              f"over {N_EPOCHS} epochs + admission + finalization; all surfaced, state intact, no temporary")
