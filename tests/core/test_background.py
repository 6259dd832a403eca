"""Background commits (``nnx_core.background.BackgroundCommits``): the order it owns, on fakes.

Torch-free, like all of ``tests/core`` (``make core-check`` runs it without torch): the store is
``MemoryStorage`` (crash injection: ``fail_on``), the writer ``HeldRunner`` (the work runs when the
test says, or when training waits for it), and once ``ThreadRunner`` (a real thread).

Oracle: the module docstring. Nothing is written until the held work runs; at most one commit is
in flight (a submit waits for the one before, whose ``durable`` ran before the next starts); a
failed commit's error is kept (``failed``), raised once by the next ``submit``/``wait``/``drain``
(then ``take()`` is None), its ``durable`` never runs and nothing of the next commit is written;
``waits`` counts the commit points that found the previous commit still running.
"""

from __future__ import annotations

import errno
import threading
from typing import Any

import pytest

from nnx_core.background import BackgroundCommits
from nnx_core.commit import BEST, FIRST, LAST, EpochCommit, RunFiles, TagManifest, commit_epoch
from nnx_core.eager_history import EagerHistory
from nnx_core.ports import BackgroundProducer
from nnx_adapters.runner import ThreadRunner
from nnx_adapters.storage.memory import MemoryStorage
from nnx_adapters.testing.commit import RUN_ID, epoch_rows
from nnx_adapters.testing.runner import Held, HeldRunner

ROWS = [epoch_rows(e, 2 * e, 2, improved=e % 2 == 0) for e in range(4)]  # epoch e's records


def admitted() -> tuple[MemoryStorage, RunFiles]:
    store = MemoryStorage()
    store.write(f"{RUN_ID}/run.yaml", b"id: " + RUN_ID.encode() + b"\n")
    return store, RunFiles(store, RUN_ID)


def staged(epoch: int, payload: Any = None) -> EpochCommit:
    """Epoch ``epoch``'s commit: its own payload (unless given), the history of epochs 0..epoch,
    FIRST at 0, BEST at even epochs."""
    tags = ((FIRST,) if epoch == 0 else ()) + ((BEST,) if epoch % 2 == 0 else ())
    history = EagerHistory([r for rows in ROWS[: epoch + 1] for r in rows]).render()
    payload = b"state of epoch %d" % epoch if payload is None else payload
    return EpochCommit(epoch=epoch, payload=payload, history=history, tags=tags)


def ops_of_one_commit() -> int:
    """How many primitive operations epoch 0's commit makes on a fresh run (the failure points below)."""
    store, files = admitted()
    start = store.count_ops()
    commit_epoch(files, staged(0))
    return store.count_ops() - start


N_OPS = ops_of_one_commit()


def injected(k: int) -> OSError:
    code = (errno.ENOSPC, errno.EIO)[k % 2]
    return OSError(code, f"injected {errno.errorcode[code]} at op {k}")


def last_epoch(files: RunFiles) -> int | None:
    last = files.read_tag(LAST)
    return None if last is None else last.epoch


# -- nothing is written until the held work runs ---------------------------------------------------


def test_nothing_is_written_until_the_held_work_runs():
    store, files = admitted()
    runner = HeldRunner()
    background = BackgroundCommits(files, runner)
    before, ops = store.snapshot(include_temporaries=True), store.count_ops()
    durable: list[TagManifest] = []
    background.submit(staged(0), durable.append)
    assert store.count_ops() == ops and store.snapshot(include_temporaries=True) == before
    assert background.in_flight and background.submitted == 1 and not background.failed and durable == []
    assert len(runner.started) == 1 and not runner.started[0].done()

    runner.started[0].run()  # the writer's turn
    assert [m.epoch for m in durable] == [0] and durable[0].tag == LAST
    assert last_epoch(files) == 0 and files.read_blob(files.read_tag(LAST).blobs["state"]) == b"state of epoch 0"
    assert {t: files.read_tag(t).epoch for t in files.tags()} == {LAST: 0, FIRST: 0, BEST: 0}
    background.drain()  # already done: nothing to wait for, nothing to raise
    assert not background.in_flight and background.waits == 0


# -- at most one in flight ---------------------------------------------------------------------------


class Watching(HeldRunner):
    """A ``HeldRunner`` noting, at each start, the LAST readers see and the durable callbacks that ran."""

    def __init__(self, files: RunFiles, events: list[str]) -> None:
        super().__init__()
        self.files, self.events = files, events

    def start(self, work: Any) -> Held:
        self.events.append(f"start {len(self.started)} (LAST {last_epoch(self.files)})")
        return super().start(work)


def test_a_submit_runs_the_commit_in_flight_and_its_durable_before_it_starts_the_next():
    store, files = admitted()
    events: list[str] = []
    runner = Watching(files, events)
    background = BackgroundCommits(files, runner)
    for epoch in range(3):
        background.submit(staged(epoch), lambda m: events.append(f"durable {m.epoch}"))
        assert len(runner.held()) == 1  # only the one just submitted is held: the one before it ran
    assert events == ["start 0 (LAST None)", "durable 0", "start 1 (LAST 0)", "durable 1", "start 2 (LAST 1)"]
    assert runner.peak == 1 and background.submitted == 3
    background.drain()
    assert events[-1] == "durable 2" and last_epoch(files) == 2 and runner.held() == []


def test_each_commit_point_that_finds_the_previous_commit_running_counts_one_wait():
    store, files = admitted()
    runner = HeldRunner()
    background = BackgroundCommits(files, runner)
    background.submit(staged(0))
    assert background.waits == 0  # nothing was in flight
    runner.started[-1].run()  # the writer finished before the next commit point
    background.submit(staged(1))
    assert background.waits == 0  # it found the previous commit done
    background.submit(staged(2))  # epoch 1 still held: this commit point waits for it
    assert background.waits == 1 and runner.started[1].done()
    background.commit_point()  # the writer's commit point (``RunWriter.write``) waits before staging
    background.submit(staged(3))  # ... and the submit after it finds nothing in flight
    assert background.waits == 2 and background.submitted == 4
    runner.started[-1].run()
    background.drain()
    assert background.waits == 2 and last_epoch(files) == 3


def test_draining_at_the_end_of_the_call_is_not_a_commit_point_wait():
    store, files = admitted()
    background = BackgroundCommits(files, HeldRunner())
    background.submit(staged(0))
    background.drain()  # the last commit still running at the end of the call
    assert last_epoch(files) == 0
    assert background.waits == 0


# -- a failure is kept, raised once, and stops the next commit --------------------------------------


@pytest.mark.parametrize("k", range(1, N_OPS + 1))
@pytest.mark.parametrize("raised_by", ["submit", "wait", "drain"])
def test_a_failed_commit_is_kept_raised_once_and_writes_nothing_of_the_next(k, raised_by):
    store, files = admitted()
    runner = HeldRunner()
    background = BackgroundCommits(files, runner)
    durable: list[TagManifest] = []
    background.submit(staged(0), durable.append)
    error = injected(k)
    store.fail_on(k, error)
    runner.started[0].run()  # the writer's commit fails at op k; the work itself never raises
    assert background.failed and durable == []  # kept for the training thread; not durable
    assert background.failed  # reading it does not consume it
    held = store.snapshot(include_temporaries=True), store.count_ops()
    assert store.temporaries("") == []  # the failed call cleaned up its temporary

    with pytest.raises(OSError) as caught:
        if raised_by == "submit":
            background.submit(staged(1), durable.append)
        elif raised_by == "wait":
            background.wait()
        else:
            background.drain()
    assert caught.value is error  # the very error the store raised
    assert not background.failed and background.take() is None  # raised once
    background.wait()
    background.drain()  # nothing more to raise
    assert len(runner.started) == 1 and background.submitted == 1  # nothing of epoch 1 was started
    assert (store.snapshot(include_temporaries=True), store.count_ops()) == held  # ... or written
    assert durable == []
    assert last_epoch(files) in (None, 0)  # the failure may come after LAST (tags, fsyncs): never epoch 1

    background.submit(staged(1), durable.append)  # the error was reported: the writer goes on
    background.drain()
    assert [m.epoch for m in durable] == [1] and last_epoch(files) == 1


def test_take_hands_over_the_kept_failure_once_at_an_update_boundary():
    store, files = admitted()
    runner = HeldRunner()
    background = BackgroundCommits(files, runner)
    background.submit(staged(0))
    assert not background.failed and background.take() is None  # in flight, not failed
    error = injected(1)
    store.fail_on(1, error)
    runner.started[0].run()
    assert background.failed
    assert background.take() is error  # the update boundary stops training with it
    assert not background.failed and background.take() is None
    background.drain()  # taken: not raised again
    assert last_epoch(files) is None


def test_a_failed_durable_callback_is_kept_like_a_failed_write():
    store, files = admitted()
    background = BackgroundCommits(files, HeldRunner())

    def durable(_: TagManifest) -> None:
        raise RuntimeError("the caller's bookkeeping failed")

    background.submit(staged(0), durable)
    with pytest.raises(RuntimeError, match="bookkeeping"):
        background.drain()
    assert last_epoch(files) == 0 and background.take() is None


def test_a_crash_in_the_held_commit_is_kept_and_leaves_the_previous_commit():
    store, files = admitted()
    runner = HeldRunner()
    background = BackgroundCommits(files, runner)
    background.submit(staged(0))
    background.submit(staged(1))  # epoch 0 ran, epoch 1 held
    store.crash_after(3)
    runner.started[1].run()
    assert store.crashed and background.failed
    with pytest.raises(BaseException) as caught:
        background.drain()
    assert type(caught.value).__name__ == "SimulatedCrash"
    assert last_epoch(RunFiles(store.reopen(), RUN_ID)) == 0


# -- an interrupted wait -------------------------------------------------------------------------------


class Interrupted:
    """A commit in flight whose first ``wait`` is interrupted (Ctrl-C while the training thread joins)."""

    def __init__(self, held: Held) -> None:
        self.held, self.interrupted = held, False

    def done(self) -> bool:
        return self.held.done()

    def wait(self) -> None:
        if not self.interrupted:
            self.interrupted = True
            raise KeyboardInterrupt
        self.held.wait()


def test_an_interrupted_wait_keeps_the_commit_in_flight():
    store, files = admitted()
    inner = HeldRunner()

    class Runner:
        def start(self, work: Any) -> Interrupted:
            return Interrupted(inner.start(work))

    background = BackgroundCommits(files, Runner())
    background.submit(staged(0))
    with pytest.raises(KeyboardInterrupt):
        background.wait()
    assert background.in_flight  # epoch 0 is still running
    background.submit(staged(1))  # so this commit point waits for it before it starts epoch 1
    assert inner.peak == 1


# -- a real thread -----------------------------------------------------------------------------------


def test_a_thread_runs_the_commit_and_drain_returns_only_after_last_is_written():
    store, files = admitted()
    runner = ThreadRunner()
    background = BackgroundCommits(files, runner)
    release, producing = threading.Event(), threading.Event()
    writers: list[int] = []

    def payload(sink: Any) -> None:  # the writer blocks inside the blob write until released
        writers.append(threading.get_ident())
        producing.set()
        assert release.wait(10)
        sink.write(b"state of epoch 0")

    durable: list[int] = []
    background.submit(staged(0, payload=payload), lambda m: durable.append(threading.get_ident()))
    assert producing.wait(10)  # the commit runs on its own thread while submit has returned
    assert background.in_flight and not store.exists(files.tag_path(LAST)) and durable == []
    timer = threading.Timer(0.2, release.set)  # released while the training thread is already draining
    timer.start()
    background.drain()
    assert release.is_set() and last_epoch(files) == 0  # drain returned after LAST was written
    assert files.read_blob(files.read_tag(LAST).blobs["state"]) == b"state of epoch 0"
    assert writers and writers == durable and writers[0] != threading.get_ident()
    assert not background.in_flight and background.waits == 0  # the end of the call is not a commit point
    timer.join()
    runner.close()


def test_a_thread_commit_failure_is_raised_by_drain():
    store, files = admitted()
    runner = ThreadRunner()
    background = BackgroundCommits(files, runner)
    error = injected(2)
    store.fail_on(4, error)
    background.submit(staged(0))
    with pytest.raises(OSError) as caught:
        background.drain()
    assert caught.value is error and background.take() is None and last_epoch(files) is None
    runner.close()


def test_the_writer_hands_the_store_a_background_producer_and_a_synchronous_commit_does_not():
    """A background commit's blob producer is a ``BackgroundProducer`` (a store may write it with
    the least of the machine); the same producer is written with the same bytes."""
    seen: list[Any] = []

    class Spying(MemoryStorage):
        def write_blob(self, folder: str, produce: Any) -> Any:
            seen.append(produce)
            return super().write_blob(folder, produce)

    def produce(sink: Any) -> None:
        sink.write(b"streamed state")

    refs = []
    for background in (True, False):
        store = Spying()
        store.write(f"{RUN_ID}/run.yaml", b"id: " + RUN_ID.encode() + b"\n")
        files = RunFiles(store, RUN_ID)
        commit = EpochCommit(epoch=0, payload=produce, history=staged(0).history)
        if background:
            writer = BackgroundCommits(files, HeldRunner())
            writer.submit(commit)
            writer.drain()
        else:
            commit_epoch(files, commit)
        refs.append(files.read_tag(LAST).blobs["state"])
    assert isinstance(seen[0], BackgroundProducer) and seen[0].produce is produce
    assert seen[1] is produce and refs[0] == refs[1]
