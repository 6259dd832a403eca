"""``ThreadRunner``: a background commit runs on its own thread, and Ctrl-C while the training
thread waits for it is raised only once the commit has ended (never a half-abandoned write in a
live process)."""

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
    try:
        run = ThreadRunner().start(commit)
        with pytest.raises(KeyboardInterrupt):
            run.wait()
    finally:
        signal.signal(signal.SIGINT, previous)
    assert steps == ["written"] and run.done()
    assert "finishing the commit in flight" in stderr.getvalue()
