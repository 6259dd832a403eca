"""The ``Runner`` of background commits (``nnx_core.background``): one thread per commit.

A commit's thread is a daemon: a process that exits (or is killed) while a commit is in flight
leaves the run as a crash at that instant would, which the commit protocol makes safe. NNx itself
waits for the commit in flight before ``train()`` returns or raises, Ctrl-C included.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable


class ThreadRun:
    """One commit's thread (``nnx_core.background.Pending``)."""

    def __init__(self, work: Callable[[], None]) -> None:
        self.ended = threading.Event()  # set when the work returns (waited on instead of Thread.join,
        # whose state a KeyboardInterrupt inside it can leave saying "ended" while the thread still runs)

        def run() -> None:
            try:
                work()
            finally:
                self.ended.set()

        self.thread = threading.Thread(target=run, name="nnx-commit", daemon=True)
        self.thread.start()

    def done(self) -> bool:
        """Whether the commit ended."""
        return self.ended.is_set()

    def wait(self) -> None:
        """Wait until the commit ends. Ctrl-C (any exception a signal handler raises) while waiting
        is raised once the commit has ended: what a started commit writes is finished, never
        abandoned by a live process (a killed one leaves it as a crash does)."""
        interrupted: BaseException | None = None
        while True:
            try:
                if self.ended.wait(0.5):  # a bounded wait: a signal's handler runs meanwhile
                    break
            except BaseException as exc:  # KeyboardInterrupt: said once, raised after the write
                if interrupted is None:
                    print("NNx: finishing the commit in flight before stopping (kill the process to abandon it; "
                          "the run stays resumable)", file=sys.stderr, flush=True)
                interrupted = exc
        if interrupted is not None:
            raise interrupted


class ThreadRunner:
    """Runs each background commit on a thread of its own (``nnx_core.background.Runner``)."""

    def start(self, work: Callable[[], None]) -> ThreadRun:
        """Start ``work`` on a new daemon thread."""
        return ThreadRun(work)
