"""The ``Runner`` of background commits (``nnx_core.background``): one thread per commit.

A commit's thread is a daemon: a process that exits (or is killed) while a commit is in flight
leaves the run as a crash at that instant would, which the commit protocol makes safe. NNx itself
waits for the commit in flight before ``train()`` returns or raises.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class ThreadRun:
    """One commit's thread (``nnx_core.background.Pending``)."""

    def __init__(self, work: Callable[[], None]) -> None:
        self.thread = threading.Thread(target=work, name="nnx-commit", daemon=True)
        self.thread.start()

    def done(self) -> bool:
        """Whether the commit ended."""
        return not self.thread.is_alive()

    def wait(self) -> None:
        """Wait until the commit ends (a signal handler's exception, Ctrl-C, still interrupts it)."""
        while self.thread.is_alive():
            self.thread.join(0.5)  # a bounded join: the main thread stays interruptible


class ThreadRunner:
    """Runs each background commit on a thread of its own (``nnx_core.background.Runner``)."""

    def start(self, work: Callable[[], None]) -> ThreadRun:
        """Start ``work`` on a new daemon thread."""
        return ThreadRun(work)
