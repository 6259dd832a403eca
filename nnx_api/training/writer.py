"""The writer rank's commits of one session, in ``nnx_core.commit``'s order.

    history (idps.csv or the journal's step) → LAST (its meta: the update count, the latest
    monitor selection, a mid-epoch commit's position) → tags → deferred writes

The eager history is appended, not rewritten, when idps.csv holds exactly the previous commit's
bytes (after this session's first commit) and the new bytes extend them.

Asynchronous commits (``NNTrainParams.async_commits``, ``nnx_core.background``): at a commit point
the writer waits for the commit in flight (raising its failure), stages a snapshot of the payload
(``nnx_adapters.pytorch.staging``) and the history's bytes, and hands the same commit to the
background writer; training goes on. With a history journal every commit is written here, before
training goes on (the journal's writer is not staged).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

from nnx_core import agreement
from nnx_core.background import BackgroundCommits
from nnx_core.commit import POSITION, EpochCommit, RunFiles, commit_epoch, refresh_last, weights_tag
from nnx_core.eager_history import EagerHistory
from nnx_core.journal import JournalWriter
from nnx_core.lifecycle import CleanupWarning
from nnx_adapters.pytorch.staging import Staging
from nnx_adapters.runner import ThreadRunner
from nnx_api.runs.payload import WeightsPayload


class RunWriter:
    """Commits one session's epochs and mid-epoch points (module docstring); ``background``: the
    run's commits are asynchronous (a thread of the ``writer`` rank's writes them), else each is
    written before ``write`` returns. ``failed``: whether a background commit failed, asked on
    every rank of an asynchronous run (the writer's answer rides its agreement); None otherwise."""

    def __init__(self, files: RunFiles, history: Any, background: bool = False, writer: bool = True) -> None:
        self.files, self.history = files, history
        journal = isinstance(history, JournalWriter)  # its step runs in order on the training thread
        self.runner = ThreadRunner() if background and writer and not journal else None
        self.background = BackgroundCommits(files, self.runner) if self.runner is not None else None
        self.failed: Callable[[], bool] | None = self._failed if background else None
        self.staging = Staging(devices_only=self.background is None)  # a synchronous commit stages CUDA tensors only
        self.previous = history.render() if isinstance(history, EagerHistory) and history.idps else None
        self.on_disk = False  # idps.csv holds exactly ``previous`` (after this session's first commit)

    def write(
        self, epoch: int, payload: Any, *, update_count: int, tags: Sequence[str] = (), deferred: Sequence[Any] = (),
        position: Any = None, durable: Callable[[], None] | None = None,
    ) -> None:
        """history → LAST (→ tags → deferred writes); ``position``: a mid-epoch commit's
        (``nnx_api.training.partial.Partial``), named in LAST's meta; ``durable``: called once all
        of it is written."""
        journal = self.history if isinstance(self.history, JournalWriter) else None  # chunks + manifest
        background = self.background
        if background is not None:
            background.commit_point()  # the commit in flight is durable (or raises), its buffers free
        history = self.history.render() if journal is None else None
        meta: dict[str, Any] = {"update_count": update_count}
        selection = next((r.selection for r in reversed(self.history.idps) if r.selection is not None), None)
        if selection is not None:
            meta["selection"] = selection.state()
        if position is not None:
            meta[POSITION] = position.meta()
        appendable, self.on_disk = self.on_disk, False
        commit = EpochCommit(
            epoch=epoch, payload=payload.encoder(self.staging), history=history,
            previous_history=self.previous, append_history=appendable, history_step=journal, tags=tuple(tags), meta=meta,
            deferred=list(deferred),
        )

        def written(_: Any = None) -> None:
            self.previous, self.on_disk = history, journal is None
            if durable is not None:
                durable()

        if background is None:
            commit_epoch(self.files, commit)
            written()
        else:
            background.submit(commit, written)

    def refresh(self, payload: Any) -> None:
        """The final LAST refresh (``nnx_core.commit.refresh_last``), after the last commit is
        durable. When the payload is still byte for byte the last commit's snapshot (nothing
        changed it since: ``Staging.holds``), LAST already names those bytes: its blob is not
        encoded and written again."""
        unchanged = self.staging.holds(payload.state())
        refresh_last(self.files, None if unchanged else payload.encoder())

    def weights(self, tag: str, epoch: int, net: Any) -> Callable[[], None]:
        """A deferred writer of a weights-only tag holding ``net`` as it is now (``ctx.save_weights``)."""
        data = WeightsPayload(epoch=epoch, weights=net.state_dict()).encode()
        return lambda: weights_tag(self.files, tag, epoch, data)

    def _failed(self) -> bool:
        """Whether a background commit failed (its error not raised yet)."""
        return self.background is not None and self.background.failed

    def settle(self, collective: Any, where: str, after: BaseException | None = None) -> None:
        """Every rank: wait until the writer's background commits are durable; a failure stops every
        rank. ``after``: training already stopped with that error (``drain_after``: no agreement)."""
        if after is not None:
            self.drain_after(after)
            return
        error: BaseException | None = None
        if collective.is_writer:
            try:
                self.drain()
            except Exception as exc:
                error = exc
        agreement.raise_if_failed(collective, error, where)

    def drain(self) -> None:
        """Wait until every commit handed to the background writer is durable (its failure raised);
        its worker thread ends (a later commit starts another)."""
        if self.background is not None:
            try:
                self.background.drain()
            finally:
                if self.runner is not None and not self.background.in_flight:
                    self.runner.close()

    def drain_after(self, error: BaseException) -> None:
        """Training ends with ``error``: wait for the commit in flight all the same (what it
        commits stays); its own failure is warned, never raised over ``error``. Ctrl-C while
        waiting is raised once it has ended (``nnx_adapters.runner.ThreadRun.wait``)."""
        try:
            self.drain()
        except Exception as exc:
            warnings.warn(f"the commit in flight failed too while training stopped with {type(error).__name__}: {exc!r}; "
                          "the run's LAST is the commit before it", CleanupWarning, stacklevel=2)
