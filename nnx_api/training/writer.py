"""The writer rank's commits of one session, in ``nnx_core.commit``'s order.

    history (idps.csv or the journal's step) → LAST (its meta: the update count, the latest
    monitor selection, a mid-epoch commit's position) → tags → deferred writes

The eager history is appended, not rewritten, when idps.csv holds exactly the previous commit's
bytes (after this session's first commit) and the new bytes extend them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nnx_core.commit import POSITION, EpochCommit, RunFiles, commit_epoch
from nnx_core.eager_history import EagerHistory
from nnx_core.journal import JournalWriter


class RunWriter:
    """Commits one session's epochs and mid-epoch points (module docstring)."""

    def __init__(self, files: RunFiles, history: Any) -> None:
        self.files, self.history = files, history
        self.previous = history.render() if isinstance(history, EagerHistory) and history.idps else None
        self.on_disk = False  # idps.csv holds exactly ``previous`` (after this session's first commit)

    def write(
        self, epoch: int, payload: Any, *, update_count: int, tags: Sequence[str] = (), deferred: Sequence[Any] = (),
        position: Any = None,
    ) -> None:
        """history → LAST (→ tags → deferred writes); ``position``: a mid-epoch commit's
        (``nnx_api.training.partial.Partial``), named in LAST's meta."""
        journal = self.history if isinstance(self.history, JournalWriter) else None  # chunks + manifest
        history = self.history.render() if journal is None else None
        meta: dict[str, Any] = {"update_count": update_count}
        selection = next((r.selection for r in reversed(self.history.idps) if r.selection is not None), None)
        if selection is not None:
            meta["selection"] = selection.state()
        if position is not None:
            meta[POSITION] = position.meta()
        appendable, self.on_disk = self.on_disk, False
        commit_epoch(
            self.files,
            EpochCommit(
                epoch=epoch, payload=payload.encoder(), history=history, previous_history=self.previous,
                append_history=appendable, history_step=journal, tags=tags, meta=meta, deferred=list(deferred),
            ),
        )
        self.previous, self.on_disk = history, journal is None
