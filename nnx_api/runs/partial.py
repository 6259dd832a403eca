"""A run's epoch in progress, as readers see it: ``NNRun.partial``.

A mid-epoch commit (``nnx_core.commit``: a LAST whose meta holds a ``Position``) commits the
records of its epoch e so far and nothing else. Readers keep them apart from the epochs committed
whole, so nothing that counts or summarizes epochs takes e for a finished one::

    run = NNRun.load(run_id)
    run.idps                  # the records of the complete epochs only (epochs before e)
    run.partial               # PartialEpoch(epoch=e, records=..., position=...), or None
    run.partial.describe()    # "epoch 3 in progress: 80 of 128 updates committed"

After the epoch-end commit of e, LAST has no position: ``partial`` is None and e's records are in
``idps`` like any other epoch's. The lines ``nnx runs list / show / verify`` print about LAST are
here too (``epochs_done``, ``committed_text``, ``resume_text``), and ``position_problems``: a
mid-epoch LAST's blob must hold the position its manifest names. A journal run's history as LAST
commits it is ``committed_journal``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import attrs

from nnx_core.commit import Position, TagManifest, complete_epoch, history_cut, position_of
from nnx_core.journal_reader import JournalReader
from nnx_core.ports import Storage
from nnx_core.records import IterationDataPoint


@attrs.frozen(kw_only=True)
class PartialEpoch:
    """The epoch a mid-epoch LAST commits in part: its index, its committed records (the first
    ``position.records`` of the epoch, oldest first) and LAST's ``Position`` (batches, updates
    and samples of the epoch committed; the epoch's totals when known)."""

    epoch: int
    records: tuple[IterationDataPoint, ...] = attrs.field(repr=False)
    position: Position

    @property
    def updates(self) -> int:
        """The optimizer updates of the epoch committed."""
        return self.position.updates

    def describe(self) -> str:
        """One line: ``epoch 3 in progress: 80 of 128 updates committed``; when the epoch's
        updates are not known (a window whose targets are all masked is no update), its batches:
        ``80 updates committed, 80 of 128 batches``."""
        return f"epoch {self.epoch} in progress: {_done(self.position)}"


def split_partial(
    records: Iterable[IterationDataPoint], last: TagManifest | None
) -> tuple[list[IterationDataPoint], PartialEpoch | None]:
    """Committed records (already truncated to ``last``) as ``(the complete epochs' records, the
    epoch in progress)``; the second is None unless ``last`` is a mid-epoch LAST."""
    position = None if last is None else position_of(last)
    if last is None or position is None:
        return list(records), None
    complete: list[IterationDataPoint] = []
    partial: list[IterationDataPoint] = []
    for r in records:
        (partial if r.epoch_idx == last.epoch else complete).append(r)
    return complete, PartialEpoch(epoch=last.epoch, records=tuple(partial), position=position)


def committed_journal(storage: Storage, run_id: str, last: TagManifest | None, root: str | None = None) -> JournalReader | None:
    """The run's history journal as ``last`` commits it (a mid-epoch LAST: the first records of its
    epoch, no summary row for it); None for a run without a journal. ``root``: the run's folder
    when it is not the one its id names."""
    epoch, in_epoch = history_cut(last)
    return JournalReader.open(storage, run_id, epoch, root, in_epoch=in_epoch)


def complete_records(records: Iterable[IterationDataPoint], last: TagManifest | None) -> Iterator[IterationDataPoint]:
    """Committed records (already truncated to ``last``) of the complete epochs only, streamed:
    a mid-epoch LAST's epoch is left out."""
    partial = None if last is None or position_of(last) is None else last.epoch
    return (r for r in records if r.epoch_idx != partial)


def partial_of(last: TagManifest | None) -> str | None:
    """How far a mid-epoch ``last`` committed its epoch (``PartialEpoch.describe``'s line, read
    from the manifest alone); None for an epoch-end LAST or none."""
    position = None if last is None else position_of(last)
    if last is None or position is None:
        return None
    return PartialEpoch(epoch=last.epoch, records=(), position=position).describe()


def epochs_done(last: TagManifest | None) -> int:
    """How many epochs ``last`` commits whole, counted from epoch 0 (``nnx runs list``'s EPOCHS):
    a mid-epoch LAST's epoch does not count."""
    done = complete_epoch(last)
    return 0 if done is None else done + 1


def committed_text(last: TagManifest | None) -> str:
    """What ``last`` commits, in a few words: ``nothing committed``, ``LAST epoch 3``, or for a
    mid-epoch LAST ``LAST epoch 3, mid-epoch: 80 of 128 updates committed``."""
    if last is None:
        return "nothing committed"
    position = position_of(last)
    if position is None:
        return f"LAST epoch {last.epoch}"
    return f"LAST epoch {last.epoch}, mid-epoch: {_done(position)}"


def _done(position: Position) -> str:
    """``80 of 128 updates committed``, or ``80 updates committed, 80 of 128 batches``."""
    if position.epoch_updates is not None:
        return f"{position.updates} of {position.epoch_updates} updates committed"
    batches = "" if position.epoch_batches is None else f", {position.batches} of {position.epoch_batches} batches"
    return f"{position.updates} updates committed{batches}"


def resume_text(last: TagManifest | None) -> str:
    """Where ``resume="auto"`` continues a run from: ``from its start``, ``from epoch 4``, or
    for a mid-epoch LAST ``inside epoch 3, after its update 80``."""
    if last is None:
        return "from its start"
    position = position_of(last)
    if position is None:
        return f"from epoch {last.epoch + 1}"
    return f"inside epoch {last.epoch}, after its update {position.updates}"


def position_problems(tag: str, manifest: TagManifest, payload: Any) -> list[str]:
    """Problems between a tag's manifest and its decoded payload about the mid-epoch position: a
    mid-epoch manifest needs a blob holding the same position (its epoch, records, batches,
    updates and samples), and a blob holding a position needs a manifest naming it."""
    position, held = position_of(manifest), getattr(payload, "position", None)
    if position is None:
        return [] if held is None else [f"the blob of tag {tag!r} holds a mid-epoch position its manifest does not name"]
    if held is None:
        return [f"tag {tag!r} names a mid-epoch position (epoch {manifest.epoch}) but its blob holds none"]
    named = {"epoch": manifest.epoch, **{k: v for k, v in position.state().items() if k != "epoch_updates"}}
    differ = ", ".join(sorted(k for k, v in named.items() if held.get(k) != v))
    return [f"the blob of tag {tag!r} holds another mid-epoch position than its manifest names ({differ})"] if differ else []
