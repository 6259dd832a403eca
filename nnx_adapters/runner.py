"""The ``Runner`` of background commits (``nnx_core.background``): one worker thread.

The commits of one writer run one after another on a worker thread of its own ("nnx-commit"),
started with the first commit. Handing a commit over is a queue put: starting a thread per commit
blocked the training thread until the new thread had taken the GIL, 0.25 ms typically and several
ms when the commit's first Python work held it. ``close`` ends the worker at the end of a call; a
worker left without work for ``idle_s`` ends by itself, and the next commit starts another.

The worker is a daemon: a process that exits (or is killed) while a commit is in flight leaves the
run as a crash at that instant would, which the commit protocol makes safe. NNx itself waits for
the commit in flight before ``train()`` returns or raises, Ctrl-C included.
"""

from __future__ import annotations

import queue
import sys
import threading
from collections.abc import Callable


class ThreadRun:
    """One commit handed to the worker (``nnx_core.background.Pending``)."""

    def __init__(self) -> None:
        self.ended = threading.Event()  # set when the work returns (waited on instead of Thread.join,
        # whose state a KeyboardInterrupt inside it can leave saying "ended" while the thread still runs)

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
    """Runs background commits in order on one worker thread (``nnx_core.background.Runner``;
    module docstring)."""

    def __init__(self, idle_s: float = 30.0) -> None:
        self.idle_s = idle_s
        self._queue: queue.SimpleQueue[tuple[Callable[[], None], ThreadRun] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()  # the worker's life: started, or ended with nothing queued
        self._worker: threading.Thread | None = None

    def start(self, work: Callable[[], None]) -> ThreadRun:
        """Queue ``work`` for the worker (started when there is none)."""
        run = ThreadRun()
        with self._lock:
            self._queue.put((work, run))
            if self._worker is None or not self._worker.is_alive():
                self._worker = threading.Thread(target=self._serve, name="nnx-commit", daemon=True)
                self._worker.start()
        return run

    def close(self) -> None:
        """End the worker once the work queued before has run (the end of a call: nothing is)."""
        with self._lock:
            worker, self._worker = self._worker, None
            if worker is not None:
                self._queue.put(None)
        if worker is not None and worker is not threading.current_thread():
            worker.join()

    def _serve(self) -> None:
        me = threading.current_thread()
        while True:
            try:
                item = self._queue.get(timeout=self.idle_s)
            except queue.Empty:
                with self._lock:  # idle: end, unless work came meanwhile
                    if self._queue.empty():
                        if self._worker is me:
                            self._worker = None
                        return
                continue
            if item is None:  # close()
                return
            work, run = item
            try:
                work()
            finally:
                run.ended.set()
