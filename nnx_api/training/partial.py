"""Commit points inside an epoch: when one is due, and what a partial epoch carries across a resume.

The session asks ``CommitPoints.due`` after every batch's step, and commits when it answers:

    after batch k's step (TrainingSession.train_epoch):
        did an update window close in this step?            no  → next batch (never inside a window)
        is batch k the epoch's last?                        yes → the epoch-end commit follows
        a preemption signal arrived, or commit_every is reached (committed updates, or time since
        the last commit)?                                   no  → next batch
        → the batch statistics so far become the epoch's next records (one host sync)
        → the writer commits: those records → LAST naming the position   (nothing else: no BEST,
          phase tag, epoch-clock tick, monitor decision or deferred write)
        → a preemption raises ``TrainingPreempted`` (the lifecycle then finalizes the callbacks)
    and at every update boundary: did the background writer's commit fail (asynchronous
    commits)?                                               yes → its error is raised (``FAILED``)

What LAST's payload adds at such a commit (``Partial``, the payload's ``position``): the batches,
samples and updates of the epoch so far, the records already committed, the RNG streams as they
were when the epoch's iterator was made (so the same order is drawn again and the consumed batches
are skipped by index, never loaded) and the partial epoch's accumulators (the training summary,
each optimizer's updates this epoch, each record's sample count) and, for a loader positioned by
its own state (``StatefulDataLoader``), that loader's ``state_dict()``. The RNG streams of the
commit point itself are the payload's ``rng``, as at an epoch end.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any

import attrs
import torch

from nnx_core.errors import TrainingPreempted

PREEMPTED, EVERY, FAILED = "preempted", "commit_every", "failed"


class CommitPoints:
    """When a mid-epoch commit is due (module docstring): ``every`` committed updates (an ``int``)
    or wall-clock time (a ``timedelta``), and whenever ``preemption`` asks (a signal arrived); and
    whether the background writer's last commit failed (``failed``: asynchronous commits).

    In a data-parallel group the ranks must answer alike, but a signal reaches one rank, the
    writer alone knows its commit failed, and each rank has its own clock. There ``ride()`` makes
    the three questions numbers that travel with every all-reduce the group makes anyway
    (``local``: this rank's, ``note``: their sums, kept until consumed;
    ``nnx_adapters.collective.torch.TorchCollective.rider``), and ``due`` answers from the sums:
    every rank has made the same all-reduces by the same update boundary, so every rank commits,
    or stops, at the same update. A count of updates is the same on every rank: it never rides."""

    def __init__(self, every: int | timedelta | None, preemption: Any = None, clock: Callable[[], float] = time.monotonic,
                 failed: Callable[[], bool] | None = None) -> None:
        self.every, self.preemption, self.clock, self.failed = every, preemption, clock, failed
        self.agreed: list[float] | None = None  # riding: [ranks preempted, ranks whose clock is due, writer failed], summed
        self.vote: Callable[[list[float]], list[float]] | None = None  # riding on an all-reduce of its own
        self.mark(0)

    @property
    def rides(self) -> bool:
        """Whether a group must agree on these answers (a signal can arrive, a clock decides, or a
        background commit can fail)."""
        signals = self.preemption is not None and bool(self.preemption.signals)
        return signals or isinstance(self.every, timedelta) or self.failed is not None

    def ride(self) -> None:
        """Answer from what the group agreed (``note``) from now on."""
        self.agreed = [0.0, 0.0, 0.0]

    def local(self) -> list[float]:
        """This rank's answers, as numbers to sum over the ranks: [preempted, the clock is due, its
        background commit failed]."""
        every = self.every
        clock_due = isinstance(every, timedelta) and self.clock() - self._since >= every.total_seconds()
        return [1.0 if self._signalled else 0.0, 1.0 if clock_due else 0.0, 1.0 if self._failed else 0.0]

    def note(self, sums: Sequence[float]) -> None:
        """The sums of every rank's ``local`` at one all-reduce (kept: a later sum of 0 does not undo them)."""
        if self.agreed is not None:
            self.agreed = [max(a, float(b)) for a, b in zip(self.agreed, sums, strict=True)]

    def mark(self, updates: int) -> None:
        """A commit happened with ``updates`` committed updates in the run."""
        self._updates, self._since = updates, self.clock()
        if self.agreed is not None:
            self.agreed[1] = 0.0

    @property
    def _signalled(self) -> bool:
        return self.preemption is not None and self.preemption.requested

    @property
    def _failed(self) -> bool:
        return self.failed is not None and self.failed()

    @property
    def preempted(self) -> bool:
        """A preemption signal arrived (in a group: on any rank, as agreed so far)."""
        return self._signalled if self.agreed is None else self.agreed[0] > 0

    def preempted_error(self, run_id: str, epoch: int | None, update: int | None) -> TrainingPreempted:
        """``TrainingPreempted`` naming the commit (``update`` None: nothing new was committed)."""
        assert self.preemption is not None
        name = self.preemption.name or "a signal on another rank"
        return TrainingPreempted(run_id, epoch, update, name, committed=update is not None)

    def due(self, updates: int) -> str | None:
        """``FAILED``, ``PREEMPTED``, ``EVERY`` or None, at an update boundary with ``updates``
        committed updates."""
        if self.vote is not None:
            self.note(self.vote(self.local()))
        if self._failed if self.agreed is None else self.agreed[2] > 0:
            return FAILED
        if self.preempted:
            return PREEMPTED
        every = self.every
        if isinstance(every, int):
            return EVERY if updates - self._updates >= every else None
        if isinstance(every, timedelta) and updates > self._updates:
            due = self.local()[1] > 0 if self.agreed is None else self.agreed[1] > 0
            return EVERY if due else None
        return None


@attrs.frozen(kw_only=True)
class Partial:
    """Where a mid-epoch commit stands, and what the rest of the epoch needs (module docstring)."""

    epoch: int
    batches: int  # of the epoch, consumed
    samples: int
    updates: int  # committed in the epoch
    records: int  # of the epoch, in the committed history
    epoch_batches: int | None
    epoch_rng: Any  # the RNG streams when the epoch's iterator was made
    summary: Any  # the training summary accumulator's state (tree_state), None without one
    this_epoch: Mapping[str, int]  # each optimizer's updates in the epoch
    record_sizes: tuple[int, ...]  # each committed record's batch sample count
    ranks: tuple[Mapping[str, Any], ...] | None = None  # a group's: every rank's own part (``local``)
    loader: Any = None  # a loader positioned by its state: its state_dict() here (None: by index)

    def local(self) -> dict[str, Any]:
        """What each rank keeps of its own (``EpochGroup.partial_state``): the training summary's
        state, the samples and the records' sample counts (a group's: ``ranks`` holds every rank's)."""
        local = {"summary": self.summary, "samples": self.samples, "record_sizes": list(self.record_sizes)}
        return local if self.ranks is None else {**local, "ranks": list(self.ranks)}

    def state(self) -> dict[str, Any]:
        """The payload's ``position`` record (tensors and plain types)."""
        return {
            "epoch": self.epoch, "batches": self.batches, "updates": self.updates, "records": self.records,
            "epoch_batches": self.epoch_batches, "epoch_rng": self.epoch_rng, "this_epoch": dict(self.this_epoch),
            **self.local(), **({} if self.loader is None else {"loader": self.loader}),
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> Partial:
        """The position a payload holds (``state``'s record, or a session's with its ``local`` part)."""
        ranks = state.get("ranks")
        return cls(
            epoch=int(state["epoch"]), batches=int(state["batches"]), samples=int(state["samples"]),
            updates=int(state["updates"]), records=int(state["records"]), epoch_batches=state["epoch_batches"],
            epoch_rng=state["epoch_rng"], summary=state["summary"], this_epoch=dict(state["this_epoch"]),
            record_sizes=tuple(int(n) for n in state["record_sizes"]), ranks=None if ranks is None else tuple(ranks),
            loader=state.get("loader"),
        )

    def meta(self, epoch_updates: int | None = None) -> dict[str, Any]:
        """LAST's ``position`` meta (``nnx_core.commit``): what readers show without the payload."""
        return {"records": self.records, "batches": self.batches, "updates": self.updates, "samples": self.samples,
                "epoch_batches": self.epoch_batches, "epoch_updates": epoch_updates}


_PLAIN = (int, float, bool, str, type(None))


def tree_state(obj: Any) -> Any:
    """An accumulator's state as tensors and plain types: its attributes, recursively (lists,
    tuples and dicts of them; an object as ``{"attrs": {...}}``). Tensors are copied (clone), so
    training on does not change a state taken for a commit."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().clone()
    if isinstance(obj, _PLAIN):
        return obj
    if isinstance(obj, (list, tuple)):
        return {"seq": [tree_state(v) for v in obj], "tuple": isinstance(obj, tuple)}
    if isinstance(obj, dict):
        return {"map": {k: tree_state(v) for k, v in obj.items()}}
    if _fixed(obj) or callable(obj):
        return {"fixed": True}
    names = list(getattr(obj, "__dict__", {})) + [n for cls in type(obj).__mro__ for n in getattr(cls, "__slots__", ())]
    return {"attrs": {n: tree_state(getattr(obj, n)) for n in names if hasattr(obj, n)}}


def _fixed(value: Any) -> bool:
    """Parts of an accumulator that its constructor gives and training never changes (a task, a
    metric's registry entry, any frozen value): nothing of their own to restore."""
    cls = type(value)
    frozen = (attrs.has(cls) and getattr(cls.__setattr__, "__name__", "") == "_frozen_setattrs") or (
        dataclasses.is_dataclass(value) and cls.__dataclass_params__.frozen)  # type: ignore[attr-defined]
    return frozen or isinstance(value, type) or cls.__module__.startswith(("nnx_adapters.pytorch.tasks", "nnx_core"))


def load_tree(obj: Any, state: Any) -> Any:
    """Put ``state`` (``tree_state``) back into a fresh accumulator built the same way; returns the
    value for ``obj``'s place (an object is restored in place and returned)."""
    if isinstance(state, dict) and "fixed" in state:
        return obj
    if isinstance(state, dict) and "attrs" in state and not isinstance(obj, (dict, list, tuple)):
        for name, sub in state["attrs"].items():
            if "fixed" not in sub if isinstance(sub, dict) else True:
                setattr(obj, name, load_tree(getattr(obj, name, None), sub))
        return obj
    if isinstance(state, dict) and "seq" in state:
        olds = list(obj) if isinstance(obj, (list, tuple)) and len(obj) == len(state["seq"]) else [None] * len(state["seq"])
        items = [load_tree(o, s) for o, s in zip(olds, state["seq"], strict=True)]
        return tuple(items) if state["tuple"] else items
    if isinstance(state, dict) and "map" in state:
        old = obj if isinstance(obj, dict) else {}
        return {k: load_tree(old.get(k), s) for k, s in state["map"].items()}
    return state
