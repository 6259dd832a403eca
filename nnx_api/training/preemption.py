"""Preemption: a signal that asks a ``train()`` call to stop cleanly, turned into a flag.

``Preemption`` owns the order of the process's signal handlers around one ``train()`` call
(``NNTrainParams.preempt_signals``, SIGTERM by default). Read it top to bottom:

    Preemption(signals)        nothing yet: no handler changes until the call starts
    __enter__                  on the main thread of the main interpreter only:
        for each signal          the handler there now is kept (SIG_DFL, SIG_IGN, a Python
                                 function, or None for one installed from C), then ours goes in
        off the main thread      nothing is installed and ``active`` is False: preemption needs
                                 ``train()`` on the main thread (Python runs signal handlers there
                                 only, and ``signal.signal`` refuses any other thread)
    a listed signal arrives    our handler records it in ``signal`` — the first one only; a second
                               signal, the same or another, changes nothing. The handler never
                               writes, raises or logs: it may run between any two bytecodes of
                               the training loop, in the middle of a commit
    the session's next update boundary   reads ``requested``: commits LAST and raises
                               ``TrainingPreempted`` naming ``name`` (``nnx_api.training.partial``)
    __exit__                   every kept handler goes back, in reverse order, whether the body
                               returned or raised (``TrainingPreempted`` included). A handler
                               installed from C (``signal.getsignal`` gives None) cannot be put
                               back from Python: the signal is left at SIG_DFL
                               (``signal.signal`` takes no None). A signal recorded but never
                               obeyed (after the last update boundary: the final refresh) is
                               raised again by the pipeline once the handlers are back
                               (``nnx_api.launch``), so the process answers it as without NNx

The flag outlives ``__exit__`` (the caller may read it after the call); ``__enter__`` clears it.
A ``Preemption`` with no signals (``preempt_signals=()``) changes no handler at all. In a
data-parallel group each rank has its own: the flag one rank records reaches the others through
the group's all-reduces (``nnx_api.training.partial.CommitPoints``). While the handlers are ours,
a listed signal no longer ends the process by itself: a run that never reaches an update boundary
again (a hung collective, an endless validation) is ended by the scheduler's SIGKILL after its
grace period, as any job is.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Sequence
from types import FrameType, TracebackType
from typing import Any

__all__ = ["Preemption"]

Handler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None
"""What ``signal.getsignal`` returns: SIG_DFL, SIG_IGN, a Python callable, or None (installed from C)."""


class Preemption:
    """A context manager around one ``train()`` call (module docstring): while it is entered, each
    of ``signals`` only records that it arrived (``requested``, ``signal``, ``name``); on exit the
    previous handlers are back. ``active`` is True while our handlers are installed."""

    def __init__(self, signals: Sequence[signal.Signals]) -> None:
        self.signals: tuple[signal.Signals, ...] = tuple(dict.fromkeys(signal.Signals(s) for s in signals))
        self.signal: signal.Signals | None = None
        self.active = False
        self._previous: list[tuple[signal.Signals, Handler]] = []

    @property
    def requested(self) -> bool:
        """A listed signal arrived (while entered; cleared by the next ``__enter__``)."""
        return self.signal is not None

    @property
    def name(self) -> str | None:
        """The recorded signal's name (``"SIGTERM"``), None before one arrived."""
        return None if self.signal is None else self.signal.name

    def _record(self, signum: int, frame: FrameType | None) -> None:
        # a signal handler: it runs between two bytecodes of whatever the main thread does, so it
        # only notes the first signal (no write, no raise, no lock)
        if self.signal is None:
            self.signal = signal.Signals(signum)

    def __enter__(self) -> Preemption:
        if self.active:
            raise RuntimeError("this Preemption is already entered; use one per train() call")
        self.signal = None
        if not self.signals or threading.current_thread() is not threading.main_thread():
            return self
        try:
            for sig in self.signals:
                previous = signal.getsignal(sig)
                signal.signal(sig, self._record)
                self._previous.append((sig, previous))
        except ValueError:  # not the main interpreter: signal.signal works in its main thread only
            self._restore()
            return self
        self.active = True
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._restore()

    def _restore(self) -> None:
        """Every kept handler back, the last installed first; one set from C is left at SIG_DFL."""
        while self._previous:
            sig, previous = self._previous.pop()
            signal.signal(sig, signal.SIG_DFL if previous is None else previous)
        self.active = False
