"""``ThreadRunner``: background commits run in order on one worker thread of their own, which
``close`` (or idleness) ends; Ctrl-C while the training thread waits for a commit is raised only
once the commit has ended (never a half-abandoned write in a live process)."""

from __future__ import annotations

import io
import os
import signal
import sys
import threading
import time

import pytest

from nnx_adapters.runner import ThreadRunner


def test_the_work_runs_on_its_own_thread_and_wait_returns_when_it_ended():
    ran: list[str] = []
    run = ThreadRunner().start(lambda: ran.append(threading.current_thread().name))
    run.wait()
    assert ran == ["nnx-commit"] and run.done()


def _workers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "nnx-commit"]


def test_commits_run_in_order_on_one_worker_that_close_ends():
    before = set(_workers())
    runner, ran = ThreadRunner(), []
    release = threading.Event()
    first = runner.start(lambda: (release.wait(30), ran.append(("first", threading.get_ident()))))
    second = runner.start(lambda: ran.append(("second", threading.get_ident())))  # queued behind the first
    assert not second.done()
    release.set()
    second.wait()
    assert first.done() and [name for name, _ in ran] == ["first", "second"]
    assert ran[0][1] == ran[1][1] != threading.get_ident()  # one worker, not a thread per commit
    (worker,) = set(_workers()) - before
    runner.close()
    assert not worker.is_alive()
    runner.start(lambda: ran.append(("third", threading.get_ident()))).wait()  # a new worker after close
    assert ran[-1][1] != threading.get_ident()
    runner.close()
    assert set(_workers()) == before


def test_an_idle_worker_ends_by_itself_and_the_next_commit_starts_another():
    runner = ThreadRunner(idle_s=0.05)
    runner.start(lambda: None).wait()
    (worker,) = [t for t in _workers() if t is runner._worker]
    worker.join(30)  # ends once idle for 0.05 s
    assert not worker.is_alive()
    ran = []
    runner.start(lambda: ran.append(threading.current_thread())).wait()
    assert ran[0] is not worker and ran[0].name == "nnx-commit"
    runner.close()


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="signals reach the main thread")
def test_ctrl_c_while_waiting_is_raised_after_the_commit_ended(monkeypatch):
    said = threading.Event()

    class Stderr(io.StringIO):
        def write(self, text: str) -> int:
            said.set()  # the training thread caught Ctrl-C and said it finishes the commit first
            return super().write(text)

    stderr = Stderr()
    monkeypatch.setattr("sys.stderr", stderr)
    steps: list[str] = []

    main = threading.main_thread().ident

    def waiting() -> bool:  # the training thread is blocked in ThreadRun.wait (in its join)
        frame = sys._current_frames().get(main)
        while frame is not None:
            if frame.f_code.co_name == "wait" and "runner" in frame.f_code.co_filename:
                return True
            frame = frame.f_back
        return False

    def commit() -> None:
        while not waiting():
            time.sleep(0.001)
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C arrives while the training thread waits
        assert said.wait(30)
        steps.append("written")

    # Ctrl-C's own handler, whatever this process inherited (a shell's background job starts with
    # SIGINT ignored, and Python then installs none)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    runner = ThreadRunner()
    try:
        run = runner.start(commit)
        with pytest.raises(KeyboardInterrupt):
            run.wait()
    finally:
        signal.signal(signal.SIGINT, previous)
        runner.close()  # its worker would otherwise wait 30 s idle in this process
    assert steps == ["written"] and run.done()
    assert "finishing the commit in flight" in stderr.getvalue()
