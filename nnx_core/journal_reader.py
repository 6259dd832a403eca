"""Reading a history journal: the committed history of one run as readers see it, up to LAST.

Read rules (``JournalReader``): only the manifest's byte prefix of index.jsonl / epochs.jsonl
exists (bytes appended but never published are ignored); records of epochs after LAST's epoch are
invisible (a crash between the manifest and LAST leaves such a tail), and so are, for a mid-epoch
LAST (``in_epoch``: the records of its epoch it commits), the records of its epoch past those and
its epoch's summary row; a missing chunk, a chunk whose
SHA-256 or record count disagrees with its index line, a broken chain or a manifest that does not
match its files raises ``HistoryCorruptionError``. A reader streams chunks one at a time.

A reader that opened a history which was then replaced or removed (its run replaced, the folder
kept aside for the replacement retired, the run deleted) meets missing or foreign files: that is
``StaleCheckpointError``, not damage. The rule, checked only when a read fails: the folder's
history is re-read; it is stale when the folder holds no history any more, or a sound one whose
committed index no longer begins with the one this reader opened. A sound history that still
extends the one opened means its files are damaged.

The files and their formats are ``nnx_core.journal_format``; the writer is ``nnx_core.journal``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from nnx_core.errors import HistoryCorruptionError, StaleCheckpointError
from nnx_core.journal_format import GENESIS, ChunkEntry, JournalFiles, JournalManifest, chain_next, parse_index, read_chunk
from nnx_core.ports import Storage
from nnx_core.records import IterationDataPoint


def has_journal(storage: Storage, run_id: str, root: str | None = None) -> bool:
    """Whether the run keeps its history as a journal (its manifest exists); ``root``: the run's
    folder when it is not the one its id names."""
    return storage.exists(JournalFiles(run_id, root).manifest)


class JournalReader:
    """The committed history of one run's journal as readers see it: epochs ≤ ``last_epoch``.

    ``last_epoch`` is LAST's epoch; ``None`` (nothing committed) shows nothing. ``in_epoch``: a
    mid-epoch LAST's records of ``last_epoch`` (only those are visible, and no summary row of
    it); None: the epoch is whole. Index entries are parsed and chain-verified once; chunks are
    read (and SHA-256-verified) on demand.
    """

    def __init__(
        self, storage: Storage, run_id: str, last_epoch: int | None, manifest: JournalManifest, root: str | None = None,
        *, in_epoch: int | None = None,
    ) -> None:
        self.storage = storage
        self.files = JournalFiles(run_id, root)
        self.last_epoch = last_epoch
        self.in_epoch = in_epoch
        self.manifest = manifest
        self._entries: list[ChunkEntry] | None = None

    @classmethod
    def open(
        cls, storage: Storage, run_id: str, last_epoch: int | None, root: str | None = None, *, in_epoch: int | None = None
    ) -> JournalReader | None:
        """The run's journal reader, or None when the run has no journal (an eager history);
        ``root``: the run's folder when it is not the one its id names."""
        files = JournalFiles(run_id, root)
        try:
            data = storage.read(files.manifest)
        except FileNotFoundError:
            return None
        return cls(storage, run_id, last_epoch, JournalManifest.from_bytes(data, run_id=run_id), root, in_epoch=in_epoch)

    def all_entries(self) -> list[ChunkEntry]:
        """Every entry the manifest commits (also those after ``last_epoch``)."""
        if self._entries is None:
            with self._reading():
                try:
                    data = self.storage.read(self.files.index) if self.manifest.index_bytes else b""
                except FileNotFoundError as exc:
                    raise HistoryCorruptionError(f"run {self.files.run_id}: history/index.jsonl is missing") from exc
                self._entries = parse_index(data, self.manifest, self.files)
        return self._entries

    def _chunk(self, entry: ChunkEntry) -> list[IterationDataPoint]:
        with self._reading():
            return read_chunk(self.storage, self.files, entry)

    @contextmanager
    def _reading(self) -> Iterator[None]:
        """A failed read of this reader's files: ``StaleCheckpointError`` where the history it
        opened was replaced or removed since (``_released``), else the damage as it was found."""
        try:
            yield
        except HistoryCorruptionError as exc:
            if self._released():
                raise StaleCheckpointError(
                    f"run {self.files.run_id}: its history was replaced or removed after it was opened (the run was "
                    "replaced, or its folder removed); nothing is corrupt: read the history again"
                ) from exc
            raise

    def _released(self) -> bool:
        """Whether the folder holds no history now, or a sound one whose committed index does not
        begin with the ``manifest.chunks`` entries this reader opened (their chain differs)."""
        try:
            data = self.storage.read(self.files.manifest)
        except FileNotFoundError:
            return True
        try:
            current = JournalManifest.from_bytes(data, run_id=self.files.run_id)
            index = self.storage.read(self.files.index) if current.index_bytes else b""
            entries = parse_index(index, current, self.files)
        except (FileNotFoundError, HistoryCorruptionError):
            return False  # the current history is damaged itself: report what was found
        if len(entries) < self.manifest.chunks:
            return True
        chain = GENESIS
        for entry in entries[: self.manifest.chunks]:
            chain = chain_next(chain, entry.line())
        return chain != self.manifest.index_chain

    def entries(self) -> list[ChunkEntry]:
        """Entries of the visible epochs (≤ ``last_epoch``)."""
        if self.last_epoch is None:
            return []
        return upto(self.all_entries(), self.last_epoch, self.in_epoch)

    def __len__(self) -> int:
        return sum(e.records for e in self.entries())

    def __iter__(self) -> Iterator[IterationDataPoint]:
        for entry in self.entries():
            yield from self._chunk(entry)

    def tail(self, n: int | None = None) -> list[IterationDataPoint]:
        """The last ``n`` visible records (default: the manifest's retention)."""
        n = self.manifest.retention if n is None else n
        picked: list[ChunkEntry] = []
        held = 0
        for entry in reversed(self.entries()):
            if held >= n:
                break
            picked.append(entry)
            held += entry.records
        out: list[IterationDataPoint] = []
        for entry in reversed(picked):
            out.extend(self._chunk(entry))
        return out[len(out) - n :] if n < len(out) else out

    def epoch_record(self, epoch: int) -> IterationDataPoint | None:
        """The last record of a visible ``epoch`` (where validation and the decision live)."""
        for entry in reversed(self.entries()):
            if entry.last_epoch == epoch:
                return self._chunk(entry)[-1]
            if entry.last_epoch < epoch:
                return None
        return None

    def epoch_lines(self) -> list[tuple[dict[str, Any], int]]:
        """Every summary row the manifest commits, with its size in bytes (newline included)."""
        where = f"run {self.files.run_id}: history/epochs.jsonl"
        size = self.manifest.epochs_bytes
        with self._reading():
            try:
                data = self.storage.read(self.files.epochs) if size else b""
            except FileNotFoundError as exc:
                raise HistoryCorruptionError(f"{where} is missing") from exc
            return self._epoch_lines(where, data, size)

    def _epoch_lines(self, where: str, data: bytes, size: int) -> list[tuple[dict[str, Any], int]]:
        if len(data) < size or (size and data[size - 1 : size] != b"\n"):
            raise HistoryCorruptionError(f"{where} does not hold the {size} bytes the manifest commits")
        try:
            lines = data[:size].split(b"\n")[:-1] if size else []
            rows = [(json.loads(line.decode("utf-8")), len(line) + 1) for line in lines]
        except (ValueError, UnicodeDecodeError) as exc:
            raise HistoryCorruptionError(f"{where} holds an unreadable row: {exc}") from exc
        if len(rows) != self.manifest.epochs or not all(isinstance(r, dict) and "epoch" in r for r, _ in rows):
            raise HistoryCorruptionError(f"{where} does not hold the {self.manifest.epochs} rows the manifest commits")
        return rows

    def epoch_rows(self) -> list[dict[str, Any]]:
        """Summary rows of the visible epochs."""
        if self.last_epoch is None:
            return []
        whole = self.last_epoch if self.in_epoch is None else self.last_epoch - 1
        return [row for row, _ in self.epoch_lines() if row["epoch"] <= whole]


def count_upto(entries: Sequence[ChunkEntry], epoch: int) -> int:
    """How many leading entries hold epochs ≤ ``epoch`` (entries are in epoch order)."""
    lo, hi = 0, len(entries)
    while lo < hi:
        mid = (lo + hi) // 2
        if entries[mid].last_epoch <= epoch:
            lo = mid + 1
        else:
            hi = mid
    return lo



def upto(entries: Sequence[ChunkEntry], epoch: int, in_epoch: int | None) -> list[ChunkEntry]:
    """The leading entries a LAST of ``epoch`` commits: every epoch ≤ ``epoch``; for a mid-epoch
    LAST (``in_epoch``: its records of ``epoch``), the epochs before and the chunks of ``epoch``
    that hold its first ``in_epoch`` records (a commit always ends a chunk)."""
    if in_epoch is None:
        return list(entries[: count_upto(entries, epoch)])
    kept = list(entries[: count_upto(entries, epoch - 1)])
    held = 0
    for entry in entries[len(kept):]:
        if entry.first_epoch != epoch or held + entry.records > in_epoch:
            break
        kept.append(entry)
        held += entry.records
    return kept
