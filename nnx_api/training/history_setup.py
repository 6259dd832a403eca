"""History at training time: ``history=HistoryJournal(...)`` checked, opened and shown to callbacks.

Before anything is written a run's history choice is checked against its callbacks (a
plain-function callback is promised the full list, which a journal does not keep) and, for a
continuation, against the format the run started with. The session's history is the eager
in-memory list (rendered to ``idps.csv``) or a ``JournalWriter`` cut back to LAST. With a journal
``ctx.idps`` is the bounded window, except for callbacks declaring ``history_access = "full"``,
whose hooks see the lazy full history.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Sequence
from typing import Any

from nnx_core.commit import LAST, RunFiles, history_cut
from nnx_core.eager_history import EagerHistory
from nnx_core.errors import ParamsError
from nnx_core.journal import FullHistory, HistoryJournal, HistoryWindow, JournalWriter
from nnx_core.journal_reader import has_journal
from nnx_core.lifecycle import HOOKS, overrides
from nnx_api.callbacks import Callback, LegacyCallback

HISTORY_ACCESS = ("window", "full")



def check_history(history: Any, callbacks: Sequence[Callback]) -> HistoryJournal | None:
    """Validate ``train(history=...)`` against the callbacks, before anything is written."""
    for cb in callbacks:
        access = getattr(cb, "history_access", None)
        if access is not None and access not in HISTORY_ACCESS:
            raise ParamsError(
                f"{type(cb).__name__}.history_access", f"history_access must be one of 'window', 'full'; got {access!r}"
            )
    if history is None:
        return None
    if not isinstance(history, HistoryJournal):
        raise ParamsError("history", f"must be nnx.HistoryJournal(...) or None, got {type(history).__name__}")
    legacy = [cb.fn for cb in callbacks if isinstance(cb, LegacyCallback)]
    if legacy:
        raise ParamsError(
            "callbacks",
            f"a plain-function callback ({', '.join(getattr(f, '__name__', repr(f)) for f in legacy)}) receives the full "
            "idps list, which a HistoryJournal does not keep in memory; write a Callback subclass "
            "(ctx.idps is the last `retention` records; declare history_access = 'full' to read every record)",
        )
    return history


def check_continuation(files: RunFiles, history: HistoryJournal | None) -> None:
    """A run keeps the history format it started with; refuse a mismatch before writing."""
    journal = has_journal(files.storage, files.run_id)
    if journal and history is None:
        raise ParamsError(
            "history", f"run {files.run_id} keeps its history as a journal; pass history=nnx.HistoryJournal(...)"
        )
    if not journal and history is not None:
        raise ParamsError(
            "history",
            f"run {files.run_id} keeps an eager history (idps.csv); continue it without history=, or convert "
            f"it first with nnx.migrate_history({files.run_id!r})",
        )


def open_history(files: RunFiles, spec: HistoryJournal | None, *, fresh: bool, idps: Sequence[Any]) -> EagerHistory | JournalWriter:
    """The session's history: the eager list (``idps``: a continuation's committed records), or
    the run's journal writer — empty for a fresh run, else cut back to LAST (under the lease)."""
    if spec is None:
        return EagerHistory(() if fresh else idps)
    epoch, in_epoch = history_cut(None if fresh else files.read_tag(LAST))  # a mid-epoch LAST: its epoch goes on
    return JournalWriter(files.storage, files.run_id, spec, last_epoch=epoch, in_epoch=in_epoch)


class JournalWindow:
    """A rank that does not write, under ``DDP()``: the journal's window only. The writer holds the
    journal's files and writes its chunks and manifest; every other rank keeps the same last
    ``retention`` records (the writer's window at the start, then every epoch's records, which
    are global), so ``ctx.idps`` is the same on every rank; ``open``, the writer's committed
    records of an epoch still in progress (a mid-epoch resume point's)."""

    def __init__(self, spec: HistoryJournal, window: Iterable[Any], committed_records: int, open_records: Iterable[Any]) -> None:
        self.spec = spec
        self.window: collections.deque[Any] = collections.deque(window, maxlen=spec.retention)
        self.idps = HistoryWindow(self.window)
        self.committed_records = committed_records
        self.open = list(open_records)

    def extend(self, records: Iterable[Any], *, closes: bool = True) -> None:
        """Add records to the window (``closes``: the writer's concern)."""
        self.window.extend(records)


def shared_history(history: Any, spec: HistoryJournal | None, share: Any) -> Any:
    """Every rank's history in a group: a journal's window and record count come from the writer
    (``share(fn)`` runs ``fn`` on the writer and gives every rank its answer); a rank that does not
    write keeps them as a ``JournalWindow``. ``history`` is None on those ranks."""
    if spec is None:
        return history
    window, committed, open_records = share(lambda: (list(history.window), history.committed_records, list(history.open)))
    return history if isinstance(history, JournalWriter) else JournalWindow(spec, window, committed, open_records)


class _FullHistoryAccess(Callback):
    """Runs a callback that declared ``history_access = "full"`` with ``ctx.idps`` = the full history.

    Everything else (component state, transforms, ``distributed``) is the wrapped callback's.
    """

    def __init__(self, inner: Callback, view: FullHistory) -> None:
        self._inner = inner
        self._view = view
        self.distributed = inner.distributed

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_inner", "_view"):
            raise AttributeError(name)
        return getattr(self._inner, name)

    def checkpoint_transforms(self) -> tuple[Any, ...]:
        return self._inner.checkpoint_transforms()

    def __repr__(self) -> str:
        return f"<full history access: {self._inner!r}>"


def _with_full_history(hook: str) -> Any:
    def call(self: _FullHistoryAccess, ctx: Any, *args: Any) -> Any:
        window, ctx.idps = ctx.idps, self._view
        try:
            return getattr(self._inner, hook)(ctx, *args)
        finally:
            ctx.idps = window

    call.__name__ = hook
    return call


def with_history_access(callbacks: Sequence[Callback], history: Any) -> list[Callback]:
    """The callbacks as the loop dispatches them: with a journal, each one declaring
    ``history_access = "full"`` is wrapped so its hooks see the lazy full history as ``ctx.idps``
    (the others see the window). Without a journal ``ctx.idps`` is the full list already."""
    if not isinstance(history, JournalWriter):
        return list(callbacks)
    out: list[Callback] = []
    for cb in callbacks:
        if getattr(cb, "history_access", None) != "full":
            out.append(cb)
            continue
        hooks = {hook: _with_full_history(hook) for hook in HOOKS if overrides(cb, hook, Callback)}
        wrapper = type(f"FullHistoryAccess[{type(cb).__name__}]", (_FullHistoryAccess,), hooks)
        out.append(wrapper(cb, history.full_view()))
    return out
