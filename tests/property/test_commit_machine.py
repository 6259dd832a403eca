"""The epoch commit protocol under every crash and every fault, as a hypothesis state machine.

The machine plays a writer that commits epochs through ``nnx_core.commit.commit_epoch`` (a small
fake payload, ``EagerHistory`` rows, phase tags, BEST, a deferred callback tag, then the attempt
record) — the core never imports torch, so payloads are plain bytes. Before each commit becomes
the new state, the same commit is replayed from the current state once per failure point:

* ``MemoryStorage``: power cut after every single primitive operation in turn, with and without
  the file system's metadata journal flushed (``crash_after(k, metadata_flushed=...)``), then
  ``reopen()``; and ENOSPC/EIO at every operation (``fail_on(k, error)``).
* ``FileStorage``: ENOSPC at the k-th ``os.write`` and EIO at the k-th ``os.fsync`` (monkeypatched),
  and a process kill at the k-th file-system call (every later call of the dead process fails
  too, so no cleanup runs and stale temporaries stay on disk).

After each one, what a reader loads must be a committed state: loading never fails (not even with
``CorruptRunError``); LAST names either the previous or the new epoch; history as readers see it
(``parse_history`` + ``truncate_to_last``) holds exactly the rows of the epochs up to LAST; BEST,
the phase tags and the callback tag name epochs ≤ LAST and each is its old or its new value;
every referenced blob verifies against its SHA-256; no temporary is visible. An injected fault
must surface as the very error injected and leave no temporary on disk. Hypothesis then picks
one outcome (the completed commit, a crash or a fault) to continue from, as a restarted writer
does: clean stale temporaries, reload the committed history, commit the next epoch.

``NNX_DEEP=1`` runs 300 examples instead of 25.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

from nnx_adapters.storage.fs import FileStorage
from nnx_adapters.storage.paths import TMP_PREFIX
from nnx_adapters.storage.memory import MemoryStorage, SimulatedCrash
from nnx_core.commit import (
    BEST,
    LAST,
    EpochCommit,
    RunFiles,
    TagManifest,
    commit_epoch,
    phase_tags,
    truncate_to_last,
)
from nnx_core.history import EagerHistory, parse_history
from nnx_core.records import EvaluationDataPoint, IterationDataPoint, MonitorRecord

DEEP = os.environ.get("NNX_DEEP") == "1"
SETTINGS = settings(
    max_examples=300 if DEEP else 25,
    stateful_step_count=8 if DEEP else 5,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
RUN_ID = "c0ffee" + "0" * 26
N_EPOCHS = 8  # for the phase tags: FIRST at 0, Q1 at 1, Q2 at 3, Q3 at 5
CALLBACK_TAG = "snapshot"
EXERCISED: dict[str, int] = {}  # what the machines tried, for the report (docs/reliability.md)


def count(kind: str, n: int = 1) -> None:
    EXERCISED[kind] = EXERCISED.get(kind, 0) + n


# -- what readers see -------------------------------------------------------------------------


@attrs.frozen
class View:
    """A committed state as readers see it: LAST's epoch, visible history rows, tag → (epoch, blob)."""

    last: int | None
    rows: tuple[IterationDataPoint, ...]
    tags: dict[str, tuple[int, str]]


def visible_temporaries(storage: Any, folder: str) -> list[str]:
    found = []
    for name in storage.list(folder):
        path = f"{folder}/{name}" if folder else name
        if name.startswith(TMP_PREFIX):
            found.append(path)
        elif not storage.exists(path):
            found += visible_temporaries(storage, path)
    return found


def observe(storage: Any) -> View:
    """Load the run as a reader does and check the load rules; raises if anything is off."""
    assert visible_temporaries(storage, "") == []
    files = RunFiles(storage, RUN_ID)
    last = files.read_tag(LAST)  # an empty, torn or mixed LAST would raise CorruptRunError
    try:
        raw = parse_history(storage.read(files.history))
    except FileNotFoundError:
        raw = []
    rows = tuple(truncate_to_last(raw, last))
    tags = {}
    for tag in files.tags():
        manifest = files.read_tag(tag)
        assert manifest is not None and last is not None and manifest.epoch <= last.epoch, (tag, manifest, last)
        for ref in manifest.blobs.values():
            files.read_blob(ref, verify=True)  # present, right size, right SHA-256
        tags[tag] = (manifest.epoch, manifest.blobs["state"].sha256)
    if last is not None:
        assert sorted({r.epoch_idx for r in rows}) == list(range(last.epoch + 1))
    return View(None if last is None else last.epoch, rows, tags)


def check_outcome(view: View, old: View, new: View, where: str) -> None:
    """After a crash or fault: exactly the old committed state, or the new one (tags: each old or new)."""
    assert view.last in (old.last, new.last), f"{where}: LAST is {view.last}, not {old.last} or {new.last}"
    if view.last == new.last:
        assert view.rows == new.rows, where
        assert view.tags[LAST] == new.tags[LAST], where
        for tag in set(view.tags) | set(new.tags):
            assert view.tags.get(tag) in (old.tags.get(tag), new.tags.get(tag)), f"{where}: tag {tag}"
    else:
        assert view == old, where


# -- one epoch's commit -------------------------------------------------------------------------


def epoch_rows(epoch: int, first_iter: int, n_rows: int, improved: bool) -> list[IterationDataPoint]:
    rows = []
    for i in range(n_rows):
        final = i == n_rows - 1
        loss = 1.0 / (1 + epoch) + i / 7
        rows.append(
            IterationDataPoint(
                iter_idx=first_iter + i,
                epoch_idx=epoch,
                batch_idx=i,
                lr=0.1 / (1 + epoch),
                train_edp=EvaluationDataPoint(loss=loss, count=4),
                val_edp=EvaluationDataPoint(loss=loss * 1.5, accuracy=0.5) if final else None,
                selection=MonitorRecord(
                    metric="loss", split="val", mode="min", value=loss * 1.5, status="ok", improved=improved,
                    best=loss * 1.5,
                )
                if final
                else None,
                update_count=first_iter + i + 1 if final else None,
            )
        )
    return rows


@attrs.frozen
class Plan:
    """Everything one epoch commit will write, and the state it must produce."""

    epoch: int
    payload: bytes
    snapshot: bytes | None
    history: bytes
    previous_history: bytes | None
    tags: tuple[str, ...]
    rows: tuple[IterationDataPoint, ...]

    def run(self, storage: Any) -> None:
        """The writer's commit step: ``commit_epoch``, then the attempt record."""
        files = RunFiles(storage, RUN_ID)
        deferred: list[Callable[[], None]] = []
        if self.snapshot is not None:
            data, epoch = self.snapshot, self.epoch

            def write_snapshot() -> None:
                ref = files.put_blob(data)
                files.write_tag(TagManifest(tag=CALLBACK_TAG, run_id=RUN_ID, epoch=epoch, blobs={"state": ref}))

            deferred.append(write_snapshot)
        commit_epoch(
            files,
            EpochCommit(
                epoch=self.epoch,
                payload=self.payload,
                history=self.history,
                previous_history=self.previous_history,
                tags=self.tags,
                meta={"update_count": len(self.rows)},
                deferred=deferred,
            ),
        )

    def expected(self, old: View) -> View:
        import hashlib

        sha = hashlib.sha256(self.payload).hexdigest()
        tags = dict(old.tags)
        for tag in (LAST, *self.tags):
            tags[tag] = (self.epoch, sha)
        if self.snapshot is not None:
            tags[CALLBACK_TAG] = (self.epoch, hashlib.sha256(self.snapshot).hexdigest())
        return View(self.epoch, old.rows + self.rows, tags)


# -- the machine ----------------------------------------------------------------------------------


class CommitMachine(RuleBasedStateMachine):
    """Shared rules; a subclass supplies the store, its copies and its failure trials."""

    def __init__(self) -> None:
        super().__init__()
        self.storage: Any = None
        self.view = View(None, (), {})

    # backend hooks
    def fresh_store(self) -> Any:
        raise NotImplementedError

    def trials(self, plan: Plan, old: View, new: View, pick: float) -> tuple[str, Any]:
        """Replay ``plan`` from the current state at every failure point and check each outcome.

        Returns the label and surviving store of the trial at fraction ``pick`` of the list, as the
        next writer finds it after cleaning up (the others are discarded as they are checked).
        """
        raise NotImplementedError

    def complete(self, plan: Plan) -> Any:
        raise NotImplementedError

    def discard(self, store: Any) -> None:
        """Forget a store copy that is no longer needed."""

    @initialize()
    def admit(self) -> None:
        self.storage = self.fresh_store()
        self.storage.write(f"{RUN_ID}/run.yaml", b"id: " + RUN_ID.encode() + b"\n")

    @rule(
        payload=st.integers(0, 2),
        n_rows=st.integers(1, 3),
        improved=st.booleans(),
        snapshot=st.booleans(),
        outcome=st.floats(0, 1),
        take=st.sampled_from(["complete", "failure", "failure"]),
    )
    def commit(self, payload: int, n_rows: int, improved: bool, snapshot: bool, outcome: float, take: str) -> None:
        old = self.view
        epoch = 0 if old.last is None else old.last + 1
        rows = tuple(epoch_rows(epoch, len(old.rows), n_rows, improved))
        previous = EagerHistory(old.rows).render() if old.rows else None
        plan = Plan(
            epoch=epoch,
            payload=b"NNX-FAKE-PAYLOAD:" + bytes([payload]) * 96,  # few distinct payloads: blobs get shared
            snapshot=b"weights:%d" % (epoch % 2) if snapshot else None,
            history=EagerHistory(old.rows + rows).render(),
            previous_history=previous,
            tags=(*phase_tags(epoch, N_EPOCHS), *((BEST,) if improved else ())),
            rows=rows,
        )
        new = plan.expected(old)
        label, survivor = self.trials(plan, old, new, outcome)
        count("commits replayed")
        previous_store = self.storage
        if take == "complete":
            self.discard(survivor)
            self.storage = self.complete(plan)
            assert observe(self.storage) == new
            self.view = new
            self.discard(previous_store)
            return
        self.discard(previous_store)
        self.storage = restart(survivor)
        self.view = observe(self.storage)
        check_outcome(self.view, old, new, f"continuing after {label}")

    @invariant()
    def readers_see_the_writers_committed_state(self) -> None:
        if self.storage is not None:
            assert observe(self.storage) == self.view


class MemoryCommitMachine(CommitMachine):
    """Against ``MemoryStorage``: crash after every operation (both modes) and fail at every one."""

    def fresh_store(self) -> MemoryStorage:
        return MemoryStorage()

    def clone(self) -> MemoryStorage:
        # every write/append/delete ends with an fsync of the file and its folder, so between
        # commits the durable state is the whole state: reopen() is an exact copy
        copy = self.storage.reopen()
        assert copy.snapshot(include_temporaries=True) == self.storage.snapshot(include_temporaries=True)
        return copy

    def complete(self, plan: Plan) -> MemoryStorage:
        store = self.clone()
        plan.run(store)
        return store

    def trials(self, plan: Plan, old: View, new: View, pick: float) -> tuple[str, Any]:
        probe = self.clone()
        start = probe.count_ops()
        plan.run(probe)
        n_ops = probe.count_ops() - start
        chosen = min(int(pick * 3 * n_ops), 3 * n_ops - 1)
        kept: tuple[str, Any] = ("", None)
        for flushed in (False, True):
            for k in range(1, n_ops + 1):
                store = self.clone()
                store.crash_after(k, metadata_flushed=flushed)
                with pytest.raises(SimulatedCrash):
                    plan.run(store)
                survivor = store.reopen()
                where = f"power cut after op {k}/{n_ops} (metadata_flushed={flushed}) committing epoch {plan.epoch}"
                check_outcome(observe(survivor), old, new, where)
                count("memory: power cuts" + (" (metadata flushed)" if flushed else ""))
                if chosen == 0:
                    kept = (where, survivor)
                chosen -= 1
        for k in range(1, n_ops + 1):
            code = (errno.ENOSPC, errno.EIO)[k % 2]
            store = self.clone()
            injected = OSError(code, f"injected {errno.errorcode[code]}")
            store.fail_on(k, injected)
            with pytest.raises(OSError) as raised:
                plan.run(store)
            where = f"{errno.errorcode[code]} at op {k}/{n_ops} committing epoch {plan.epoch}"
            assert raised.value is injected, f"{where}: {raised.value!r} surfaced instead"
            assert [p for p in store.snapshot(include_temporaries=True) if TMP_PREFIX in p] == [], where
            check_outcome(observe(store), old, new, where)
            count("memory: ENOSPC/EIO faults")
            if chosen == 0:
                kept = (where, _materialized(store))
            chosen -= 1
        return kept


def _materialized(store: MemoryStorage) -> MemoryStorage:
    """A store holding what the failed writer left visible (the machine did not crash)."""
    copy = MemoryStorage()
    for path, data in store.snapshot().items():
        copy.write(path, data)
    return copy


def restart(store: Any) -> Any:
    """What the next writer does first: remove the stale temporaries a hard kill left."""
    store.clean_temporaries("")
    if isinstance(store, MemoryStorage):
        assert [p for p in store.snapshot(include_temporaries=True) if TMP_PREFIX in p] == []
    else:
        assert _disk_temporaries(store.root) == []
    return store


# -- FileStorage: faults and kills through monkeypatched os calls --------------------------------


class ProcessKilled(BaseException):
    """The writer process died at a file-system call."""


OS_CALLS = ("open", "write", "fsync", "replace", "unlink", "mkdir")


class OsFaults:
    """Replace the ``os`` calls FileStorage makes: count them; fail or kill at one of them.

    ``fsync`` is counted but not performed: durability across power loss is the crash model's
    job (above); here the real adapter's error and kill paths are what is exercised.
    """

    def __init__(self, fail: tuple[str, int, OSError] | None = None, kill_at: int | None = None) -> None:
        self.fail, self.kill_at = fail, kill_at
        self.calls = dict.fromkeys(OS_CALLS, 0)
        self.total = 0
        self.dead = False

    @contextlib.contextmanager
    def installed(self) -> Iterator[OsFaults]:
        originals = {name: getattr(os, name) for name in OS_CALLS}
        for name in OS_CALLS:
            setattr(os, name, self._wrap(name, originals[name]))
        try:
            yield self
        finally:
            for name, fn in originals.items():
                setattr(os, name, fn)

    def _wrap(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            if self.dead:
                raise ProcessKilled(f"os.{name} after the kill")
            self.calls[name] += 1
            self.total += 1
            if self.kill_at == self.total:
                self.dead = True
                raise ProcessKilled(f"killed at os call {self.total} (os.{name})")
            if self.fail is not None and self.fail[:2] == (name, self.calls[name]):
                raise self.fail[2]
            return None if name == "fsync" else original(*args, **kwargs)

        return call


def _disk_temporaries(root: str) -> list[str]:
    return [os.path.join(d, n) for d, _, names in os.walk(root) for n in names if n.startswith(TMP_PREFIX)]


def sync_tree(src: str, dst: str) -> None:
    """Make folder ``dst`` hold exactly what ``src`` holds (cheaper than a fresh copy per trial)."""
    want_files, want_dirs = {}, {""}
    for folder, dirs, names in os.walk(src):
        rel = os.path.relpath(folder, src)
        rel = "" if rel == "." else rel
        want_dirs.update(os.path.join(rel, d) for d in dirs)
        want_files.update({os.path.join(rel, n): os.path.join(folder, n) for n in names})
    for folder, dirs, names in os.walk(dst, topdown=False):
        rel = os.path.relpath(folder, dst)
        rel = "" if rel == "." else rel
        for name in names:
            if os.path.join(rel, name) not in want_files:
                os.unlink(os.path.join(folder, name))
        if rel not in want_dirs:
            os.rmdir(folder)
    for rel in sorted(want_dirs):
        os.makedirs(os.path.join(dst, rel), exist_ok=True)
    for rel, path in want_files.items():
        with open(path, "rb") as f:
            data = f.read()
        target = os.path.join(dst, rel)
        try:
            with open(target, "rb") as f:
                if f.read() == data:
                    continue
        except FileNotFoundError:
            pass
        with open(target, "wb") as f:
            f.write(data)


class FileCommitMachine(CommitMachine):
    """Against ``FileStorage`` on a real file system (under pytest's ``tmp_path``).

    Each trial starts from an exact copy of the current state in a scratch folder; the trial
    the machine continues from is copied out of it.
    """

    base_dir: str = ""

    def __init__(self) -> None:
        super().__init__()
        self.workdir = tempfile.mkdtemp(dir=self.base_dir)
        self.scratch = os.path.join(self.workdir, "scratch")
        self.copies = 0

    def teardown(self) -> None:
        shutil.rmtree(self.workdir, ignore_errors=True)

    def fresh_store(self) -> FileStorage:
        root = self._new_root()
        with OsFaults().installed():  # no real fsync when creating the root either
            store = FileStorage(root)
            store._make_parents(())
        return store

    def _new_root(self) -> str:
        self.copies += 1
        return os.path.join(self.workdir, f"state-{self.copies}")

    def scratch_copy(self) -> FileStorage:
        sync_tree(self.storage.root, self.scratch)
        return FileStorage(self.scratch)

    def discard(self, store: Any) -> None:
        if store is not None:
            shutil.rmtree(store.root, ignore_errors=True)

    def complete(self, plan: Plan) -> FileStorage:
        root = self._new_root()
        shutil.copytree(self.storage.root, root)
        with OsFaults().installed():
            plan.run(FileStorage(root))
        return FileStorage(root)

    def trials(self, plan: Plan, old: View, new: View, pick: float) -> tuple[str, Any]:
        probe = self.scratch_copy()
        with OsFaults().installed() as counter:
            plan.run(probe)
        faults = [("write", k, errno.ENOSPC) for k in range(1, counter.calls["write"] + 1)]
        faults += [("fsync", k, errno.EIO) for k in range(1, counter.calls["fsync"] + 1)]
        n_trials = len(faults) + counter.total
        chosen = min(int(pick * n_trials), n_trials - 1)
        kept: tuple[str, Any] = ("", None)
        for fn, k, code in faults:
            store = self.scratch_copy()
            injected = OSError(code, f"injected {errno.errorcode[code]}")
            with OsFaults(fail=(fn, k, injected)).installed(), pytest.raises(OSError) as raised:
                plan.run(store)
            where = f"{errno.errorcode[code]} at os.{fn} #{k} committing epoch {plan.epoch}"
            assert raised.value is injected, f"{where}: {raised.value!r} surfaced instead"
            assert _disk_temporaries(store.root) == [], f"{where}: a temporary remains"
            check_outcome(observe(FileStorage(store.root)), old, new, where)
            count("file: ENOSPC at os.write" if fn == "write" else "file: EIO at os.fsync")
            kept, chosen = self._keep(kept, chosen, where)
        for k in range(1, counter.total + 1):
            store = self.scratch_copy()
            with OsFaults(kill_at=k).installed(), pytest.raises(ProcessKilled):
                plan.run(store)
            where = f"kill at os call {k}/{counter.total} committing epoch {plan.epoch}"
            check_outcome(observe(FileStorage(store.root)), old, new, where)  # temporaries stay invisible
            count("file: process kills")
            kept, chosen = self._keep(kept, chosen, where)
        return kept

    def _keep(self, kept: tuple[str, Any], chosen: int, where: str) -> tuple[tuple[str, Any], int]:
        if chosen == 0:
            root = self._new_root()
            shutil.copytree(self.scratch, root)
            return (where, FileStorage(root)), -1
        return kept, chosen - 1


@pytest.mark.timeout(1800 if DEEP else 300)
def test_commit_protocol_survives_every_crash_and_fault_in_memory():
    run_state_machine_as_test(MemoryCommitMachine, settings=SETTINGS)
    assert EXERCISED["memory: power cuts"] > 0 and EXERCISED["memory: ENOSPC/EIO faults"] > 0


@pytest.mark.timeout(3600 if DEEP else 300)
def test_commit_protocol_survives_every_fault_and_kill_on_the_file_system(tmp_path):
    FileCommitMachine.base_dir = str(tmp_path)
    run_state_machine_as_test(FileCommitMachine, settings=SETTINGS)
    assert EXERCISED["file: process kills"] > 0 and EXERCISED["file: EIO at os.fsync"] > 0


def test_report_what_was_exercised(capsys):
    """Not a check: prints the counts docs/reliability.md quotes (run with -s to see them)."""
    with capsys.disabled():
        if os.environ.get("NNX_REPORT") == "1":
            for kind, n in sorted(EXERCISED.items()):
                print(f"{kind}: {n}")


@pytest.mark.parametrize("store", ["memory", "file"])
def test_a_blob_is_hashed_once_per_commit(store, tmp_path, monkeypatch):
    """put_blob hashes the payload for its address; the store reuses that digest for its receipt."""
    import hashlib

    storage = MemoryStorage() if store == "memory" else FileStorage(tmp_path / "store")
    payload = b"P" * 4096
    real = hashlib.sha256
    sizes: list[int] = []

    def counting(data: bytes = b"", *args: Any, **kwargs: Any) -> Any:
        sizes.append(len(memoryview(data).cast("B")))
        return real(data, *args, **kwargs)

    monkeypatch.setattr(hashlib, "sha256", counting)
    Plan(epoch=0, payload=payload, snapshot=None, history=b"h\n", previous_history=None, tags=(), rows=()).run(storage)
    assert sizes.count(len(payload)) == 1
