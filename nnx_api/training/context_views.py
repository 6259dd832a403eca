"""What callbacks and steps read during ``train()``: ``ctx.idps`` and ``ctx.scheduler``.

``ctx.idps`` — the run's records so far, live inside an epoch. A batch's training statistics
stay on the device until its epoch ends (one host read per epoch, ``nnx_api.training.epoch``).
``ctx.idps`` is one object for the whole call (a callback may hold it): every read shows the
history's records, then the records of the epoch in progress — made from the device statistics
at that read, so a run pays that host read only when something reads ``ctx.idps`` inside an
epoch. The records such a read makes are final (a mid-epoch commit makes them the same way). An
eager run's is ``LiveRecords``, a list: an edit changes that list only, never the run's history,
and need not outlast its next read (each read rebuilds what an edit made inconsistent).
A ``HistoryJournal`` run's is ``LiveWindow``: read-only (item assignment raises TypeError, no
``append``), at most ``retention`` records. In a group of several processes the epoch's records
are made by every rank together, so a read there shows the records up to the last commit or
epoch end. With a journal, a step function's first record is checked to hold only values the
journal can store (``storable_check``), by type: no device read.

``ctx.scheduler`` — a torch schedule is read as itself. The reduce-on-plateau schedule is this
project's rule over the monitor's decision (``nnx_core.schedules.PlateauRule``), not a torch
scheduler; it is read through ``PlateauScheduler``, which answers with torch's
``ReduceLROnPlateau`` names where the rule keeps the same state (``num_bad_epochs``,
``cooldown_counter``, ``state_dict()``, ``get_last_lr()``). What torch's scheduler keeps of the
metric (``best``, ``mode``, ``threshold``) is the monitor's here: read ``ctx.decision``.
``step()`` is refused, as on the rule's plain view.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, SupportsIndex, overload

from nnx_core.eager_history import EagerHistory
from nnx_core.journal_format import compact_json
from nnx_core.records import IterationDataPoint
from nnx_core.schedules import PlateauRule, PlateauView
from nnx_adapters.pytorch.optim import TorchClock


class LiveRecords(list):  # type: ignore[type-arg]
    """An eager run's ``ctx.idps`` (module docstring): a list that brings itself up to date on every read.

    ``history``: the session's history (its ``idps``: the eager list or the journal's window);
    ``so_far()``: the records of the epoch in progress that the history does not hold yet.
    """

    def __init__(self, history: Any, so_far: Callable[[], list[IterationDataPoint]]) -> None:
        super().__init__()
        self._history, self._so_far = history, so_far
        self._mirrored = 0  # how many of the history's records the list holds (eager)
        self._last: object = None  # the last of them: a history cut back and grown again no longer ends there
        self._tail = 0  # how many of the epoch's records not yet in the history it holds, at its end

    def _sync(self) -> None:
        base, tail = self._history.idps, self._so_far()
        held, mirrored = list.__len__(self), self._mirrored
        cut = len(base) < mirrored or (mirrored > 0 and base[mirrored - 1] is not self._last)
        if held != mirrored + self._tail or cut:  # edited by its reader, or the history cut back
            list.clear(self)
            self._mirrored = 0
        elif self._tail:
            list.__delitem__(self, slice(held - self._tail, None))
        list.extend(self, base[self._mirrored:])
        list.extend(self, tail)
        self._mirrored, self._tail = len(base), len(tail)
        self._last = base[-1] if base else None

    # every read brings the list up to date first
    def __len__(self) -> int:
        self._sync()
        return list.__len__(self)

    def __getitem__(self, i: Any) -> Any:
        self._sync()
        return list.__getitem__(self, i)

    def __iter__(self) -> Iterator[IterationDataPoint]:
        self._sync()
        return list.__iter__(self)

    def __reversed__(self) -> Iterator[IterationDataPoint]:
        self._sync()
        return list.__reversed__(self)

    def __contains__(self, item: object) -> bool:
        self._sync()
        return list.__contains__(self, item)

    def __eq__(self, other: object) -> bool:
        self._sync()
        return list.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = None  # type: ignore[assignment]

    def __add__(self, other: Any) -> Any:
        self._sync()
        return list(self) + other

    def __mul__(self, n: SupportsIndex) -> Any:
        return list(self) * n

    __rmul__ = __mul__

    def __repr__(self) -> str:
        self._sync()
        return list.__repr__(self)

    def __reduce_ex__(self, protocol: SupportsIndex) -> tuple[Any, ...]:
        return list, (list(self),)  # copied or pickled: a plain list of the records now

    def copy(self) -> list[IterationDataPoint]:
        """A plain list of the records now."""
        return list(self)

    def count(self, item: Any) -> int:
        """How many times ``item`` is among the records now."""
        self._sync()
        return list.count(self, item)

    def index(self, item: Any, *args: Any) -> int:
        """Where ``item`` is among the records now."""
        self._sync()
        return list.index(self, item, *args)


def _synced(name: str) -> Any:
    def edit(self: LiveRecords, *args: Any, **kwargs: Any) -> Any:
        self._sync()
        return getattr(list, name)(self, *args, **kwargs)

    edit.__name__ = name
    edit.__doc__ = f"``list.{name}`` on the records now (the run's history is not changed)."
    return edit


for _name in ("__setitem__", "__delitem__", "__iadd__", "__imul__", "append", "extend", "insert", "pop", "remove",
              "clear", "sort", "reverse"):
    setattr(LiveRecords, _name, _synced(_name))
del _name


class LiveWindow(Sequence[IterationDataPoint]):
    """A journal run's ``ctx.idps`` (module docstring): read-only, the last ``retention`` of the
    window's records followed by the epoch's records it does not hold yet. Slices are lists."""

    __slots__ = ("_history", "_so_far", "_retention")

    def __init__(self, history: Any, so_far: Callable[[], list[IterationDataPoint]]) -> None:
        self._history, self._so_far, self._retention = history, so_far, history.spec.retention

    def _parts(self) -> tuple[Sequence[IterationDataPoint], list[IterationDataPoint], int]:
        """The window, the epoch's newer records, and how many of them all come before what it shows."""
        base, tail = self._history.idps, self._so_far()
        total = len(base) + len(tail)
        return base, tail, max(0, total - self._retention)

    def __len__(self) -> int:
        base, tail, skip = self._parts()
        return len(base) + len(tail) - skip

    @overload
    def __getitem__(self, i: int) -> IterationDataPoint: ...

    @overload
    def __getitem__(self, i: slice) -> list[IterationDataPoint]: ...

    def __getitem__(self, i: int | slice) -> IterationDataPoint | list[IterationDataPoint]:
        base, tail, skip = self._parts()
        n = len(base) + len(tail) - skip
        if isinstance(i, slice):
            return [self._at(base, tail, skip + j) for j in range(*i.indices(n))]
        j = operator.index(i)
        if j < 0:
            j += n
        if not 0 <= j < n:
            raise IndexError("ctx.idps index out of range")
        return self._at(base, tail, skip + j)

    @staticmethod
    def _at(base: Sequence[IterationDataPoint], tail: list[IterationDataPoint], k: int) -> IterationDataPoint:
        return base[k] if k < len(base) else tail[k - len(base)]

    def __iter__(self) -> Iterator[IterationDataPoint]:
        base, tail, skip = self._parts()
        return itertools.islice(itertools.chain(base, tail), skip, None)

    def __reversed__(self) -> Iterator[IterationDataPoint]:
        base, tail, skip = self._parts()
        return itertools.islice(itertools.chain(reversed(tail), reversed(base)), len(base) + len(tail) - skip)

    def __repr__(self) -> str:
        return f"<history window: last {len(self)} records>"

    def __reduce__(self) -> tuple[Any, ...]:
        return list, (list(self),)  # copied or pickled: a plain list of the records now


def epoch_so_far(session: Any) -> list[IterationDataPoint]:
    """The records of ``session``'s epoch in progress that its history does not hold yet: its
    batch statistics so far are made into records first (``TrainingSession._flush``: one host
    read) when nothing is half-recorded and the process trains alone; none once ``stop_at_update``
    ended the epoch early (its uncommitted records are dropped, as the returned run's are)."""
    records, idps = session._epoch_records, session.history.idps
    if records and len(idps) and idps[-1] is records[-1]:  # the epoch's records are in the history
        return []
    if session.updates.stopped:  # stopped inside the epoch: what it did not commit is not the run's
        return []
    state = session.state
    stats, extras = state.stats, state.train_extras
    marked = len(stats.lrs)
    whole = (len(stats.records) if stats.records else len(stats.losses)) == marked and (
        extras is None or len(extras) == marked)  # no batch between its statistics and its mark (a step in flight)
    if marked and whole and session.collective.world_size == 1:
        session._flush(state.epoch)
    return session._epoch_records[session._in_history:]


def live_records(session: Any) -> LiveRecords:
    """``session``'s ``ctx.idps``: its history, then its epoch's records so far (``epoch_so_far``)."""
    live = LiveRecords if isinstance(session.history, EagerHistory) else LiveWindow
    return live(session.history, lambda: epoch_so_far(session))


def storable_check(history: Any) -> Callable[[Any], None] | None:
    """What a step function's first record goes through: with a ``HistoryJournal``, a refusal
    (TypeError) of a value the journal cannot store (an array of several values, an object that is
    no number), by its type alone — no device read; None for an eager history (``idps.csv`` stores
    any value as text)."""
    if isinstance(history, EagerHistory):
        return None

    def check(record: Any) -> None:
        _storable(record.state())

    return check


def _storable(value: Any) -> None:
    if value is None or isinstance(value, (str, bool, int, float)):
        return
    if isinstance(value, Mapping):
        for item in value.values():
            _storable(item)
        return
    if isinstance(value, (list, tuple)):
        for item in value:
            _storable(item)
        return
    numel = getattr(value, "numel", None)
    size = numel() if callable(numel) else getattr(value, "size", None)
    if hasattr(value, "item") and size == 1:  # a NumPy or tensor scalar: the journal stores its number
        return
    compact_json(value)  # anything else: the journal's own refusal (TypeError), or a number it stores


# -- ctx.scheduler ---------------------------------------------------------------------------------

_EPS = 1e-8  # the smallest change the rule counts as a reduction (as torch's eps)


class PlateauScheduler(PlateauView):
    """The plateau rule read with torch's ``ReduceLROnPlateau`` names (module docstring);
    ``optimizer``: the torch optimizer it sets the learning rates of (None: unknown)."""

    __slots__ = ("optimizer",)

    def __init__(self, rule: PlateauRule, optimizer: Any = None) -> None:
        super().__init__(rule)
        self.optimizer = optimizer

    @property
    def num_bad_epochs(self) -> int:
        """Epochs without improvement since the last reduction or cooldown (the rule's ``bad_epochs``)."""
        return self.rule.bad_epochs

    @property
    def cooldown_counter(self) -> int:
        """Epochs of cooldown left (the rule's ``cooldown_left``)."""
        return self.rule.cooldown_left

    def get_last_lr(self) -> list[float]:
        """Each parameter group's learning rate now ([] without an optimizer)."""
        groups = self.optimizer.param_groups if self.optimizer is not None else []
        return [float(g["lr"]) for g in groups]

    def state_dict(self) -> dict[str, Any]:
        """A snapshot under torch's ``ReduceLROnPlateau.state_dict()`` keys, for the state the rule
        keeps (a copy to read: the checkpoint keeps the rule's own state)."""
        groups = len(self.optimizer.param_groups) if self.optimizer is not None else 1
        rule = self.rule
        return {
            "factor": rule.factor, "patience": rule.patience, "cooldown": rule.cooldown, "min_lrs": [rule.min_lr] * groups,
            "eps": _EPS, "cooldown_counter": rule.cooldown_left, "num_bad_epochs": rule.bad_epochs,
            "_last_lr": self.get_last_lr(),
        }

    def __repr__(self) -> str:
        return f"PlateauScheduler({self.rule!r})"


def scheduler_view(schedule: Any, optimizer: Any = None) -> Any:
    """``ctx.scheduler`` for a schedule: a torch clock's scheduler, the plateau rule as
    ``PlateauScheduler``, else None (no schedule)."""
    if isinstance(schedule, TorchClock):
        return schedule.scheduler
    if isinstance(schedule, PlateauRule):
        return PlateauScheduler(schedule, optimizer)
    return None
