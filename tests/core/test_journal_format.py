"""``nnx_core.journal_format``: the journal's paths, manifest, index lines, chain, record codec and
the verifying decoders, pinned from the module's stated format (its docstring), without torch."""

from __future__ import annotations

import fractions
import hashlib
import json
import math
import numbers

import attrs
import pytest

from nnx_core.errors import HistoryCorruptionError, InvalidRunIdError
from nnx_core.journal_format import (
    GENESIS,
    ChunkEntry,
    JournalFiles,
    JournalManifest,
    chain_next,
    compact_json,
    encode_record,
    epoch_summary,
    parse_index,
    read_chunk,
)
from nnx_core.records import EvaluationDataPoint, IterationDataPoint, MonitorRecord
from nnx_adapters.storage.memory import MemoryStorage

RID = "r" * 32
FILES = JournalFiles(RID)


def idp(iter_idx: int, epoch: int, **kw) -> IterationDataPoint:
    kw.setdefault("train_edp", EvaluationDataPoint(loss=1.0, count=2))
    return IterationDataPoint(iter_idx=iter_idx, epoch_idx=epoch, batch_idx=iter_idx, lr=0.1, **kw)


def entry(seq: int, epoch: int, first: int, n: int = 1, sha: str = "0" * 64) -> ChunkEntry:
    return ChunkEntry(
        seq=seq, file=f"chunk-{seq:08d}.jsonl", records=n, first_iter=first, last_iter=first + n - 1,
        first_epoch=epoch, last_epoch=epoch, sha256=sha,
    )


def manifest_with(value, **changes):
    """``value`` (a manifest or an index entry) with ``changes``."""
    return attrs.evolve(value, **changes)


def index_of(entries: list[ChunkEntry], **manifest_kw) -> tuple[bytes, JournalManifest]:
    """index.jsonl holding ``entries`` and the manifest that commits all of them (chain from the
    docstring: ``sha256(prev_chain + line)``, genesis 64 zeros)."""
    chain = "0" * 64
    lines = []
    for e in entries:
        line = json.dumps(
            {"seq": e.seq, "file": e.file, "records": e.records, "first_iter": e.first_iter,
             "last_iter": e.last_iter, "first_epoch": e.first_epoch, "last_epoch": e.last_epoch,
             "sha256": e.sha256},
            sort_keys=True, separators=(",", ":"),
        ).encode()
        chain = hashlib.sha256(chain.encode() + line).hexdigest()
        lines.append(line + b"\n")
    data = b"".join(lines)
    fields = {"run_id": RID, "retention": 4, "chunk_size": 2, "chunks": len(entries),
              "records": sum(e.records for e in entries), "index_bytes": len(data), "index_chain": chain}
    fields.update(manifest_kw)
    return data, JournalManifest(**fields)


# -- paths ----------------------------------------------------------------------------------------


def test_paths_of_a_runs_journal():
    files = JournalFiles("abc")
    assert (files.run_id, files.folder) == ("abc", "abc/history")
    assert (files.manifest, files.index, files.epochs) == (
        "abc/history/journal.json", "abc/history/index.jsonl", "abc/history/epochs.jsonl"
    )
    assert JournalFiles.chunk_name(7) == "chunk-00000007.jsonl"
    assert files.chunk(12345678) == "abc/history/chunk-12345678.jsonl"


def test_an_unsafe_run_id_is_refused():
    with pytest.raises(InvalidRunIdError):
        JournalFiles("../x")


# -- the manifest ---------------------------------------------------------------------------------


def test_a_fresh_manifest_commits_nothing():
    m = JournalManifest(run_id=RID, retention=3, chunk_size=2)
    assert (m.chunks, m.records, m.index_bytes, m.index_chain) == (0, 0, 0, "0" * 64)
    assert (m.epochs, m.epochs_bytes, m.last_epoch, m.last_iter) == (0, 0, None, None)
    assert GENESIS == "0" * 64


def test_manifest_bytes_are_canonical_json_and_round_trip():
    m = JournalManifest(run_id=RID, retention=5, chunk_size=2, chunks=3, records=7, index_bytes=99,
                        index_chain="a" * 64, epochs=2, epochs_bytes=40, last_epoch=1, last_iter=6)
    doc = {"format": "nnx.history-journal", "version": 1, "run_id": RID, "retention": 5, "chunk_size": 2,
           "chunks": 3, "records": 7, "index_bytes": 99, "index_chain": "a" * 64, "epochs": 2,
           "epochs_bytes": 40, "last_epoch": 1, "last_iter": 6}
    assert m.to_bytes() == json.dumps(doc, sort_keys=True, indent=1).encode("utf-8")
    assert JournalManifest.from_bytes(m.to_bytes(), run_id=RID) == m
    fresh = JournalManifest(run_id=RID, retention=1, chunk_size=1)
    assert JournalManifest.from_bytes(fresh.to_bytes(), run_id=RID) == fresh  # zero counts are fine


def manifest_doc(**changes) -> bytes:
    doc = json.loads(JournalManifest(run_id=RID, retention=4, chunk_size=2, chunks=1, records=2).to_bytes())
    doc.update(changes)
    return json.dumps(doc).encode()


def test_a_manifest_with_unknown_keys_still_reads():
    m = JournalManifest.from_bytes(manifest_doc(future_field=3), run_id=RID)
    assert (m.chunks, m.records) == (1, 2)


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"\xff\xfe", "utf-8"),
        (b"{not json", "Expecting property name"),
        (manifest_doc(format="something-else"), r"\(not a history journal manifest \(format 'something-else'\)\)"),
        (manifest_doc(version=2), r"\(unsupported journal version 2; upgrade NNx to read it\); nothing"),
        (manifest_doc(version=None), "unsupported journal version None"),
        (manifest_doc(chunks=-1), r"\(counts and lengths must be non-negative integers\); nothing"),
        (manifest_doc(records=1.0), r"\(counts and lengths must be non-negative integers\); nothing"),
        (manifest_doc(index_bytes=True), r"\(counts and lengths must be non-negative integers\); nothing"),
        (manifest_doc(retention="4"), "counts and lengths"),
        (manifest_doc(chunk_size=-1), "counts and lengths"),
        (manifest_doc(epochs=-2), "counts and lengths"),
        (manifest_doc(epochs_bytes=-3), "counts and lengths"),
        (manifest_doc(retention=-4), "counts and lengths"),
        (manifest_doc(records=-5), "counts and lengths"),
        (manifest_doc(index_bytes=-6), "counts and lengths"),
        (manifest_doc(chunks=False), "counts and lengths"),
    ],
)
def test_a_damaged_manifest_is_a_corruption_error_that_erases_nothing(data, words):
    with pytest.raises(HistoryCorruptionError, match=f"run {RID}: history/journal.json is unreadable .*{words}"):
        JournalManifest.from_bytes(data, run_id=RID)
    with pytest.raises(HistoryCorruptionError, match="nothing was erased"):
        JournalManifest.from_bytes(data, run_id=RID)


@pytest.mark.parametrize("data", [b"[]", b"null", b'"nnx.history-journal"', b"3"])
def test_a_manifest_that_is_not_a_json_object_is_a_corruption_error(data):
    with pytest.raises(HistoryCorruptionError, match=rf"run {RID}: history/journal.json is unreadable "
                                                      r"\(not a history journal manifest \(not a JSON object\)\)"):
        JournalManifest.from_bytes(data, run_id=RID)


def test_a_manifest_without_its_fields_is_a_corruption_error():
    data = json.dumps({"format": "nnx.history-journal", "version": 1}).encode()
    with pytest.raises(HistoryCorruptionError, match="is unreadable"):
        JournalManifest.from_bytes(data, run_id=RID)


def test_a_manifest_of_another_run_is_refused():
    with pytest.raises(HistoryCorruptionError, match=f"run other: history/journal.json belongs to run {RID} "
                                                      r"\(copied or mixed files\)"):
        JournalManifest.from_bytes(manifest_doc(), run_id="other")


# -- index lines, the chain, the codec ------------------------------------------------------------


def test_an_index_line_is_sorted_key_compact_json():
    e = entry(3, epoch=2, first=10, n=4, sha="f" * 64)
    assert e.line() == (
        b'{"file":"chunk-00000003.jsonl","first_epoch":2,"first_iter":10,"last_epoch":2,"last_iter":13,'
        b'"records":4,"seq":3,"sha256":"' + b"f" * 64 + b'"}'
    )


def test_the_chain_hashes_the_previous_chain_then_the_line():
    assert chain_next(GENESIS, b"line") == hashlib.sha256(b"0" * 64 + b"line").hexdigest()
    assert chain_next("ab", b"") == hashlib.sha256(b"ab").hexdigest()


class Scalar:
    """A NumPy / 0-d tensor scalar stand-in: it has ``.item()``."""

    def item(self):
        return 2.5


class Count:
    """An integral number that is not an ``int``."""

    def __int__(self):
        return 7


numbers.Integral.register(Count)


def test_compact_json_sorts_keys_keeps_nan_and_stores_scalars_as_plain_numbers():
    assert compact_json({"b": 1, "a": [1.5, None]}) == '{"a":[1.5,null],"b":1}'
    assert compact_json({"x": math.nan, "y": math.inf}) == '{"x":NaN,"y":Infinity}'
    assert compact_json({"s": Scalar(), "c": Count(), "f": fractions.Fraction(1, 4)}) == '{"c":7,"f":0.25,"s":2.5}'


def test_compact_json_refuses_what_is_not_a_number():
    with pytest.raises(TypeError, match="cannot store object in a history record"):
        compact_json({"x": object()})


def test_a_record_is_its_state_as_one_compact_json_line():
    r = idp(4, 1, train_edp=EvaluationDataPoint(loss=math.nan, count=3))
    line = encode_record(r)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert line == compact_json(r.state()).encode("utf-8") + b"\n"
    assert b" " not in line and b"NaN" in line
    assert IterationDataPoint.from_state(json.loads(line)).iter_idx == 4


# -- epoch rows -----------------------------------------------------------------------------------


def test_an_epoch_row_weights_train_means_by_batch_size_and_reads_the_last_record():
    sel = MonitorRecord(metric="loss", split="val", mode="min", value=0.25, status="ok", improved=True, best=0.25)
    records = [
        idp(0, 3, train_edp=EvaluationDataPoint(loss=1.0, error=0.5, count=1)),
        idp(1, 3, train_edp=EvaluationDataPoint(loss=4.0, count=3)),  # no error: left out of its mean
        idp(2, 3, train_edp=EvaluationDataPoint(loss=None, error=0.1, count=4),
            val_edp=EvaluationDataPoint(loss=0.5, error=0.2, accuracy=0.8), selection=sel),
    ]
    assert epoch_summary(records) == {
        "epoch": 3, "records": 3,
        "train_loss": (1.0 * 1 + 4.0 * 3) / 4, "train_err": (0.5 * 1 + 0.1 * 4) / 5,
        "val_loss": 0.5, "val_err": 0.2, "val_acc": 0.8, "monitor": 0.25, "improved": True,
    }


def test_an_epoch_row_counts_a_batch_without_a_size_once_and_stores_non_finite_as_null():
    records = [
        idp(0, 0, train_edp=EvaluationDataPoint(loss=2.0, error=1.0)),
        idp(1, 0, train_edp=EvaluationDataPoint(loss=4.0, error=math.inf, count=0)),
    ]
    row = epoch_summary(records)
    assert row["train_loss"] == 3.0 and type(row["train_loss"]) is float
    assert row["train_err"] is None
    records = [
        idp(0, 0, train_edp=EvaluationDataPoint(loss=2.0, error=1.0)),
        idp(1, 0, train_edp=EvaluationDataPoint(loss=4.0, error=3.0, count=3)),
    ]
    row = epoch_summary(records)
    assert (row["train_loss"], row["train_err"]) == ((2.0 + 4.0 * 3) / 4, (1.0 + 3.0 * 3) / 4)
    assert (row["val_loss"], row["val_err"], row["val_acc"], row["monitor"], row["improved"]) == (None,) * 5


def test_an_epoch_row_without_train_values_and_with_nan_validation():
    sel = MonitorRecord(metric="loss", split="val", mode="min", value=math.nan, status="missing", improved=False)
    records = [idp(5, 1, train_edp=EvaluationDataPoint(),
                   val_edp=EvaluationDataPoint(loss=math.nan, error=2, accuracy=math.inf), selection=sel)]
    row = epoch_summary(records)
    assert (row["train_loss"], row["train_err"], row["val_loss"], row["val_acc"], row["monitor"]) == (None,) * 5
    assert row["val_err"] == 2.0 and type(row["val_err"]) is float
    assert row["improved"] is False


# -- parse_index ----------------------------------------------------------------------------------


def test_parse_index_returns_the_committed_entries_and_ignores_unpublished_bytes():
    entries = [entry(0, 0, 0, n=2), entry(1, 0, 2, n=1), entry(2, 1, 3, n=1)]
    data, m = index_of(entries)
    assert parse_index(data, m, FILES) == entries
    assert parse_index(data + b'{"seq":3}\n', m, FILES) == entries  # appended, never published
    _, m1 = index_of(entries[:1])
    assert parse_index(data, m1, FILES) == entries[:1]


def test_an_empty_index_commits_nothing():
    _, m = index_of([])
    assert parse_index(b"", m, FILES) == []
    assert parse_index(b"junk", m, FILES) == []


def index_error(data: bytes, m: JournalManifest, words: str) -> None:
    with pytest.raises(HistoryCorruptionError, match=f"run {RID}: history/index.jsonl {words}"):
        parse_index(data, m, FILES)


def test_a_truncated_index_is_refused():
    data, m = index_of([entry(0, 0, 0)])
    index_error(data[:-1], m, rf"holds {len(data) - 1} bytes, the manifest commits {len(data)} \(truncated file\)")


def test_committed_bytes_that_do_not_end_a_line_are_refused():
    data, m = index_of([entry(0, 0, 0)])
    m = manifest_with(m, index_bytes=len(data) - 1)
    with pytest.raises(HistoryCorruptionError, match=rf"run {RID}: history/index.jsonl does not match its manifest: "
                                                      r"the committed bytes do not end a line"):
        parse_index(data, m, FILES)


def test_an_unreadable_index_line_is_refused():
    good, _ = index_of([entry(0, 0, 0)])
    for bad in (b"{nope\n", b"\xff\n", b'{"seq":0}\n', b"[1]\n"):
        data = good + bad
        _, m = index_of([entry(0, 0, 0)], index_bytes=len(data))
        index_error(data, m, "line 2 is unreadable: ")


@pytest.mark.parametrize(
    "bad",
    [
        entry(1, 0, 1),  # seq 1 on line 1
        ChunkEntry(seq=0, file="chunk-1.jsonl", records=1, first_iter=0, last_iter=0, first_epoch=0,
                   last_epoch=0, sha256="0" * 64),
    ],
)
def test_an_index_line_that_does_not_name_its_chunk_is_refused(bad):
    data, m = index_of([bad])
    index_error(data, m, r"line 1 does not name chunk 0 \(index mismatch\)")


def test_a_non_canonical_index_line_is_refused():
    e = entry(0, 0, 0)
    line = json.dumps(json.loads(e.line())).encode() + b"\n"  # spaces after separators
    _, m = index_of([e])
    m = manifest_with(m, index_bytes=len(line), index_chain=chain_next(GENESIS, line[:-1]))
    index_error(line, m, r"line 1 does not name chunk 0")


@pytest.mark.parametrize(
    "changes",
    [{"records": 0}, {"records": -1}, {"first_iter": 5, "last_iter": 4}, {"first_epoch": 0, "last_epoch": 1}],
)
def test_an_inconsistent_index_line_is_refused(changes):
    bad = manifest_with(entry(0, 0, 0), **changes)
    data, m = index_of([bad])
    index_error(data, m, r"line 1 is inconsistent \(index mismatch\)")


def test_the_smallest_consistent_index_lines_are_accepted():
    entries = [entry(0, 0, 0, n=1), entry(1, 0, 1, n=1)]  # one record each, two chunks of one epoch
    data, m = index_of(entries)
    assert parse_index(data, m, FILES) == entries


def test_epochs_going_backwards_are_refused():
    data, m = index_of([entry(0, 2, 0), entry(1, 1, 1)])
    index_error(data, m, r"line 2: epochs go backwards \(index mismatch\)")


@pytest.mark.parametrize(
    "changes",
    [{"index_chain": "1" * 64}, {"chunks": 1}, {"chunks": 3}, {"records": 3}, {"records": 1}],
)
def test_an_index_that_does_not_match_the_manifest_is_refused(changes):
    data, m = index_of([entry(0, 0, 0), entry(1, 1, 1)])
    m = manifest_with(m, **changes)
    index_error(
        data, m,
        rf"does not match its manifest \(hash chain, 2 chunks / 2 records vs {m.chunks} / {m.records}\); "
        "the history was altered or mixed",
    )


# -- read_chunk -----------------------------------------------------------------------------------


def stored_chunk(rows: list[IterationDataPoint], **changes) -> tuple[MemoryStorage, ChunkEntry]:
    data = b"".join(encode_record(r) for r in rows)
    storage = MemoryStorage()
    storage.write(FILES.chunk(0), data)
    e = ChunkEntry(seq=0, file=FILES.chunk_name(0), records=len(rows), first_iter=rows[0].iter_idx,
                   last_iter=rows[-1].iter_idx, first_epoch=rows[0].epoch_idx, last_epoch=rows[0].epoch_idx, sha256=hashlib.sha256(data).hexdigest())
    return storage, manifest_with(e, **changes)


def test_read_chunk_returns_the_records_of_a_verified_chunk():
    records = [idp(3, 1), idp(4, 1), idp(5, 1)]
    storage, e = stored_chunk(records)
    assert read_chunk(storage, FILES, e) == records


def chunk_error(storage, e, words):
    with pytest.raises(HistoryCorruptionError, match=f"run {RID}: history/chunk-00000000.jsonl {words}"):
        read_chunk(storage, FILES, e)


def test_a_missing_chunk_is_refused():
    chunk_error(MemoryStorage(), entry(0, 0, 0), "is missing; the committed history cannot be read")


def test_a_chunk_that_does_not_match_its_sha256_is_refused():
    storage, e = stored_chunk([idp(0, 0)], sha256="0" * 64)
    with pytest.raises(HistoryCorruptionError, match=rf"run {RID}: history chunk 0 \(chunk-00000000.jsonl\) is corrupt: "
                                                      r"it does not match its SHA-256 in the index \(corrupted on disk\)"):
        read_chunk(storage, FILES, e)


def test_a_chunk_with_an_unreadable_record_is_refused():
    for data in (b"{bad\n", b"\xff\n", b'{"iter_idx":0}\n'):
        storage = MemoryStorage()
        storage.write(FILES.chunk(0), data)
        e = manifest_with(entry(0, 0, 0), sha256=hashlib.sha256(data).hexdigest())
        chunk_error(storage, e, "holds an unreadable record: ")


@pytest.mark.parametrize(
    "changes", [{"records": 2}, {"first_iter": 2}, {"last_iter": 4}, {"first_epoch": 0, "last_epoch": 0}]
)
def test_a_chunk_that_does_not_hold_what_its_index_line_says_is_refused(changes):
    storage, e = stored_chunk([idp(3, 1), idp(4, 1), idp(5, 1)], **changes)
    chunk_error(storage, e, r"does not hold what its index line says \(index mismatch\)")


def test_a_chunk_with_a_record_of_another_epoch_is_refused():
    storage, e = stored_chunk([idp(3, 1), idp(4, 2), idp(5, 1)])
    chunk_error(storage, e, r"does not hold what its index line says")
