"""A commit off the critical path: the protocol's order unchanged, run later by one writer.

Read ``BackgroundCommits`` top to bottom; this is the order it owns:

    training thread                                   the background writer (one commit at a time)
    ───────────────                                   ────────────────────────────────────────────
    commit point k
      wait for commit k-1 ─ its error is raised here  (the commit point's own agreement)
      stage: a snapshot of the state, history bytes   (the only part training waits for: the caller's)
      submit(commit k) ─────────────────────────────→ commit_epoch: blob → history → LAST → phase/BEST
      training goes on                                  → deferred writes   (``nnx_core.commit``)
                                                      (its blob's producer a ``BackgroundProducer``:
                                                      written with the least of the machine)
                                                      then durable(LAST): the caller's bookkeeping
                                                      a failure is kept, never swallowed
    every update boundary: ``failed`` ─ a kept error stops training there (``take``)
    end of the call: ``drain`` ─ wait; the kept error is raised, or everything submitted is durable

LAST is still the last write of its commit and a commit starts only after the one before it has
ended, so every instant of the background write is an instant of a synchronous commit: a crash
there leaves the previous committed state or this one, never a mix. What the writer writes is the
staged snapshot, never the live state training goes on changing. At most one commit is in flight,
so the staging memory is one state's and a commit point that comes while one is in flight waits.

The work runs through the ``Runner`` port (``nnx_adapters.runner.ThreadRunner``: one worker thread; a fake
in tests that runs it whenever the test says), so this order is proven without threads or torch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import attrs

from nnx_core.commit import EpochCommit, RunFiles, TagManifest, commit_epoch
from nnx_core.ports import BackgroundProducer


class Pending(Protocol):
    """Work a ``Runner`` started."""

    def done(self) -> bool: ...

    def wait(self) -> None: ...


class Runner(Protocol):
    """Starts work off the training thread. The work never raises (``BackgroundCommits`` keeps
    its error)."""

    def start(self, work: Callable[[], None]) -> Pending: ...


class BackgroundCommits:
    """The commits of one writer, each run by ``runner`` after the one before it (module docstring)."""

    def __init__(self, files: RunFiles, runner: Runner) -> None:
        self.files, self.runner = files, runner
        self._pending: Pending | None = None  # the commit in flight
        self._error: BaseException | None = None  # a finished commit's failure, not yet raised
        self.submitted = 0  # commits handed to the writer
        self.waits = 0  # commit points that found the previous commit still in flight

    @property
    def in_flight(self) -> bool:
        """Whether a submitted commit has not been waited for yet."""
        return self._pending is not None

    @property
    def failed(self) -> bool:
        """Whether a finished commit failed (its error not raised yet): read at every update boundary."""
        return self._error is not None

    def submit(self, commit: EpochCommit, durable: Callable[[TagManifest], None] = lambda _: None) -> None:
        """Commit ``commit`` (staged: nothing in it changes any more) in the background, after the
        commit in flight; ``durable`` runs on the writer once its LAST, tags and deferred writes are
        written. A failure of the previous commit is raised here and nothing is submitted."""
        self.commit_point()
        if callable(commit.payload):  # a store may write it with the least of the machine
            commit = attrs.evolve(commit, payload=BackgroundProducer(commit.payload))

        def work() -> None:
            try:
                durable(commit_epoch(self.files, commit))
            except BaseException as exc:  # kept for the training thread: ENOSPC, EIO, a failed fsync...
                self._error = exc

        self._pending = self.runner.start(work)
        self.submitted += 1

    def commit_point(self) -> None:
        """``wait``, at a commit point: counted in ``waits`` when the commit in flight has not ended."""
        if self._pending is not None and not self._pending.done():
            self.waits += 1
        self.wait()

    def wait(self) -> None:
        """Wait for the commit in flight; raise its failure (or an earlier one not yet raised). A
        wait interrupted (a signal's exception) leaves the commit in flight, waited for next time."""
        pending = self._pending
        if pending is not None:
            pending.wait()
            self._pending = None
        error = self.take()
        if error is not None:
            raise error

    def take(self) -> BaseException | None:
        """The kept failure, once (None when there is none): the caller raises or reports it."""
        error, self._error = self._error, None
        return error

    def drain(self) -> None:
        """The end of the call: wait for the commit in flight and raise its failure; afterwards
        everything submitted is durable."""
        self.wait()
