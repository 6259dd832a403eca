"""``nnx_core.journal_reader``: a run's committed history up to LAST, read from its journal, pinned
from the module's read rules (its docstring), without torch."""

from __future__ import annotations

import json

import attrs
import pytest

from nnx_core.errors import HistoryCorruptionError, StaleCheckpointError
from nnx_core.journal import HistoryJournal, JournalWriter
from nnx_core.journal_format import ChunkEntry, JournalFiles, JournalManifest
from nnx_core.journal_reader import JournalReader, count_upto, has_journal
from nnx_core.records import EvaluationDataPoint, IterationDataPoint
from nnx_adapters.storage.memory import MemoryStorage

RID = "j" * 32
FILES = JournalFiles(RID)


def epoch(e: int, n: int, first: int) -> list[IterationDataPoint]:
    return [
        IterationDataPoint(iter_idx=first + i, epoch_idx=e, batch_idx=i, lr=0.1,
                           train_edp=EvaluationDataPoint(loss=float(e), count=1))
        for i in range(n)
    ]


SIZES = (3, 1, 2, 3)  # records per epoch; chunk size 2 splits epochs 0 and 3


def journal(sizes=SIZES, retention: int = 4, chunk: int = 2) -> tuple[MemoryStorage, list[IterationDataPoint]]:
    """A journal that committed one epoch per entry of ``sizes``; every record, in order."""
    storage = MemoryStorage()
    writer = JournalWriter(storage, RID, HistoryJournal(retention=retention, chunk_size=chunk), last_epoch=None)
    records: list[IterationDataPoint] = []
    for e, n in enumerate(sizes):
        rows = epoch(e, n, len(records))
        writer.extend(rows)
        writer.commit()
        records += rows
    return storage, records


def reader(storage, last_epoch) -> JournalReader:
    opened = JournalReader.open(storage, RID, last_epoch)
    assert opened is not None
    return opened


def test_a_run_without_a_manifest_has_no_journal():
    storage = MemoryStorage()
    assert not has_journal(storage, RID)
    assert JournalReader.open(storage, RID, 3) is None
    storage, _ = journal()
    assert has_journal(storage, RID)


def test_a_reader_shows_the_records_of_epochs_up_to_last():
    storage, records = journal()
    for last in range(len(SIZES)):
        visible = [r for r in records if r.epoch_idx <= last]
        r = reader(storage, last)
        assert list(r) == visible
        assert len(r) == len(visible)
        assert sum(e.records for e in r.entries()) == len(visible)
        assert [row["epoch"] for row in r.epoch_rows()] == list(range(last + 1))
    assert len(reader(storage, 99)) == len(records)


def test_nothing_committed_shows_nothing():
    storage, _ = journal()
    r = reader(storage, None)
    assert (list(r), len(r), r.entries(), r.epoch_rows(), r.tail(), r.epoch_record(0)) == ([], 0, [], [], [], None)
    assert len(r.all_entries()) == 6  # the manifest still commits them (an uncommitted tail)
    assert len(r.epoch_lines()) == len(SIZES)


def test_a_reader_sees_only_what_the_manifest_publishes():
    storage, records = journal()
    storage.append(FILES.index, b'{"garbage":1}\n')  # appended, never published
    storage.append(FILES.epochs, b'{"epoch":4}\n')
    r = reader(storage, 3)
    assert list(r) == records
    assert [row["epoch"] for row in r.epoch_rows()] == [0, 1, 2, 3]


def test_index_entries_are_parsed_once():
    storage, records = journal()
    r = reader(storage, 3)
    entries = r.all_entries()
    storage.delete(FILES.index)
    assert r.all_entries() is entries
    assert list(r) == records


def test_a_missing_index_is_a_corruption_error():
    storage, _ = journal()
    storage.delete(FILES.index)
    with pytest.raises(HistoryCorruptionError, match=f"run {RID}: history/index.jsonl is missing"):
        reader(storage, 3).all_entries()


def test_an_empty_journal_reads_no_index_file():
    storage = MemoryStorage()
    writer = JournalWriter(storage, RID, HistoryJournal(retention=2), last_epoch=None)
    writer.ensure_published()
    r = reader(storage, None)
    assert (r.all_entries(), r.epoch_lines()) == ([], [])
    storage.write(FILES.index, b"not an index")  # unpublished bytes: never read
    storage.write(FILES.epochs, b"not rows")
    assert (reader(storage, 0).all_entries(), reader(storage, 0).epoch_lines(), list(reader(storage, 0))) == (
        [], [], []
    )


def replace_history(storage: MemoryStorage, sizes: tuple[int, ...], loss: float) -> None:
    """The folder's history becomes another run's (its replacement): the same id, other records."""
    storage.remove_tree(RID)
    writer = JournalWriter(storage, RID, HistoryJournal(retention=4, chunk_size=2), last_epoch=None)
    for e, n in enumerate(sizes):
        writer.extend([attrs.evolve(r, train_edp=EvaluationDataPoint(loss=loss, count=1)) for r in epoch(e, n, 0)])
        writer.commit()


READS = {"records": list, "tail": lambda r: r.tail(9), "epoch record": lambda r: r.epoch_record(3),
         "summary rows": lambda r: r.epoch_rows()}


@pytest.mark.parametrize(("read", "after"), [
    *((read, after) for read in READS for after in ("removed", "replaced, shorter")),
    # summary rows carry no hash: a longer replacement's first rows read as rows, so only chunks say it
    *((read, "replaced, longer") for read in READS if read != "summary rows"),
])
def test_a_history_replaced_or_removed_after_it_was_opened_is_stale_not_corrupt(read, after):
    """A lazy reader whose run was replaced or removed since it opened meets missing or foreign
    files: ``StaleCheckpointError`` (read again), never a report of damage."""
    storage, _ = journal()
    r = reader(storage, 3)
    if after == "removed":
        storage.remove_tree(RID)
    else:
        replace_history(storage, (1, 1) if after == "replaced, shorter" else (3, 1, 2, 3, 2), loss=7.0)
    with pytest.raises(StaleCheckpointError, match="replaced or removed after it was opened.*read the history again"):
        READS[read](r)
    assert not issubclass(StaleCheckpointError, HistoryCorruptionError)


def test_a_damaged_history_that_still_extends_the_one_opened_is_corrupt():
    """Training went on (more epochs committed) and a chunk the reader needs is gone: damage."""
    storage, records = journal()
    r = reader(storage, 1)
    writer = JournalWriter(storage, RID, HistoryJournal(retention=4, chunk_size=2), last_epoch=3)
    writer.extend(epoch(4, 2, len(records)))
    writer.commit()
    storage.delete(FILES.chunk(0))
    with pytest.raises(HistoryCorruptionError, match="chunk-00000000.jsonl is missing"):
        list(r)
    storage.delete(FILES.index)  # the run's current history is damaged too: still damage
    with pytest.raises(HistoryCorruptionError):
        list(r)


@pytest.mark.parametrize("n", [0, 1, 2, 3, 4, 5, 8, 9, 10])
def test_tail_is_the_last_n_visible_records(n):
    storage, records = journal()
    assert reader(storage, 3).tail(n) == records[len(records) - min(n, len(records)):]
    visible = [r for r in records if r.epoch_idx <= 1]
    assert reader(storage, 1).tail(n) == visible[len(visible) - min(n, len(visible)):]


def test_tail_defaults_to_the_retention():
    storage, records = journal(retention=3)
    assert reader(storage, 3).tail() == records[-3:]


def test_tail_reads_only_the_chunks_it_needs():
    """The reader streams: the last records never touch older chunks (a damaged old chunk does
    not matter to them)."""
    storage, records = journal()
    entries = reader(storage, 3).entries()  # chunks: [0,1] [2] [3] [4,5] [6,7] [8]
    for seq in range(3):
        storage.delete(FILES.chunk(seq))
    assert reader(storage, 3).tail(3) == records[-3:]  # chunks 4 and 5 (sizes 2 + 1)
    assert reader(storage, 3).tail(1) == records[-1:]
    assert reader(storage, 3).tail(5) == records[-5:]  # chunk 3 too
    assert [e.records for e in entries] == [2, 1, 1, 2, 2, 1]
    with pytest.raises(HistoryCorruptionError, match="is missing"):
        reader(storage, 3).tail(6)


def test_epoch_record_is_the_last_record_of_a_visible_epoch():
    storage, records = journal()
    r = reader(storage, 2)
    for e in range(3):
        assert r.epoch_record(e) == [x for x in records if x.epoch_idx == e][-1]
    assert r.epoch_record(3) is None  # committed by the manifest, but after LAST
    assert r.epoch_record(-1) is None


def test_epoch_record_of_an_epoch_the_journal_skipped_is_none():
    storage = MemoryStorage()
    writer = JournalWriter(storage, RID, HistoryJournal(retention=4, chunk_size=2), last_epoch=None)
    for e in (0, 2):
        writer.extend(epoch(e, 1, e))
        writer.commit()
    storage.delete(FILES.chunk(0))  # None must come from the index, not by reading older chunks
    assert reader(storage, 2).epoch_record(1) is None
    assert reader(storage, 2).epoch_record(2).epoch_idx == 2


def test_epoch_lines_carry_each_rows_size():
    storage, _ = journal()
    lines = reader(storage, 3).epoch_lines()
    data = storage.read(FILES.epochs)
    assert [row for row, _ in lines] == [json.loads(line) for line in data.splitlines()]
    assert [n for _, n in lines] == [len(line) + 1 for line in data.splitlines()]
    assert sum(n for _, n in lines) == len(data)


def rows_error(storage, words: str, manifest: JournalManifest | None = None) -> None:
    r = reader(storage, 3)
    if manifest is not None:
        r = JournalReader(storage, RID, 3, manifest)
    with pytest.raises(HistoryCorruptionError, match=f"run {RID}: history/epochs.jsonl {words}"):
        r.epoch_lines()
    with pytest.raises(HistoryCorruptionError):
        r.epoch_rows()


def test_missing_or_short_epoch_rows_are_a_corruption_error():
    storage, _ = journal()
    data = storage.read(FILES.epochs)
    storage.write(FILES.epochs, data[:-1])
    rows_error(storage, f"does not hold the {len(data)} bytes the manifest commits")
    storage.write(FILES.epochs, data[:-1] + b" ")  # the right length, but not ending a line
    rows_error(storage, f"does not hold the {len(data)} bytes")
    storage.delete(FILES.epochs)
    rows_error(storage, "is missing")


def test_unreadable_epoch_rows_are_a_corruption_error():
    storage, _ = journal()
    data = storage.read(FILES.epochs)
    for bad in (b"{x}\n", b"\xff\n"):
        storage.write(FILES.epochs, bad + data[len(bad):])
        rows_error(storage, "holds an unreadable row: ")


def test_epoch_rows_that_are_not_the_manifests_are_a_corruption_error():
    storage, _ = journal()
    m = reader(storage, 3).manifest
    rows_error(storage, "does not hold the 3 rows the manifest commits", attrs.evolve(m, epochs=3))
    data = storage.read(FILES.epochs)
    for bad in (b'[1]', b'{"e":1}'):
        line = bad + b"\n"
        storage.write(FILES.epochs, data + line)
        rows_error(storage, "does not hold the 5 rows the manifest commits",
                   attrs.evolve(m, epochs=5, epochs_bytes=len(data) + len(line)))


def entries_of(epochs: list[int]) -> list[ChunkEntry]:
    return [
        ChunkEntry(seq=i, file=f"chunk-{i:08d}.jsonl", records=1, first_iter=i, last_iter=i, first_epoch=e,
                   last_epoch=e, sha256="0" * 64)
        for i, e in enumerate(epochs)
    ]


@pytest.mark.parametrize("epochs", [[], [0], [3], [0, 0, 1], [0, 1, 1, 1, 2, 4, 4], [1, 2, 3, 4, 5, 6, 7, 8]])
def test_count_upto_counts_the_leading_entries_of_epochs_up_to_one(epochs):
    entries = entries_of(epochs)
    for e in range(-1, 10):
        assert count_upto(entries, e) == sum(1 for x in epochs if x <= e)
