"""Eager run history: every iteration record, rendered as ``idps.csv``.

One row per iteration; nested fields are flattened with dots (``train_edp.loss``,
``val_edp.accuracy``, ``selection.improved``); validation columns are filled on each epoch's last
row only. Rows are rendered once and kept as UTF-8 bytes, so a commit costs one copy of them plus
the file write: the new rows appended, or the whole file when a column joined the header
(``nnx_core.commit``). Every record stays in memory and each render copies the whole file
(O(run): docs/performance.md, "History journal"); long runs should use the history journal.
"""

from __future__ import annotations

import contextlib
import csv
import io
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from nnx_core.errors import CorruptRunError
from nnx_core.records import IterationDataPoint

_INT_COLUMNS = {"iter_idx", "epoch_idx", "batch_idx", "update_count"}
_STR_SUFFIXES = (".metric", ".split", ".mode", ".status")
_BOOL_SUFFIXES = (".improved",)
_LEAF_TYPES = frozenset((float, int, str, bool, type(None)))  # a record's cells, told apart without an ABC check


def flatten(state: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` → ``{"a.b": 1}``."""
    out: dict[str, Any] = {}
    for key, value in state.items():
        name = f"{prefix}{key}"
        if type(value) in _LEAF_TYPES or not isinstance(value, Mapping):
            out[name] = value
        else:
            out.update(flatten(value, name + "."))
    return out


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _is_record_kind(column: str) -> bool:
    """``train_edp.kind`` / ``val_edp.status`` / ...: a record's task kind or status (strings), not
    a metric of that name (``train_edp.metrics.kind`` stays a number)."""
    record, _, leaf = column.partition(".")
    return leaf in ("kind", "status") and bool(record)


def _true(text: str) -> bool:
    return text == "true"


def _cell_reader(column: str) -> Callable[[str], Any]:
    """How a column's non-empty cells read, decided once per header (an empty cell is None)."""
    if column in _INT_COLUMNS or column.endswith(".count"):
        return int
    if column.endswith(_BOOL_SUFFIXES):
        return _true
    if column.endswith(_STR_SUFFIXES) or _is_record_kind(column):
        return str
    return float


def _nested(columns: Sequence[tuple[Callable[[str], Any], tuple[str, ...], str]], row: Sequence[str]) -> dict[str, Any]:
    """One row's record state: each non-empty cell read by its column's reader, at its dotted path."""
    out: dict[str, Any] = {}
    for (read, parents, leaf), text in zip(columns, row, strict=True):
        if text == "":
            continue
        node = out
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = read(text)
    return out


class EagerHistory:
    """The in-memory history of a run and its CSV rendering."""

    def __init__(self, idps: Iterable[IterationDataPoint] = ()) -> None:
        self.idps: list[IterationDataPoint] = []
        self._columns: list[str] = []
        self._flat: list[dict[str, Any]] = []
        self._body = bytearray()  # the rendered rows, UTF-8, grown once per render
        self._rendered = 0
        self.extend(idps)

    def extend(self, idps: Iterable[IterationDataPoint], *, closes: bool = True) -> None:
        """Append records (an epoch's, or its records so far: ``closes=False``; one file holds
        both alike)."""
        known = set(self._columns)
        for idp in idps:
            flat = flatten(idp.state())
            self.idps.append(idp)
            self._flat.append(flat)
            for key in flat:
                if key not in known:
                    known.add(key)
                    self._columns.append(key)
                    self._body.clear()  # header changed: re-render every row once
                    self._rendered = 0

    def truncate_to_epoch(self, epoch: int | None) -> None:
        """Drop records of epochs after ``epoch`` (None drops everything)."""
        keep = 0 if epoch is None else sum(1 for idp in self.idps if idp.epoch_idx <= epoch)
        del self.idps[keep:], self._flat[keep:]
        self._body.clear()
        self._rendered = 0

    def render(self) -> bytes:
        """The whole ``idps.csv`` as bytes (new rows rendered once, by the stdlib csv writer)."""
        columns = self._columns
        if self._rendered < len(self._flat):
            flags = [i for i, c in enumerate(columns) if c.endswith(_BOOL_SUFFIXES)]
            rows = []
            for flat in self._flat[self._rendered :]:
                row = [flat.get(c) for c in columns]
                for i in flags:
                    row[i] = _cell(row[i])
                rows.append(row)
            buffer = io.StringIO()
            csv.writer(buffer, lineterminator="\n").writerows(rows)
            self._body += buffer.getvalue().encode("utf-8")
            self._rendered = len(self._flat)
        header = io.StringIO()
        csv.writer(header, lineterminator="\n").writerow(columns)
        return b"".join((header.getvalue().encode("utf-8"), self._body))  # one copy of the rows


_PARSED: dict[bytes, list[IterationDataPoint]] | None = None  # inside ``parsed_once``: the bytes parsed, their records


@contextlib.contextmanager
def parsed_once() -> Iterator[None]:
    """Within the block, ``parse_history`` of bytes it already parsed returns those records again
    (records are frozen): a resume reads the history in admission and again in ``NNRun.load``, and
    parsing is most of what a resume costs past the payload (docs/performance.md). Nothing is kept
    after the block."""
    global _PARSED
    outer, _PARSED = _PARSED, _PARSED if _PARSED is not None else {}
    try:
        yield
    finally:
        _PARSED = outer


def parse_history(data: bytes) -> list[IterationDataPoint]:
    """Parse ``idps.csv`` bytes back into records; an unreadable file raises CorruptRunError."""
    cache = _PARSED
    if cache is None:
        return _parse(data)
    if data not in cache:
        cache.clear()  # one file at a time
        cache[data] = _parse(data)
    return list(cache[data])


def _parse(data: bytes) -> list[IterationDataPoint]:
    try:
        reader = csv.reader(io.StringIO(data.decode("utf-8")))
        rows = list(reader)
    except (UnicodeDecodeError, csv.Error) as exc:
        raise CorruptRunError(f"idps.csv is unreadable: {exc}") from exc
    if not rows:
        return []
    header, body = rows[0], rows[1:]
    columns = [(_cell_reader(col), tuple(col.split(".")[:-1]), col.split(".")[-1]) for col in header]
    out: list[IterationDataPoint] = []
    for number, row in enumerate(body, start=2):
        if len(row) != len(header):
            raise CorruptRunError(f"idps.csv line {number} has {len(row)} cells, the header has {len(header)}")
        try:
            out.append(IterationDataPoint.from_state(_nested(columns, row)))
        except (TypeError, ValueError) as exc:
            raise CorruptRunError(f"idps.csv line {number} is not a valid record: {exc}") from exc
    return out


def epoch_rows(idps: Iterable[IterationDataPoint]) -> dict[int, IterationDataPoint]:
    """The last record of each epoch (where validation and the decision live)."""
    rows: dict[int, IterationDataPoint] = {}
    for idp in idps:
        rows[idp.epoch_idx] = idp
    return rows


def coverage_problems(epochs: Iterable[int], last_epoch: int, what: str, unit: str = "records") -> list[str]:
    """Problems with the committed epochs a history holds: it must hold LAST's epoch and every
    epoch from its first up to it (``what`` and ``unit`` name the history in the messages)."""
    committed = sorted(set(epochs))
    if not committed or committed[-1] != last_epoch:
        return [f"{what} has no {unit} for LAST's epoch {last_epoch}"]
    missing = sorted(set(range(committed[0], last_epoch + 1)) - set(committed))
    return [f"{what} misses committed epoch(s) {missing}"] if missing else []


def continuity_problems(records: Sequence[IterationDataPoint], what: str) -> list[str]:
    """Problems with the order of a history's committed records — what a resume that wrote over
    or skipped records would leave: ``iter_idx`` must count 0, 1, 2, ... without a gap or repeat,
    epochs must never go back, and each epoch's ``batch_idx`` must count from 0 (at most one
    problem of each kind is reported, at its first record)."""
    found: dict[str, str] = {}
    previous: IterationDataPoint | None = None
    for position, r in enumerate(records):
        if r.iter_idx != position and "iter" not in found:
            found["iter"] = f"{what}'s iter_idx jumps to {r.iter_idx} at record {position} (expected {position})"
        if previous is not None and r.epoch_idx < previous.epoch_idx and "epoch" not in found:
            found["epoch"] = f"{what} goes back from epoch {previous.epoch_idx} to {r.epoch_idx} at iter_idx {r.iter_idx}"
        expected = previous.batch_idx + 1 if previous is not None and previous.epoch_idx == r.epoch_idx else 0
        if r.batch_idx != expected and "batch" not in found:
            found["batch"] = f"{what}'s epoch {r.epoch_idx} has batch_idx {r.batch_idx} at iter_idx {r.iter_idx} (expected {expected})"
        previous = r
    return list(found.values())
