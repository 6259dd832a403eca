"""The epoch commit protocol with a history journal, under every crash and every fault.

The commit state machine of ``test_commit_machine.py``, with the journal as the "run history"
step: a writer (``nnx_core.journal.JournalWriter``, a small random ``retention`` and chunk size so
chunks split epochs and the window evicts) commits epochs through ``commit_epoch`` (a fake payload,
phase tags, BEST, the attempt record). Before each commit becomes the new state, the same commit
is replayed from the current state — by an exact copy of the live writer over a copy of the store —
once per failure point:

* a power cut after every single primitive operation of ``MemoryStorage`` in turn, with and
  without the metadata journal flushed (``crash_after(k, metadata_flushed=...)``), then ``reopen()``;
* ENOSPC / EIO at every operation (``fail_on(k, error)``).

After each one a reader (``JournalReader`` at LAST's epoch) must see a committed state: loading
never raises (no ``HistoryCorruptionError``), every chunk verifies, the records are exactly those of
epochs ``0..LAST`` (the old or the new state; a manifest published before a crash that LAST never
followed is an ignored tail), one summary row per committed epoch, tags ≤ LAST. Then a restarted
writer opens the survivor: it cuts the uncommitted tail (the manifest ends at LAST, index.jsonl
and epochs.jsonl are exactly the published lengths, no chunk file beyond the manifest), the reader
still sees the same state, and its window is the last ``retention`` committed records. Hypothesis
continues from one outcome, as a restarted writer does, and commits the next epoch.

``NNX_DEEP=1`` runs 300 examples instead of 25.
"""

from __future__ import annotations

import copy
import errno
import hashlib
import os
import attrs
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

from nnx_adapters.storage.paths import TMP_PREFIX
from nnx_adapters.storage.memory import MemoryStorage, SimulatedCrash
from nnx_core.commit import BEST, LAST, EpochCommit, RunFiles, commit_epoch, phase_tags
from nnx_core.journal import (
    HistoryJournal,
    JournalFiles,
    JournalReader,
    JournalWriter,
    encode_record,
    epoch_summary,
)
from nnx_core.records import EvaluationDataPoint, IterationDataPoint, MonitorRecord

DEEP = os.environ.get("NNX_DEEP") == "1"
SETTINGS = settings(
    max_examples=300 if DEEP else 25,
    stateful_step_count=8 if DEEP else 4,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
RUN_ID = "10a7" + "0" * 28
N_EPOCHS = 8
EXERCISED: dict[str, int] = {}


def count(kind: str) -> None:
    EXERCISED[kind] = EXERCISED.get(kind, 0) + 1


# -- what readers see -------------------------------------------------------------------------


@attrs.frozen
class View:
    """LAST's epoch, the visible records (as their stored JSON lines: NaN compares equal), tag → (epoch, blob)."""

    last: int | None
    rows: tuple[bytes, ...]
    tags: dict[str, tuple[int, str]]


def observe(storage: MemoryStorage) -> View:
    """Read the run as a reader does and check the read rules; raises if anything is off."""
    assert [p for p in storage.snapshot() if TMP_PREFIX in p] == []
    files = RunFiles(storage, RUN_ID)
    last = files.read_tag(LAST)
    last_epoch = None if last is None else last.epoch
    reader = JournalReader.open(storage, RUN_ID, last_epoch)
    if reader is None:
        assert last is None, "LAST committed without a journal manifest"
        rows: tuple[IterationDataPoint, ...] = ()
    else:
        rows = tuple(reader)  # every chunk SHA-256-verified, the index chain checked
        summaries = reader.epoch_rows()
        by_epoch: dict[int, list[IterationDataPoint]] = {}
        for r in rows:
            by_epoch.setdefault(r.epoch_idx, []).append(r)
        assert summaries == [epoch_summary(by_epoch[e]) for e in sorted(by_epoch)]
        assert len(reader) == len(rows)
    tags = {}
    for tag in files.tags():
        manifest = files.read_tag(tag)
        assert manifest is not None and last is not None and manifest.epoch <= last.epoch, (tag, manifest, last)
        for ref in manifest.blobs.values():
            files.read_blob(ref, verify=True)
        tags[tag] = (manifest.epoch, manifest.blobs["state"].sha256)
    expected_epochs = [] if last is None else list(range(last.epoch + 1))
    assert sorted({r.epoch_idx for r in rows}) == expected_epochs
    assert [r.iter_idx for r in rows] == list(range(len(rows)))
    return View(last_epoch, tuple(encode_record(r) for r in rows), tags)


def check_outcome(view: View, old: View, new: View, where: str) -> None:
    """Exactly the old committed state, or the new one (tags: each its old or new value)."""
    assert view.last in (old.last, new.last), f"{where}: LAST is {view.last}, not {old.last} or {new.last}"
    if view.last == new.last:
        assert view.rows == new.rows, where
        for tag in set(view.tags) | set(new.tags):
            assert view.tags.get(tag) in (old.tags.get(tag), new.tags.get(tag)), f"{where}: tag {tag}"
    else:
        assert view == old, where


def check_reopened(storage: MemoryStorage, view: View, spec: HistoryJournal, where: str) -> JournalWriter:
    """A restarted writer cuts the uncommitted tail and holds the last ``retention`` records."""
    storage.clean_temporaries("")
    writer = JournalWriter(storage, RUN_ID, spec, last_epoch=view.last)
    assert observe(storage) == view, f"{where}: reopening changed what readers see"
    files = JournalFiles(RUN_ID)
    m = writer.manifest
    assert m.last_epoch == view.last and m.records == len(view.rows), where
    snap = storage.snapshot()
    assert len(snap.get(files.index, b"")) == m.index_bytes, f"{where}: unpublished index bytes kept"
    assert len(snap.get(files.epochs, b"")) == m.epochs_bytes, f"{where}: unpublished epoch rows kept"
    chunks = sorted(p for p in snap if p.startswith(files.folder + "/chunk-"))
    assert chunks == [files.chunk(i) for i in range(m.chunks)], f"{where}: chunks no manifest names remain"
    assert [encode_record(r) for r in writer.idps] == list(view.rows[-spec.retention :]), where
    assert len(writer.window) <= spec.retention
    return writer


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
                train_edp=EvaluationDataPoint(loss=loss if i != 1 else float("nan"), count=4),
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
    epoch: int
    payload: bytes
    tags: tuple[str, ...]
    rows: tuple[IterationDataPoint, ...]

    def run(self, storage: MemoryStorage, writer: JournalWriter) -> None:
        """The writer's commit step, as the training session does it with a journal."""
        files = RunFiles(storage, RUN_ID)
        writer.extend(self.rows)
        commit_epoch(
            files,
            EpochCommit(epoch=self.epoch, payload=self.payload, history_step=writer, tags=self.tags, meta={}),
        )
        assert len(writer.window) <= writer.spec.retention

    def expected(self, old: View) -> View:
        sha = hashlib.sha256(self.payload).hexdigest()
        tags = dict(old.tags)
        for tag in (LAST, *self.tags):
            tags[tag] = (self.epoch, sha)
        return View(self.epoch, old.rows + tuple(encode_record(r) for r in self.rows), tags)


def writer_copy(writer: JournalWriter, storage: MemoryStorage) -> JournalWriter:
    """An exact copy of the live writer (window, counters, previous manifest) over ``storage``."""
    original, writer.storage = writer.storage, None  # type: ignore[assignment]
    try:
        twin = copy.deepcopy(writer)
    finally:
        writer.storage = original
    twin.storage = storage
    return twin


# -- the machine ----------------------------------------------------------------------------------


class JournalMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.storage: MemoryStorage = MemoryStorage()
        self.view = View(None, (), {})
        self.spec = HistoryJournal()
        self.writer: JournalWriter | None = None

    @initialize(retention=st.integers(1, 6), chunk=st.integers(1, 6))
    def admit(self, retention: int, chunk: int) -> None:
        self.spec = HistoryJournal(retention=retention, chunk_size=min(chunk, retention))
        self.storage.write(f"{RUN_ID}/run.yaml", b"id: " + RUN_ID.encode() + b"\n")
        self.writer = JournalWriter(self.storage, RUN_ID, self.spec, last_epoch=None)

    def clone(self) -> MemoryStorage:
        copy_ = self.storage.reopen()  # between commits everything is durable: an exact copy
        assert copy_.snapshot(include_temporaries=True) == self.storage.snapshot(include_temporaries=True)
        return copy_

    @rule(
        payload=st.integers(0, 2),
        n_rows=st.integers(1, 5),
        improved=st.booleans(),
        outcome=st.floats(0, 1),
        take=st.sampled_from(["complete", "failure", "failure"]),
    )
    def commit(self, payload: int, n_rows: int, improved: bool, outcome: float, take: str) -> None:
        assert self.writer is not None
        old = self.view
        epoch = 0 if old.last is None else old.last + 1
        plan = Plan(
            epoch=epoch,
            payload=b"NNX-FAKE-PAYLOAD:" + bytes([payload]) * 64,
            tags=(*phase_tags(epoch, N_EPOCHS), *((BEST,) if improved else ())),
            rows=tuple(epoch_rows(epoch, len(old.rows), n_rows, improved)),
        )
        new = plan.expected(old)
        probe = self.clone()
        probe_writer = writer_copy(self.writer, probe)
        start = probe.count_ops()
        plan.run(probe, probe_writer)
        n_ops = probe.count_ops() - start
        trials = [("crash", k, flushed) for flushed in (False, True) for k in range(1, n_ops + 1)]
        trials += [("fault", k, None) for k in range(1, n_ops + 1)]
        chosen = min(int(outcome * len(trials)), len(trials) - 1)
        kept: tuple[str, MemoryStorage, View] | None = None
        for i, (kind, k, flushed) in enumerate(trials):
            store = self.clone()
            twin = writer_copy(self.writer, store)
            if kind == "crash":
                store.crash_after(k, metadata_flushed=bool(flushed))
                with pytest.raises(SimulatedCrash):
                    plan.run(store, twin)
                store = store.reopen()
                where = f"power cut after op {k}/{n_ops} (metadata_flushed={flushed}) committing epoch {epoch}"
                count("power cuts" + (" (metadata flushed)" if flushed else ""))
            else:
                code = (errno.ENOSPC, errno.EIO)[k % 2]
                injected = OSError(code, f"injected {errno.errorcode[code]}")
                store.fail_on(k, injected)
                with pytest.raises(OSError) as raised:
                    plan.run(store, twin)
                where = f"{errno.errorcode[code]} at op {k}/{n_ops} committing epoch {epoch}"
                assert raised.value is injected, f"{where}: {raised.value!r} surfaced instead"
                assert [p for p in store.snapshot(include_temporaries=True) if TMP_PREFIX in p] == [], where
                store = store.reopen()  # the failed process exits; what it left visible is durable
                count("ENOSPC/EIO faults")
            view = observe(store)
            check_outcome(view, old, new, where)
            check_reopened(store, view, self.spec, where)
            if i == chosen:
                kept = (where, store, view)
        if take == "complete" or kept is None:  # the live writer goes on after its commit
            self.storage, self.writer, self.view = probe, probe_writer, observe(probe)
            assert self.view == new
            return
        _, store, view = kept
        self.storage, self.view = store, view
        self.writer = JournalWriter(store, RUN_ID, self.spec, last_epoch=view.last)  # a restarted writer
        count("continued after a failure")

    @rule(retention=st.integers(1, 6), chunk=st.integers(1, 6))
    def restart_writer(self, retention: int, chunk: int) -> None:
        """A continuation may change the spec; the journal reopens cleanly either way."""
        self.spec = HistoryJournal(retention=retention, chunk_size=min(chunk, retention))
        self.writer = check_reopened(self.storage, self.view, self.spec, "restart")

    @invariant()
    def readers_see_the_committed_state(self) -> None:
        if self.writer is not None:
            assert observe(self.storage) == self.view


def test_journal_commits_survive_every_crash_and_fault():
    run_state_machine_as_test(JournalMachine, settings=SETTINGS)
    assert EXERCISED["power cuts"] > 0 and EXERCISED["power cuts (metadata flushed)"] > 0
    assert EXERCISED["ENOSPC/EIO faults"] > 0


def test_report_what_was_exercised(capsys):
    """Not a check: prints how many trials ran (``NNX_REPORT=1 pytest -s``)."""
    with capsys.disabled():
        if os.environ.get("NNX_REPORT") == "1":
            for kind, n in sorted(EXERCISED.items()):
                print(f"journal {kind}: {n}")
