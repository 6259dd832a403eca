"""``CommitContract`` / ``JournalContract``: the epoch commit protocol over an adapter, under failures.

The machine plays a writer committing epochs through ``nnx_core.commit.commit_epoch`` (a small
payload, bytes or streamed through ``write_blob``; phase tags, BEST, a deferred callback tag —
the attempt record is written only when an attempt starts and ends, not per commit), with an eager
``idps.csv`` history (``CommitContract``: replaced whole by a restarted writer's first commit,
appended after a commit of its own) or a history
journal with a small random retention and chunk size (``JournalContract``). Before each commit
becomes the new state, it is replayed from the current state once per failure point:

* **any adapter** (``PortFaults``): the writer killed before each of its port calls in turn,
  and each port call failing with ENOSPC / EIO in turn (skipped where crash injection runs:
  it subsumes them);
* **adapters offering crash injection** (``CrashInjection``, as ``MemoryStorage`` does): a power
  cut after every primitive operation in turn, with and without the file system's metadata
  flushed, then ``reopen()``; and ENOSPC / EIO at every primitive operation — this is what shows
  that ``write`` itself is atomic and durable;
* whatever ``adapter_trials`` adds (the project adds OS-level faults for ``FileStorage``).

``CommitContract`` also replaces the whole run (``overwrite_existing=True``; ``nnx_core.replacement``):
the committed run moved aside, a fresh run admitted, its first epoch committed, the old run
retired — failed at every point the same way. Readers must then see exactly the old committed
state or the replacement's first epoch (nothing between, and tags only of the one they see), and
a restarted writer's first step (``replacement.settle``) must leave what readers see unchanged and
no folder aside.

After each one, what a reader loads must be a committed state: loading never raises (not even
``CorruptRunError``); LAST names the previous or the new epoch; history as readers see it holds
exactly the records of epochs up to LAST (history ≤ LAST); BEST, the phase tags and the callback
tag name epochs ≤ LAST, each its old or its new value; every blob a tag names verifies against its
SHA-256 (``digest`` and ``read``); no temporary is visible. An injected error must surface as the
very error injected and leave no temporary behind. A restarted writer then cleans stale
temporaries (none remain) and — for the journal — cuts the uncommitted tail (manifest at LAST,
index/epoch rows at their published lengths, no chunk beyond the manifest, the window is the last
``retention`` records). Hypothesis continues from one outcome and commits the next epoch.

Subclass with a factory, as for ``StorageContract``::

    class TestMyCommits(CommitContract):
        def make_storage(self):
            return MyStorage(...)

``copy_storage`` (default: every visible file copied through the port into ``make_storage()``)
gives each trial its own copy of the current state; override it when your store copies faster.
"""

from __future__ import annotations

import collections
import copy
import errno
import hashlib
from collections.abc import Callable
from typing import Any

import attrs
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from nnx_core import replacement
from nnx_core.commit import (
    BEST,
    LAST,
    EpochCommit,
    RunFiles,
    TagManifest,
    commit_epoch,
    complete_tags,
    history_cut,
    phase_tags,
    read_history,
)
from nnx_core.eager_history import EagerHistory
from nnx_core.journal import HistoryJournal, JournalWriter
from nnx_core.journal_format import JournalFiles, encode_record, epoch_summary
from nnx_core.journal_reader import JournalReader
from nnx_core.ports import Storage
from nnx_core.records import EvaluationDataPoint, IterationDataPoint, MonitorRecord
from nnx_adapters.storage.paths import TMP_PREFIX
from nnx_adapters.testing.faults import CrashInjection, PortFaults, WriterKilled
from nnx_adapters.testing.model import copy_visible, visible_tree

RUN_ID = "c0ffee" + "0" * 26
N_EPOCHS = 8  # for the phase tags: FIRST at 0, Q1 at 1, Q2 at 3, Q3 at 5
CALLBACK_TAG = "snapshot"
EXERCISED: collections.Counter[str] = collections.Counter()
"""How many trials of each kind ran, per adapter class (``"MemoryStorage: power cuts"``...)."""


# -- what readers see -------------------------------------------------------------------------


@attrs.frozen
class View:
    """A committed state as readers see it: LAST's epoch, the visible records (their stored JSON
    lines, so NaN compares equal) and tag → (epoch, blob SHA-256)."""

    last: int | None
    rows: tuple[bytes, ...]
    tags: dict[str, tuple[int, str]]


def observe(storage: Storage, *, journal: bool) -> View:
    """Load the run as a reader does and check the load rules; raises if anything is off."""
    files_seen, folders_seen = visible_tree(storage)
    shown = [p for p in (*files_seen, *folders_seen) if TMP_PREFIX in p]
    assert shown == [], f"temporaries visible to readers: {shown}"
    files = RunFiles(storage, RUN_ID, replacement.reading_folder(storage, RUN_ID))  # a replaced run: the old one until the new commits
    last = files.read_tag(LAST)  # an empty, torn or mixed LAST raises CorruptRunError
    last_epoch = None if last is None else last.epoch
    if journal:
        in_epoch = history_cut(last)[1]  # a mid-epoch LAST: its first records of its epoch, no summary row for it
        reader = JournalReader.open(storage, RUN_ID, last_epoch, files.root, in_epoch=in_epoch)
        assert reader is not None or last is None, "LAST committed without a journal manifest"
        rows = tuple(reader) if reader is not None else ()  # every chunk verified, the chain checked
        if reader is not None:
            by_epoch: dict[int, list[IterationDataPoint]] = {}
            for r in rows:
                by_epoch.setdefault(r.epoch_idx, []).append(r)
            whole = sorted(e for e in by_epoch if in_epoch is None or e != last_epoch)
            assert reader.epoch_rows() == [epoch_summary(by_epoch[e]) for e in whole], "epoch rows"
    else:
        rows = tuple(read_history(files, last))  # a torn append past LAST's history_bytes is cut off
    tags = {}
    for tag in files.tags():
        manifest = files.read_tag(tag)
        assert manifest is not None and last is not None and manifest.epoch <= last.epoch, (
            f"tag {tag!r} names epoch {None if manifest is None else manifest.epoch}, after LAST ({last_epoch})"
        )
        for ref in manifest.blobs.values():
            files.verify_blob(ref)  # present, right size, right SHA-256 (Storage.digest)
            files.read_blob(ref, verify=True)  # and the bytes read back agree
        tags[tag] = (manifest.epoch, manifest.blobs["state"].sha256)
    assert sorted({r.epoch_idx for r in rows}) == ([] if last is None else list(range(last.epoch + 1))), (
        f"history holds epochs {sorted({r.epoch_idx for r in rows})}, LAST is {last_epoch}"
    )
    assert [r.iter_idx for r in rows] == list(range(len(rows))), "history records missing or repeated"
    return View(last_epoch, tuple(encode_record(r) for r in rows), tags)


def check_outcome(view: View, old: View, new: View, where: str) -> None:
    """After a failure: exactly the old committed state, or the new one (tags: each old or new)."""
    assert view.last in (old.last, new.last), f"{where}: LAST is {view.last}, not {old.last} or {new.last}"
    if view.last == new.last:
        assert view.rows == new.rows, f"{where}: history is not the new epoch's"
        assert view.tags[LAST] == new.tags[LAST], f"{where}: LAST names the wrong blob"
        for tag in set(view.tags) | set(new.tags):
            assert view.tags.get(tag) in (old.tags.get(tag), new.tags.get(tag)), f"{where}: tag {tag} is neither"
    else:
        assert view == old, f"{where}: not the previous committed state: {view} != {old}"


def check_replaced(view: View, old: View, new: View, where: str) -> None:
    """After a failed replacement: exactly the old run, or the new run's first epoch (its LAST and
    history; every tag one of the new run's, none of the old run's left)."""
    if view == old:
        return
    assert view.last == new.last and view.rows == new.rows, f"{where}: neither the old run nor the new one: {view}"
    assert view.tags[LAST] == new.tags[LAST], f"{where}: LAST names the wrong blob"
    for tag, value in view.tags.items():
        assert new.tags.get(tag) == value, f"{where}: tag {tag} is not the new run's"


# -- one epoch's commit -------------------------------------------------------------------------


def epoch_rows(epoch: int, first_iter: int, n_rows: int, improved: bool) -> list[IterationDataPoint]:
    """An epoch's records (a NaN training loss in the second one)."""
    rows = []
    for i in range(n_rows):
        final = i == n_rows - 1
        loss = 1.0 / (1 + epoch) + i / 7
        selection = MonitorRecord(
            metric="loss", split="val", mode="min", value=loss * 1.5, status="ok", improved=improved, best=loss * 1.5
        )
        rows.append(
            IterationDataPoint(
                iter_idx=first_iter + i,
                epoch_idx=epoch,
                batch_idx=i,
                lr=0.1 / (1 + epoch),
                train_edp=EvaluationDataPoint(loss=loss if i != 1 else float("nan"), count=4),
                val_edp=EvaluationDataPoint(loss=loss * 1.5, accuracy=0.5) if final else None,
                selection=selection if final else None,
                update_count=first_iter + i + 1 if final else None,
            )
        )
    return rows


@attrs.frozen
class Plan:
    """Everything one epoch commit writes, and the state it must produce."""

    epoch: int
    payload: bytes
    streamed: bool
    snapshot: bytes | None
    tags: tuple[str, ...]
    old_records: tuple[IterationDataPoint, ...]
    rows: tuple[IterationDataPoint, ...]
    append: bool = False  # the writer committed the previous epoch itself: idps.csv is appended

    def run(self, storage: Storage, writer: JournalWriter | None) -> None:
        """The writer's commit step: ``commit_epoch``."""
        files = RunFiles(storage, RUN_ID)
        deferred: list[Callable[[], None]] = []
        if self.snapshot is not None:
            data, epoch = self.snapshot, self.epoch

            def write_snapshot() -> None:
                ref = files.put_blob(data)
                files.write_tag(TagManifest(tag=CALLBACK_TAG, run_id=RUN_ID, epoch=epoch, blobs={"state": ref}))

            deferred.append(write_snapshot)
        payload: Any = self.payload
        if self.streamed:
            chunks = (self.payload[:7], self.payload[7:])
            payload = lambda sink: [sink.write(c) for c in chunks]  # noqa: E731
        if writer is None:
            history: dict[str, Any] = {
                "history": EagerHistory(self.old_records + self.rows).render(),
                "previous_history": EagerHistory(self.old_records).render() if self.old_records else None,
                "append_history": self.append,
            }
        else:
            writer.storage = storage
            writer.extend(self.rows)
            history = {"history_step": writer}
        commit_epoch(
            files,
            EpochCommit(epoch=self.epoch, payload=payload, tags=self.tags, meta={"records": len(self.rows)},
                        deferred=deferred, **history),
        )

    def expected(self, old: View) -> View:
        """The state a completed commit leaves."""
        sha = hashlib.sha256(self.payload).hexdigest()
        tags = dict(old.tags)
        for tag in (LAST, *self.tags):
            tags[tag] = (self.epoch, sha)
        if self.snapshot is not None:
            tags[CALLBACK_TAG] = (self.epoch, hashlib.sha256(self.snapshot).hexdigest())
        return View(self.epoch, old.rows + tuple(encode_record(r) for r in self.rows), tags)


@attrs.frozen
class Replacement:
    """A whole run replaced: what ``train(overwrite_existing=True)`` writes until its first epoch
    is durable (``nnx_core.replacement``), with ``first`` the new run's first commit."""

    first: Plan
    epoch: int = 0
    at = "2026-01-01T00:00:00+00:00"

    def run(self, storage: Storage, writer: JournalWriter | None) -> None:
        """Settle (nothing pending), move the old run aside, admit the new one, commit, retire."""
        files = RunFiles(storage, RUN_ID)
        replacement.settle(files, at=self.at)
        replacement.begin(files, "a" * 32, self.at)
        storage.write(files.run_yaml, b"id: " + RUN_ID.encode() + b"\n")
        self.first.run(storage, writer)
        replacement.retire(files)

    def expected(self, old: View) -> View:
        """The new run at its first epoch: nothing of the old one."""
        return self.first.expected(View(None, (), {}))


@attrs.frozen
class Outcome:
    """What a failed writer left: the store the next writer finds, the error it saw, the one injected."""

    label: str
    store: Storage
    raised: BaseException | None
    injected: BaseException | None = None  # None: a kill or a power cut (no error to surface)


@attrs.frozen
class Trial:
    """One failure point: ``run()`` replays the commit from a copy of the current state and fails it."""

    label: str
    run: Callable[[], Outcome]


def _raised(call: Callable[[], None]) -> BaseException | None:
    try:
        call()
    except BaseException as exc:  # noqa: BLE001 — the trial reports what the writer saw
        return exc
    return None


def _injected(k: int) -> OSError:
    code = (errno.ENOSPC, errno.EIO)[k % 2]
    return OSError(code, f"injected {errno.errorcode[code]}")


# -- the machines -----------------------------------------------------------------------------


class _CommitMachine(RuleBasedStateMachine):
    journal = False
    port_failures = True
    """Kill the writer before each port call and fail each call. Skipped for a store offering
    crash injection (a power cut after every operation subsumes them); an adapter whose
    ``adapter_trials`` fail it at a finer grain (every OS call) may turn them off too."""

    def __init__(self) -> None:
        super().__init__()
        self.store: Any = None
        self.view = View(None, (), {})
        self.records: tuple[IterationDataPoint, ...] = ()
        self.appends = False  # the live writer committed the last epoch (a restarted one has not)
        self.spec = HistoryJournal()
        self.writer: JournalWriter | None = None

    # -- the user's hooks ---------------------------------------------------------------------

    def make_storage(self) -> Storage:
        """A fresh, empty store of the adapter under test."""
        raise NotImplementedError(f"subclass {type(self).__name__} and return your adapter from make_storage()")

    def copy_storage(self, store: Storage) -> Storage:
        """An independent store holding what readers of ``store`` see (default: through the port)."""
        target = self.make_storage()
        copy_visible(store, target)
        return target

    def dispose_storage(self, store: Storage) -> None:
        """Forget a store copy that is no longer needed (default: nothing)."""

    def adapter_trials(self, replay: Callable[[Storage], None]) -> list[Trial]:
        """More failure points for this adapter; ``replay(store)`` runs the commit on ``store``."""
        return []

    # -- set-up and the writer ----------------------------------------------------------------

    @initialize(retention=st.integers(1, 6), chunk=st.integers(1, 6))
    def admit(self, retention: int, chunk: int) -> None:
        self.store = self.make_storage()
        self.store.write(f"{RUN_ID}/run.yaml", b"id: " + RUN_ID.encode() + b"\n")
        if self.journal:
            self.spec = HistoryJournal(retention=retention, chunk_size=min(chunk, retention))
            self.writer = JournalWriter(self.store, RUN_ID, self.spec, last_epoch=None)

    def twin(self, store: Storage) -> JournalWriter | None:
        """An exact copy of the live journal writer (window, counters, previous manifest) over ``store``."""
        if self.writer is None:
            return None
        original, self.writer.storage = self.writer.storage, None  # type: ignore[assignment]
        try:
            twin = copy.deepcopy(self.writer)
        finally:
            self.writer.storage = original
        twin.storage = store
        return twin

    def restart(self, store: Storage, view: View, where: str) -> JournalWriter | None:
        """What the next writer does first: clean stale temporaries, finish the tags a crash after
        LAST left behind (readers already saw them as LAST), reopen the journal (checked)."""
        store.clean_temporaries("")
        assert store.temporaries("") == [], f"{where}: temporaries survive clean_temporaries"
        complete_tags(RunFiles(store, RUN_ID))
        if not self.journal:
            assert observe(store, journal=False) == view, f"{where}: cleaning changed what readers see"
            return None
        in_epoch = history_cut(RunFiles(store, RUN_ID).read_tag(LAST))[1]  # a mid-epoch LAST's epoch goes on
        writer = JournalWriter(store, RUN_ID, self.spec, last_epoch=view.last, in_epoch=in_epoch)
        assert observe(store, journal=True) == view, f"{where}: reopening changed what readers see"
        files, m = JournalFiles(RUN_ID), writer.manifest
        assert m.last_epoch == view.last and m.records == len(view.rows), f"{where}: manifest not cut at LAST"
        for path, size in ((files.index, m.index_bytes), (files.epochs, m.epochs_bytes)):
            held = len(store.read(path)) if store.exists(path) else 0
            assert held == size, f"{where}: {path} holds {held} bytes, the manifest publishes {size}"
        chunks = sorted(n for n in store.list(files.folder) if n.startswith("chunk-"))
        assert chunks == [files.chunk_name(i) for i in range(m.chunks)], f"{where}: chunks no manifest names remain"
        assert [encode_record(r) for r in writer.idps] == list(view.rows[-self.spec.retention :]), f"{where}: window"
        return writer

    def check(self, outcome: Outcome, old: View, new: View, *, replaced: bool = False) -> tuple[View, JournalWriter | None]:
        """A failed writer's outcome is a committed state, and a restarted writer continues from it
        (``replaced``: the outcome of a whole-run replacement, which the restarted writer settles first)."""
        where, store = outcome.label, outcome.store
        if outcome.injected is not None:
            assert outcome.raised is outcome.injected, f"{where}: {outcome.raised!r} surfaced instead of the injected error"
            assert store.temporaries("") == [], f"{where}: the failed call left its temporary: {store.temporaries('')}"
        try:
            view = observe(store, journal=self.journal)
        except Exception as exc:  # noqa: BLE001 — reported with the failure point that caused it
            raise AssertionError(f"{where}: readers cannot load a committed state: {exc!r}") from exc
        if replaced:
            check_replaced(view, old, new, where)
            replacement.settle(RunFiles(store, RUN_ID), at=Replacement.at)
            assert store.list(replacement.aside(RUN_ID)) == [], f"{where}: a folder aside survives settling"
        else:
            check_outcome(view, old, new, where)
        return view, self.restart(store, view, where)

    # -- the failure points -------------------------------------------------------------------

    def trials(self, plan: Plan | Replacement) -> list[Trial]:
        """Every failure point of ``plan`` from the current state."""

        def replay(store: Storage) -> None:
            plan.run(store, self.twin(store))

        def port(k: int, *, kill: bool) -> Trial:
            error = _injected(k)
            label = f"{'kill before' if kill else errno.errorcode[error.errno] + ' at'} port call {k} committing epoch {plan.epoch}"

            def run() -> Outcome:
                store = self.copy_storage(self.store)
                proxy = PortFaults(store, kill_at=k) if kill else PortFaults(store, fail_at=(k, error))
                raised = _raised(lambda: replay(proxy))
                assert not kill or isinstance(raised, WriterKilled), f"{label}: the kill was swallowed: {raised!r}"
                EXERCISED[f"{type(store).__name__}: {'port kills' if kill else 'port ENOSPC/EIO'}"] += 1
                return Outcome(label, store, raised, None if kill else error)

            return Trial(label, run)

        found = []
        crashable = isinstance(self.store, CrashInjection)
        if self.port_failures and not crashable:
            probe = PortFaults(self.copy_storage(self.store))
            replay(probe)
            self.dispose_storage(probe.inner)
            found = [port(k, kill=kill) for kill in (True, False) for k in range(1, probe.calls + 1)]
        if crashable:
            found += self.crash_trials(plan, replay)
        return found + self.adapter_trials(replay)

    def crash_trials(self, plan: Plan | Replacement, replay: Callable[[Storage], None]) -> list[Trial]:
        """Power cuts after, and ENOSPC/EIO at, every primitive operation (crash injection)."""
        probe: Any = self.copy_storage(self.store)
        start = probe.count_ops()
        replay(probe)
        n_ops = probe.count_ops() - start
        self.dispose_storage(probe)

        def cut(k: int, flushed: bool) -> Trial:
            label = f"power cut after op {k}/{n_ops} (metadata_flushed={flushed}) committing epoch {plan.epoch}"

            def run() -> Outcome:
                store: Any = self.copy_storage(self.store)
                store.crash_after(k, metadata_flushed=flushed)
                raised = _raised(lambda: replay(store))
                assert store.crashed and raised is not None, f"{label}: the store did not crash"
                EXERCISED[f"{type(store).__name__}: power cuts" + (" (metadata flushed)" if flushed else "")] += 1
                return Outcome(label, store.reopen(), raised)

            return Trial(label, run)

        def fault(k: int) -> Trial:
            error = _injected(k)
            label = f"{errno.errorcode[error.errno]} at op {k}/{n_ops} committing epoch {plan.epoch}"

            def run() -> Outcome:
                store: Any = self.copy_storage(self.store)
                store.fail_on(k, error)
                raised = _raised(lambda: replay(store))
                EXERCISED[f"{type(store).__name__}: ENOSPC/EIO in calls"] += 1
                return Outcome(label, store, raised, error)

            return Trial(label, run)

        return [cut(k, f) for f in (False, True) for k in range(1, n_ops + 1)] + [fault(k) for k in range(1, n_ops + 1)]

    # -- the rules ----------------------------------------------------------------------------

    @rule(
        payload=st.integers(0, 2),
        n_rows=st.integers(1, 4),
        improved=st.booleans(),
        snapshot=st.booleans(),
        streamed=st.booleans(),
        outcome=st.floats(0, 1),
        take=st.sampled_from(["complete", "failure", "failure"]),
    )
    def commit(self, payload: int, n_rows: int, improved: bool, snapshot: bool, streamed: bool, outcome: float, take: str) -> None:
        old = self.view
        epoch = 0 if old.last is None else old.last + 1
        plan = Plan(
            epoch=epoch,
            payload=b"NNX-FAKE-PAYLOAD:" + bytes([payload]) * 96,  # few distinct payloads: blobs get shared
            streamed=streamed,
            snapshot=b"weights:%d" % (epoch % 2) if snapshot else None,
            tags=(*phase_tags(epoch, N_EPOCHS), *((BEST,) if improved else ())),
            old_records=self.records,
            rows=tuple(epoch_rows(epoch, len(self.records), n_rows, improved)),
            append=self.appends,
        )
        new = plan.expected(old)
        trials = self.trials(plan)
        for trial in trials:
            outcome_ = trial.run()
            self.check(outcome_, old, new)
            self.dispose_storage(outcome_.store)
        EXERCISED[f"{type(self.store).__name__}: commits replayed"] += 1
        previous = self.store
        if take == "complete":
            self.store = self.copy_storage(previous)
            writer = self.twin(self.store)
            plan.run(self.store, writer)
            self.writer, self.view = writer, observe(self.store, journal=self.journal)
            assert self.view == new, "the completed commit is not the expected state"
        else:
            chosen = trials[min(int(outcome * len(trials)), len(trials) - 1)].run()
            self.view, self.writer = self.check(chosen, old, new)
            self.store = chosen.store
        self.records = plan.old_records + plan.rows if self.view.last == new.last else plan.old_records
        self.appends = take == "complete"
        self.dispose_storage(previous)

    @precondition(lambda self: not self.journal and self.view.last is not None)
    @rule(
        payload=st.integers(0, 2),
        n_rows=st.integers(1, 4),
        improved=st.booleans(),
        snapshot=st.booleans(),
        outcome=st.floats(0, 1),
        take=st.sampled_from(["complete", "failure", "failure"]),
    )
    def replace(self, payload: int, n_rows: int, improved: bool, snapshot: bool, outcome: float, take: str) -> None:
        """The committed run replaced by a fresh one (``overwrite_existing=True``), up to the new
        run's first commit and the old run's removal, failed at every point."""
        old = self.view
        first = Plan(
            epoch=0, payload=b"NNX-FAKE-PAYLOAD:" + bytes([payload]) * 96, streamed=False,
            snapshot=b"weights:0" if snapshot else None, tags=(*phase_tags(0, N_EPOCHS), *((BEST,) if improved else ())),
            old_records=(), rows=tuple(epoch_rows(0, 0, n_rows, improved)),
        )
        plan = Replacement(first)
        new = plan.expected(old)
        trials = self.trials(plan)
        for trial in trials:
            outcome_ = trial.run()
            self.check(outcome_, old, new, replaced=True)
            self.dispose_storage(outcome_.store)
        EXERCISED[f"{type(self.store).__name__}: replacements replayed"] += 1
        previous = self.store
        if take == "complete":
            self.store = self.copy_storage(previous)
            plan.run(self.store, None)
            self.view = observe(self.store, journal=False)
            assert self.view == new, "the completed replacement is not the new run's first epoch"
        else:
            chosen = trials[min(int(outcome * len(trials)), len(trials) - 1)].run()
            self.view, self.writer = self.check(chosen, old, new, replaced=True)
            self.store = chosen.store
        self.records = first.rows if (self.view.last, self.view.rows) == (new.last, new.rows) else self.records
        self.appends = take == "complete"
        self.dispose_storage(previous)

    @precondition(lambda self: self.journal)
    @rule(retention=st.integers(1, 6), chunk=st.integers(1, 6))
    def restart_writer(self, retention: int, chunk: int) -> None:
        """A continuation may change the journal's spec; the journal reopens cleanly either way."""
        self.spec = HistoryJournal(retention=retention, chunk_size=min(chunk, retention))
        self.writer = self.restart(self.store, self.view, "restart")

    @invariant()
    def readers_see_the_committed_state(self) -> None:
        if self.store is not None:
            assert observe(self.store, journal=self.journal) == self.view

    def teardown(self) -> None:
        if self.store is not None:
            self.dispose_storage(self.store)


class CommitContract(_CommitMachine):
    """The commit protocol with an eager ``idps.csv`` history, under every failure the adapter allows."""

    journal = False


class JournalContract(_CommitMachine):
    """The commit protocol with a history journal, under every failure the adapter allows."""

    journal = True
