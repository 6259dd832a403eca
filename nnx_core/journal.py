"""The history journal: bounded memory and constant-cost history commits for long runs.

An eager history (``nnx_core.eager_history``) keeps every record in memory and renders ``idps.csv``
whole at every epoch. With ``history=HistoryJournal(...)`` the run keeps only a window of the last
``retention`` records in memory and the "run history" step of the epoch commit only adds files
(the layout under ``<run id>/history/``: ``nnx_core.journal_format``; reading it up to LAST:
``nnx_core.journal_reader``).

One history step (``JournalWriter.commit``), before LAST is written:

    1. each pending epoch's records → new chunk files (``Storage.write``: durable, atomic)
    2. their index lines → appended to index.jsonl (``Storage.append``: fsynced)
    3. one summary row per epoch → appended to epochs.jsonl
    4. the manifest naming the new lengths and chain → published atomically
    (then LAST, the commit marker; if LAST fails, ``rollback`` republishes the previous manifest)

A mid-epoch commit (``extend(records, closes=False)``: the epoch goes on) is the same step without
the epoch's summary row: its records so far become chunks, and the manifest says how many records
of its last epoch are committed while that epoch is open (``open_records``). The epoch's next
commit adds chunks of the same epoch, and the commit that ends it writes its summary row, made
from all of the epoch's records.

A writer that opens an existing journal (a resumed run) discards an uncommitted tail first: it
republishes the manifest cut at LAST (its epoch; for a mid-epoch LAST, the records of its epoch
LAST names), then cuts index.jsonl / epochs.jsonl to the lengths that manifest names (a crash in
between leaves a manifest describing a prefix of both files), and removes chunk files no manifest
names. Committed chunks are never rewritten.

Memory: the writer holds the window (``retention`` records), the current epoch's records until
the epoch ends (a mid-epoch commit writes them, and keeps them for the epoch's summary row), and
a few counters. Callbacks see the window (``HistoryWindow``) or, when they ask
for it, the lazy full history (``FullHistory``).
"""

from __future__ import annotations

import collections
import hashlib
import numbers
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, overload

import attrs

from nnx_core.dataclass_view import expose_dataclass_fields
from nnx_core.errors import HistoryCorruptionError, ParamsError
from nnx_core.journal_format import (
    GENESIS,
    ChunkEntry,
    JournalFiles,
    JournalManifest,
    chain_next,
    compact_json,
    encode_record,
    epoch_summary,
    read_chunk,
)
from nnx_core.journal_reader import JournalReader, upto
from nnx_core.ports import Storage
from nnx_core.records import IterationDataPoint

DEFAULT_CHUNK = 250


# -- the user's choice ----------------------------------------------------------------------------


@attrs.frozen
class HistoryJournal:
    """Opt-in journal history: keep the last ``retention`` records in memory, commit in chunks.

    ``chunk_size`` is the most records one chunk file holds (default ``min(250, retention)``); it
    may not exceed ``retention``. Not part of the run id.
    """

    retention: int = 1000
    chunk_size: int | None = None

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "retention", _count("retention", self.retention))
        if self.chunk_size is not None:
            size = _count("chunk_size", self.chunk_size)
            if size > self.retention:
                raise ParamsError(
                    "HistoryJournal.chunk_size", f"must not exceed retention ({self.retention}), got {size}"
                )
            object.__setattr__(self, "chunk_size", size)

    @property
    def chunk(self) -> int:
        """Records per chunk file at most."""
        return self.chunk_size or min(DEFAULT_CHUNK, self.retention)


def _count(name: str, value: Any) -> int:
    """A count of ``HistoryJournal``: an integer ≥ 1 (NNx's wording: "requires retention >= 1")."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ParamsError(f"HistoryJournal.{name}", f"requires {name} to be an integer, got {type(value).__name__} {value!r}")
    if value < 1:
        raise ParamsError(f"HistoryJournal.{name}", f"requires {name} >= 1, got {value}")
    return int(value)


expose_dataclass_fields(HistoryJournal)  # dataclasses.fields / replace / asdict, as on NNx's

# -- what callbacks see ---------------------------------------------------------------------------


class HistoryWindow(Sequence[IterationDataPoint]):
    """A read-only, live view of the writer's window: the last ``retention`` records."""

    __slots__ = ("_records",)

    def __init__(self, records: collections.deque[IterationDataPoint]) -> None:
        self._records = records

    def __len__(self) -> int:
        return len(self._records)

    @overload
    def __getitem__(self, i: int) -> IterationDataPoint: ...

    @overload
    def __getitem__(self, i: slice) -> list[IterationDataPoint]: ...

    def __getitem__(self, i: int | slice) -> IterationDataPoint | list[IterationDataPoint]:
        if isinstance(i, slice):
            return [self._records[j] for j in range(*i.indices(len(self._records)))]
        return self._records[i]

    def __iter__(self) -> Iterator[IterationDataPoint]:
        return iter(self._records)

    def __repr__(self) -> str:
        return f"<history window: last {len(self)} records>"


class FullHistory(Sequence[IterationDataPoint]):
    """Every record of the run so far, lazily: committed chunks from storage, then the window.

    For callbacks that declare ``history_access = "full"``. Only the chunk last read is cached;
    the index entries are read once and extended as the writer commits.
    """

    def __init__(self, writer: JournalWriter) -> None:
        self._writer = writer
        self._entries: list[ChunkEntry] | None = None
        self._starts: list[int] = []
        self._cached: tuple[int, list[IterationDataPoint]] | None = None

    def __len__(self) -> int:
        w = self._writer
        return w.manifest.records + len(w.pending)

    def __getitem__(self, i: Any) -> Any:
        n = len(self)
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(n))]
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("history index out of range")
        w = self._writer
        committed = w.manifest.records
        if i >= committed:
            return w.pending[i - committed]
        offset = n - len(w.window)  # the window holds the last len(window) of all n records
        if i >= offset:
            return w.window[i - offset]
        entry, start = self._locate(i)
        return self._chunk(entry)[i - start]

    def __iter__(self) -> Iterator[IterationDataPoint]:
        w = self._writer
        committed, pending, window = w.manifest.records, list(w.pending), list(w.window)
        offset = committed + len(pending) - len(window)
        from_disk = min(committed, offset)
        if from_disk > 0:
            for entry, start in zip(self._load(), self._starts, strict=True):
                if start >= from_disk:
                    break
                yield from self._chunk(entry)[: from_disk - start]
        for i in range(from_disk, committed):
            yield window[i - offset]
        yield from pending

    def _load(self) -> list[ChunkEntry]:
        w = self._writer
        if self._entries is None:
            reader = JournalReader(w.storage, w.files.run_id, w.manifest.last_epoch, w.manifest)
            self._entries, self._starts = [], []
            self.observe(reader.all_entries())
        return self._entries

    def observe(self, entries: Iterable[ChunkEntry]) -> None:
        """The writer committed ``entries`` (only tracked once the index was loaded)."""
        if self._entries is None:
            return
        for entry in entries:
            self._starts.append(self._starts[-1] + self._entries[-1].records if self._entries else 0)
            self._entries.append(entry)

    def forget(self) -> None:
        """The writer rolled back: reload the index on next use."""
        self._entries, self._starts, self._cached = None, [], None

    def _locate(self, i: int) -> tuple[ChunkEntry, int]:
        entries = self._load()
        lo, hi = 0, len(entries) - 1
        while lo < hi:  # the last chunk starting at or before i
            mid = (lo + hi + 1) // 2
            if self._starts[mid] <= i:
                lo = mid
            else:
                hi = mid - 1
        return entries[lo], self._starts[lo]

    def _chunk(self, entry: ChunkEntry) -> list[IterationDataPoint]:
        if self._cached is None or self._cached[0] != entry.seq:
            self._cached = (entry.seq, read_chunk(self._writer.storage, self._writer.files, entry))
        return self._cached[1]

    def __repr__(self) -> str:
        return f"<full history: {len(self)} records>"


# -- writing --------------------------------------------------------------------------------------


class JournalWriter:
    """The journal's writer: the window, the pending epoch, and the commit protocol's history step.

    Open it under the run's lease with LAST's epoch (``None`` for a fresh run; ``in_epoch``: a
    mid-epoch LAST's records of it): an uncommitted tail is discarded first (module docstring).
    ``extend`` adds records; ``commit`` is the "run history" step (all before LAST); ``rollback``
    republishes the previous manifest when LAST failed. ``idps`` is the live read-only window
    callbacks see as ``ctx.idps``; ``open`` the committed records of an epoch still in progress.
    """

    def __init__(
        self, storage: Storage, run_id: str, spec: HistoryJournal, *, last_epoch: int | None, in_epoch: int | None = None
    ) -> None:
        self.storage = storage
        self.files = JournalFiles(run_id)
        self.spec = spec
        self.window: collections.deque[IterationDataPoint] = collections.deque(maxlen=spec.retention)
        self.pending: list[IterationDataPoint] = []
        self.open: list[IterationDataPoint] = []  # committed records of the manifest's open epoch
        self._goes_on = False  # the pending records' last epoch goes on after the next commit
        self.idps = HistoryWindow(self.window)
        self._full: FullHistory | None = None
        self._previous: bytes | None = None  # the manifest readers saw before the last commit
        self._on_disk: bytes | None = None  # the published manifest (None: no manifest file)
        self._clean = True  # index/epochs files are exactly the published manifest's prefixes
        self.manifest = self._reconcile(last_epoch, in_epoch)
        self._read_back()

    def _read_back(self) -> None:
        """The window and the open epoch's records, as the manifest commits them."""
        reader = JournalReader(self.storage, self.files.run_id, self.manifest.last_epoch, self.manifest)
        self.window.clear()  # the same deque: ctx.idps stays live
        self.window.extend(reader.tail(self.spec.retention))
        m = self.manifest
        chunks = [e for e in reader.entries() if e.first_epoch == m.last_epoch] if m.open_records else []
        self.open = [r for entry in chunks for r in read_chunk(self.storage, self.files, entry)]

    # the window and the records -------------------------------------------------------------
    def extend(self, records: Iterable[IterationDataPoint], *, closes: bool = True) -> None:
        """Add records (an epoch's, or its records so far: ``closes=False``, a mid-epoch commit's);
        they commit with the next ``commit``."""
        for record in records:
            self.pending.append(record)
            self.window.append(record)
        self._goes_on = not closes

    def full_view(self) -> FullHistory:
        """The lazy full history (committed chunks + window) for ``history_access = "full"``."""
        if self._full is None:
            self._full = FullHistory(self)
        return self._full

    @property
    def committed_records(self) -> int:
        """How many records the journal has committed."""
        return self.manifest.records

    # the history step -----------------------------------------------------------------------
    def commit(self) -> None:
        """Chunks → index lines → epoch rows → manifest. Nothing is visible before the manifest."""
        if not self.pending:  # nothing to publish: a rollback after it keeps what is on disk
            self._previous = self._on_disk
            return
        m = self.manifest
        epochs = [r.epoch_idx for r in self.pending]
        continues = bool(m.open_records) and epochs[0] == m.last_epoch  # the open epoch goes on
        if epochs != sorted(epochs) or (m.last_epoch is not None and epochs[0] <= m.last_epoch and not continues) or (
            m.open_records and not continues
        ):
            raise ValueError(
                f"run {self.files.run_id}: journal records must come in epoch order after epoch {m.last_epoch}"
                + (f", continuing its open epoch {m.last_epoch}" if m.open_records else "")
            )
        groups = list(_by_epoch(self.pending))
        open_now = (len(self.open) if continues and len(groups) == 1 else 0) + len(groups[-1]) if self._goes_on else 0
        try:
            if not self._clean:  # an earlier step failed: republish this manifest, cut the files to it
                self._publish(m.to_bytes())
                self._cut_files(m)
                self._clean = True
            chain, seq, new_entries, lines, rows = m.index_chain, m.chunks, [], [], []
            for n, epoch_records in enumerate(groups):
                for start in range(0, len(epoch_records), self.spec.chunk):
                    part = epoch_records[start : start + self.spec.chunk]
                    data = b"".join(encode_record(r) for r in part)
                    entry = ChunkEntry(
                        seq=seq, file=self.files.chunk_name(seq), records=len(part),
                        first_iter=part[0].iter_idx, last_iter=part[-1].iter_idx,
                        first_epoch=part[0].epoch_idx, last_epoch=part[-1].epoch_idx,
                        sha256=hashlib.sha256(data).hexdigest(),
                    )
                    self.storage.write(self.files.chunk(seq), data)
                    line = entry.line()
                    chain = chain_next(chain, line)
                    lines.append(line + b"\n")
                    new_entries.append(entry)
                    seq += 1
                if n < len(groups) - 1 or not self._goes_on:  # the epoch ends: its row, from all its records
                    whole = self.open + epoch_records if n == 0 and continues else epoch_records
                    rows.append(compact_json(epoch_summary(whole)).encode("utf-8") + b"\n")
            index_data, rows_data = b"".join(lines), b"".join(rows)
            self._clean = False  # from here on the files may hold bytes no manifest names
            self.storage.append(self.files.index, index_data)
            self.storage.append(self.files.epochs, rows_data)
            new = attrs.evolve(
                m,
                retention=self.spec.retention,
                chunk_size=self.spec.chunk,
                chunks=seq,
                records=m.records + len(self.pending),
                index_bytes=m.index_bytes + len(index_data),
                index_chain=chain,
                epochs=m.epochs + len(rows),
                epochs_bytes=m.epochs_bytes + len(rows_data),
                last_epoch=self.pending[-1].epoch_idx,
                last_iter=self.pending[-1].iter_idx,
                open_records=open_now,
            )
            published = new.to_bytes()
            self.storage.write(self.files.manifest, published)
        except BaseException:
            self._clean = False  # the manifest on disk is unknown too: republished before the next commit
            raise
        self._previous, self._on_disk, self.manifest, self._clean = self._on_disk, published, new, True
        self.open = ((self.open if continues and len(groups) == 1 else []) + groups[-1]) if open_now else []
        self.pending.clear()
        if self._full is not None:
            self._full.observe(new_entries)

    def ensure_published(self) -> None:
        """Publish the (maybe empty) manifest if none exists yet, making the run a journal run."""
        if self._on_disk is None:
            self._publish(self.manifest.to_bytes())

    def rollback(self) -> None:
        """LAST failed: republish the previous manifest (the new chunks become an ignored tail)."""
        self._clean = False
        if self._full is not None:
            self._full.forget()
        previous = self._previous
        self.manifest = (
            JournalManifest(run_id=self.files.run_id, retention=self.spec.retention, chunk_size=self.spec.chunk)
            if previous is None
            else JournalManifest.from_bytes(previous, run_id=self.files.run_id)
        )
        self._publish(previous)
        self._read_back()  # as if opened at the previous manifest

    def _publish(self, manifest: bytes | None) -> None:
        if manifest is None:
            self.storage.delete(self.files.manifest)
        else:
            self.storage.write(self.files.manifest, manifest)
        self._on_disk = manifest

    # opening --------------------------------------------------------------------------------
    def _reconcile(self, last_epoch: int | None, in_epoch: int | None) -> JournalManifest:
        """Cut the journal back to LAST (``in_epoch``: a mid-epoch LAST's records of its epoch);
        return the manifest the writer continues from."""
        files, storage = self.files, self.storage
        reader = JournalReader.open(storage, files.run_id, last_epoch)
        if reader is None:
            manifest = JournalManifest(run_id=files.run_id, retention=self.spec.retention, chunk_size=self.spec.chunk)
        else:
            manifest = reader.manifest
            self._on_disk = manifest.to_bytes()
            entries = reader.all_entries()
            kept = [] if last_epoch is None else upto(entries, last_epoch, in_epoch)
            held = sum(e.records for e in kept if e.first_epoch == last_epoch)
            if last_epoch is not None and in_epoch is None and (manifest.last_epoch is None or manifest.last_epoch < last_epoch):
                raise HistoryCorruptionError(
                    f"run {files.run_id}: the history journal ends at epoch {manifest.last_epoch} but LAST is "
                    f"epoch {last_epoch}; the journal lost committed epochs"
                )
            if last_epoch is not None and (
                (in_epoch is not None and held != in_epoch)
                or (in_epoch is None and manifest.last_epoch == last_epoch and manifest.open_records)
            ):
                what = f"its first {in_epoch} records" if in_epoch is not None else "all of it"
                raise HistoryCorruptionError(
                    f"run {files.run_id}: the history journal holds {held} records of epoch {last_epoch}"
                    f"{' (the epoch not ended)' if manifest.open_records else ''} but LAST commits {what}; the journal "
                    "lost committed records"
                )
            rows = None if last_epoch is None else last_epoch - (in_epoch is not None)
            if len(kept) < len(entries) or manifest.open_records != (in_epoch or 0):  # an uncommitted tail (a
                # crash between the manifest and LAST), or an epoch the journal ended that LAST commits in part
                manifest = _cut_manifest(manifest, kept, reader.epoch_lines(), rows, in_epoch or 0)
                self._publish(manifest.to_bytes())  # first: it names a prefix of both files
        self._cut_files(manifest)
        for name in storage.list(files.folder):
            seq = _chunk_seq(name)
            if seq is not None and seq >= manifest.chunks:  # written but never committed
                storage.delete(f"{files.folder}/{name}")
        return manifest

    def _cut_files(self, manifest: JournalManifest) -> None:
        """Make index.jsonl and epochs.jsonl exactly the manifest's committed prefixes."""
        for path, size in ((self.files.index, manifest.index_bytes), (self.files.epochs, manifest.epochs_bytes)):
            try:
                data = self.storage.read(path)
            except FileNotFoundError:
                if size:
                    raise HistoryCorruptionError(f"run {self.files.run_id}: {path} is missing") from None
                continue
            if len(data) == size:
                continue
            if len(data) < size:
                raise HistoryCorruptionError(f"run {self.files.run_id}: {path} is shorter than its manifest says")
            if size:
                self.storage.write(path, data[:size])
            else:
                self.storage.delete(path)


def _chunk_seq(name: str) -> int | None:
    if name.startswith("chunk-") and name.endswith(".jsonl") and name[6:-6].isdigit():
        return int(name[6:-6])
    return None


def _cut_manifest(
    manifest: JournalManifest,
    kept: list[ChunkEntry],
    epoch_lines: list[tuple[dict[str, Any], int]],
    rows_upto: int | None,
    open_records: int,
) -> JournalManifest:
    """The manifest of the journal cut after ``kept`` entries and the epoch rows ≤ ``rows_upto``
    (``open_records``: the kept records of an epoch that goes on)."""
    chain, size = GENESIS, 0
    for entry in kept:
        line = entry.line()
        chain = chain_next(chain, line)
        size += len(line) + 1
    rows = [(row, n) for row, n in epoch_lines if rows_upto is not None and row["epoch"] <= rows_upto]
    return attrs.evolve(
        manifest,
        chunks=len(kept),
        records=sum(e.records for e in kept),
        index_bytes=size,
        index_chain=chain,
        epochs=len(rows),
        epochs_bytes=sum(n for _, n in rows),
        last_epoch=kept[-1].last_epoch if kept else None,
        last_iter=kept[-1].last_iter if kept else None,
        open_records=open_records,
    )


def _by_epoch(records: Sequence[IterationDataPoint]) -> Iterator[list[IterationDataPoint]]:
    """Consecutive records grouped by epoch."""
    group: list[IterationDataPoint] = []
    for record in records:
        if group and record.epoch_idx != group[-1].epoch_idx:
            yield group
            group = []
        group.append(record)
    if group:
        yield group
