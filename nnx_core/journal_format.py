"""The history journal's on-disk format: file names, the manifest, index lines and the record codec.

A run with ``history=HistoryJournal(...)`` (``nnx_core.journal``) keeps its history under
``<run id>/history/``::

    chunk-%08d.jsonl  immutable; at most ``chunk`` records, one compact JSON ``idp.state()`` a line.
                      Written once (atomically); an epoch never shares a chunk with another epoch,
                      and every commit starts a new chunk (a mid-epoch commit ends one).
    index.jsonl       one line per chunk, appended: sorted-key compact JSON
                      ``{seq, file, records, first_iter, last_iter, first_epoch, last_epoch, sha256}``.
                      Lines are hash-chained: ``chain = sha256(prev_chain + line)``, genesis 64 zeros.
    epochs.jsonl      one summary row per epoch, appended when the epoch ends (losses, errors,
                      monitor value, improved).
    journal.json      the manifest: how many chunks/records/epoch rows are committed, the byte
                      lengths of index.jsonl and epochs.jsonl they occupy, the index chain, and
                      ``open_records``: the records of ``last_epoch`` a mid-epoch commit committed
                      while the epoch has no summary row yet (absent: every epoch is whole).
                      Replaced atomically; it is the only file a reader trusts for lengths.

Here: the paths (``JournalFiles``), the manifest (``JournalManifest``) and index lines
(``ChunkEntry``) with their canonical bytes, the chain, the encoding of records and epoch rows,
and the verifying decoders of the index (``parse_index``) and of a chunk (``read_chunk``): a
chunk whose SHA-256 or records disagree with its index line, a broken chain or an index that does
not match the manifest raises ``HistoryCorruptionError``. Reading a run's history up to LAST is
``nnx_core.journal_reader``; writing it, ``nnx_core.journal``.
"""

from __future__ import annotations

import hashlib
import json
import math
import numbers
from collections.abc import Sequence
from typing import Any

import attrs

from nnx_core.errors import HistoryCorruptionError
from nnx_core.identity import validate_run_id
from nnx_core.ports import Storage
from nnx_core.records import IterationDataPoint

JOURNAL_FORMAT = "nnx.history-journal"
JOURNAL_VERSION = 1
GENESIS = "0" * 64
HISTORY_FOLDER = "history"

class JournalFiles:
    """Paths of one run's journal."""

    def __init__(self, run_id: str, root: str | None = None) -> None:
        """``root``: the run's folder when it is not the one its id names (``RunFiles.root``)."""
        self.run_id = validate_run_id(run_id)
        self.folder = f"{root if root is not None else run_id}/{HISTORY_FOLDER}"
        self.manifest = f"{self.folder}/journal.json"
        self.index = f"{self.folder}/index.jsonl"
        self.epochs = f"{self.folder}/epochs.jsonl"

    @staticmethod
    def chunk_name(seq: int) -> str:
        """File name of chunk ``seq``."""
        return f"chunk-{seq:08d}.jsonl"

    def chunk(self, seq: int) -> str:
        """Path of chunk ``seq``."""
        return f"{self.folder}/{self.chunk_name(seq)}"



@attrs.frozen(kw_only=True)
class JournalManifest:
    """What is committed: counts, the byte lengths of the appended files, and the index chain."""

    run_id: str
    retention: int
    chunk_size: int
    chunks: int = 0
    records: int = 0
    index_bytes: int = 0
    index_chain: str = GENESIS
    epochs: int = 0
    epochs_bytes: int = 0
    last_epoch: int | None = None
    last_iter: int | None = None
    open_records: int = 0  # records of last_epoch committed inside it (mid-epoch): no summary row for it yet

    def to_bytes(self) -> bytes:
        """Canonical JSON (sorted keys, indent 1); ``open_records`` only when there are (so a
        manifest of whole epochs has the bytes it always had)."""
        doc = {"format": JOURNAL_FORMAT, "version": JOURNAL_VERSION, **attrs.asdict(self)}
        if not self.open_records:
            del doc["open_records"]
        return json.dumps(doc, sort_keys=True, indent=1).encode("utf-8")

    @classmethod
    def from_bytes(cls, data: bytes, *, run_id: str) -> JournalManifest:
        """Parse and check a manifest; anything else is HistoryCorruptionError."""
        where = f"run {run_id}: history/journal.json"
        try:
            doc = json.loads(data.decode("utf-8"))
            if not isinstance(doc, dict):
                raise TypeError("not a history journal manifest (not a JSON object)")
            if doc.get("format") != JOURNAL_FORMAT:
                raise ValueError(f"not a history journal manifest (format {doc.get('format')!r})")
            if doc.get("version") != JOURNAL_VERSION:
                raise ValueError(f"unsupported journal version {doc.get('version')!r}; upgrade NNx to read it")
            fields = {f.name for f in attrs.fields(cls)}
            missing = sorted(fields - {"open_records"} - set(doc))  # every manifest writes them (unknown keys are kept for later)
            if missing:
                raise ValueError(f"missing key {missing[0]!r}")
            manifest = cls(**{k: v for k, v in doc.items() if k in fields})
            ints = (manifest.retention, manifest.chunk_size, manifest.chunks, manifest.records,
                    manifest.index_bytes, manifest.epochs, manifest.epochs_bytes, manifest.open_records)
            if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in ints):
                raise ValueError("counts and lengths must be non-negative integers")
        except (ValueError, TypeError, UnicodeDecodeError) as exc:
            raise HistoryCorruptionError(
                f"{where} is unreadable ({exc}); nothing was erased (the manifest of the history journal is malformed)"
            ) from exc
        if manifest.run_id != run_id:
            raise HistoryCorruptionError(f"{where} belongs to run {manifest.run_id} (copied or mixed files)")
        return manifest


@attrs.frozen(kw_only=True)
class ChunkEntry:
    """One index line: a chunk file, what it holds and its SHA-256."""

    seq: int
    file: str
    records: int
    first_iter: int
    last_iter: int
    first_epoch: int
    last_epoch: int
    sha256: str

    def line(self) -> bytes:
        """The index line (without its newline): sorted-key compact JSON."""
        return compact_json(attrs.asdict(self)).encode("utf-8")


def chain_next(previous: str, line: bytes) -> str:
    """The index chain after ``line``: ``sha256(previous_chain_ascii + line_bytes)``."""
    return hashlib.sha256(previous.encode("ascii") + line).hexdigest()


def compact_json(doc: Any) -> str:
    """``doc`` as sorted-key compact JSON (NaN kept; NumPy / tensor scalars as plain numbers)."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), allow_nan=True, default=_plain)


def _plain(value: Any) -> Any:
    """NumPy / 0-d tensor scalars (anything with ``.item()``) and other numbers as plain numbers."""
    if hasattr(value, "item"):
        try:
            return value.item()
        except (ValueError, RuntimeError) as exc:  # an array of several values: no number to store
            raise TypeError(f"a history record cannot store as JSON a {type(value).__name__} of {getattr(value, 'size', '?')} "
                            "values: a record holds numbers (reduce it, or keep it out of the record)") from exc
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    raise TypeError(f"cannot store {type(value).__name__} in a history record (cannot store as JSON)")


def encode_record(idp: IterationDataPoint) -> bytes:
    """One chunk line (with its newline)."""
    return compact_json(idp.state()).encode("utf-8") + b"\n"


def _finite(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else float(value)


def _mean(pairs: list[tuple[float, int]]) -> float | None:
    """The weighted mean (each weight ≥ 1: a record's count, never negative, or 1 when it is 0 or unset)."""
    if not pairs:
        return None
    return sum(v * w for v, w in pairs) / sum(w for _, w in pairs)


def epoch_summary(records: Sequence[IterationDataPoint]) -> dict[str, Any]:
    """The epochs.jsonl row of one epoch's records (train means weighted by batch size; NaN → null)."""
    last = records[-1]
    losses = [(r.train_edp.loss, r.train_edp.count or 1) for r in records if r.train_edp.loss is not None]
    errors = [(r.train_edp.error, r.train_edp.count or 1) for r in records if r.train_edp.error is not None]
    val, sel = last.val_edp, last.selection
    return {
        "epoch": last.epoch_idx,
        "records": len(records),
        "train_loss": _finite(_mean(losses)),
        "train_err": _finite(_mean(errors)),
        "val_loss": _finite(val.loss) if val else None,
        "val_err": _finite(val.error) if val else None,
        "val_acc": _finite(val.accuracy) if val else None,
        "monitor": _finite(sel.value) if sel else None,
        "improved": sel.improved if sel else None,
    }

def parse_index(data: bytes, manifest: JournalManifest, files: JournalFiles) -> list[ChunkEntry]:
    """The committed index entries: the manifest's byte prefix of index.jsonl, chain-verified."""
    where = f"run {files.run_id}: history/index.jsonl"
    if len(data) < manifest.index_bytes:
        raise HistoryCorruptionError(
            f"{where} holds {len(data)} bytes, the manifest commits {manifest.index_bytes} (truncated file)"
        )
    prefix = data[: manifest.index_bytes]
    if prefix and not prefix.endswith(b"\n"):
        raise HistoryCorruptionError(f"{where} does not match its manifest: the committed bytes do not end a line")
    entries: list[ChunkEntry] = []
    chain, records, last_epoch = GENESIS, 0, None
    for number, line in enumerate(prefix.split(b"\n")[:-1] if prefix else []):
        try:
            entry = ChunkEntry(**json.loads(line.decode("utf-8")))
        except (ValueError, TypeError, UnicodeDecodeError) as exc:
            raise HistoryCorruptionError(f"{where} line {number + 1} is unreadable: {exc}") from exc
        if entry.line() != line or entry.seq != number or entry.file != files.chunk_name(number):
            raise HistoryCorruptionError(f"{where} line {number + 1} does not name chunk {number} (index mismatch)")
        if entry.records < 1 or entry.first_iter > entry.last_iter or entry.first_epoch != entry.last_epoch:
            raise HistoryCorruptionError(f"{where} line {number + 1} is inconsistent (index mismatch)")
        if last_epoch is not None and entry.first_epoch < last_epoch:
            raise HistoryCorruptionError(f"{where} line {number + 1}: epochs go backwards (index mismatch)")
        chain = chain_next(chain, line)
        records += entry.records
        last_epoch = entry.last_epoch
        entries.append(entry)
    if chain != manifest.index_chain or len(entries) != manifest.chunks or records != manifest.records:
        raise HistoryCorruptionError(
            f"{where} does not match its manifest (hash chain, {len(entries)} chunks / {records} records vs "
            f"{manifest.chunks} / {manifest.records}); the history was altered or mixed"
        )
    return entries


def read_chunk(storage: Storage, files: JournalFiles, entry: ChunkEntry) -> list[IterationDataPoint]:
    """A chunk's records, verified against its index line."""
    where = f"run {files.run_id}: history/{entry.file}"
    try:
        data = storage.read(files.chunk(entry.seq))
    except FileNotFoundError as exc:
        raise HistoryCorruptionError(f"{where} is missing; the committed history cannot be read") from exc
    if hashlib.sha256(data).hexdigest() != entry.sha256:
        raise HistoryCorruptionError(
            f"run {files.run_id}: history chunk {entry.seq} ({entry.file}) is corrupt: it does not match its SHA-256 "
            "in the index (corrupted on disk)"
        )
    try:
        records = [IterationDataPoint.from_state(json.loads(line)) for line in data.decode("utf-8").splitlines()]
    except (ValueError, TypeError, UnicodeDecodeError) as exc:
        raise HistoryCorruptionError(f"{where} holds an unreadable record: {exc}") from exc
    if (
        len(records) != entry.records
        or records[0].iter_idx != entry.first_iter
        or records[-1].iter_idx != entry.last_iter
        or any(r.epoch_idx != entry.first_epoch for r in records)
    ):
        raise HistoryCorruptionError(f"{where} does not hold what its index line says (index mismatch)")
    return records
