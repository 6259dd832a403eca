"""``nnx_core.journal``: the user's ``HistoryJournal``, what callbacks see (the window, the lazy
full history) and the writer's history step, rollback and reopening, pinned from the module's
stated protocol (its docstring), without torch."""

from __future__ import annotations

import pytest

from nnx_core.errors import HistoryCorruptionError, ParamsError
from nnx_core.journal import FullHistory, HistoryJournal, HistoryWindow, JournalWriter
from nnx_core.journal_format import GENESIS, JournalFiles, JournalManifest, chain_next, encode_record
from nnx_core.journal_reader import JournalReader
from nnx_core.records import EvaluationDataPoint, IterationDataPoint
from nnx_adapters.storage.memory import MemoryStorage

RID = "w" * 32
FILES = JournalFiles(RID)


def epoch(e: int, n: int, first: int) -> list[IterationDataPoint]:
    return [
        IterationDataPoint(iter_idx=first + i, epoch_idx=e, batch_idx=i, lr=0.1,
                           train_edp=EvaluationDataPoint(loss=float(e + i), count=1))
        for i in range(n)
    ]


def epochs(sizes) -> list[list[IterationDataPoint]]:
    out, first = [], 0
    for e, n in enumerate(sizes):
        out.append(epoch(e, n, first))
        first += n
    return out


def writer_of(sizes, storage=None, retention=4, chunk=2, last_epoch=None):
    storage = MemoryStorage() if storage is None else storage
    w = JournalWriter(storage, RID, HistoryJournal(retention=retention, chunk_size=chunk), last_epoch=last_epoch)
    for rows in epochs(sizes):
        w.extend(rows)
        w.commit()
    return storage, w


def visible(storage, last_epoch):
    return list(JournalReader.open(storage, RID, last_epoch))


# -- HistoryJournal -------------------------------------------------------------------------------


def test_history_journal_defaults():
    assert (HistoryJournal().retention, HistoryJournal().chunk_size, HistoryJournal().chunk) == (1000, None, 250)
    assert HistoryJournal(retention=251).chunk == 250
    assert HistoryJournal(retention=249).chunk == 249
    assert HistoryJournal(retention=10, chunk_size=3).chunk == 3
    assert HistoryJournal(retention=3, chunk_size=3).chunk_size == 3  # equal to the retention is fine
    assert HistoryJournal(retention=1, chunk_size=1).chunk == 1


@pytest.mark.parametrize(
    ("kw", "path", "words"),
    [
        ({"retention": 0}, "HistoryJournal.retention", "requires retention >= 1, got 0"),
        ({"retention": True}, "HistoryJournal.retention", "requires retention to be an integer"),
        ({"retention": 2.0}, "HistoryJournal.retention", "requires retention to be an integer"),
        ({"retention": 5, "chunk_size": 0}, "HistoryJournal.chunk_size", "requires chunk_size >= 1, got 0"),
        ({"retention": 5, "chunk_size": 1.5}, "HistoryJournal.chunk_size", "requires chunk_size to be an integer"),
        ({"retention": 3, "chunk_size": 4}, "HistoryJournal.chunk_size", r"must not exceed retention \(3\), got 4"),
    ],
)
def test_history_journal_refuses_bad_sizes(kw, path, words):
    with pytest.raises(ParamsError, match=words) as info:
        HistoryJournal(**kw)
    assert info.value.path == path


# -- the window -----------------------------------------------------------------------------------


def test_the_window_is_a_live_read_only_view_of_the_last_records():
    _, w = writer_of([3, 2], retention=4)
    records = [r for rows in epochs([3, 2]) for r in rows]
    window = w.idps
    assert isinstance(window, HistoryWindow)
    assert list(window) == records[-4:] and len(window) == 4
    assert (window[0], window[-1], window[1:3], window[::-2]) == (
        records[1], records[4], records[2:4], [records[4], records[2]]
    )
    assert repr(window) == "<history window: last 4 records>"
    w.extend(epoch(2, 1, 5))
    assert window[-1].iter_idx == 5 and len(window) == 4


def test_a_reopened_writer_starts_with_the_last_retention_records():
    storage, _ = writer_of([3, 2, 2], retention=3)
    records = [r for rows in epochs([3, 2, 2]) for r in rows]
    w = JournalWriter(storage, RID, HistoryJournal(retention=3, chunk_size=2), last_epoch=2)
    assert list(w.idps) == records[-3:]
    assert w.committed_records == 7 and w.pending == []


# -- the full history -----------------------------------------------------------------------------


def test_the_full_history_is_every_record_disk_window_and_pending():
    sizes = [3, 1, 4, 2]
    _, w = writer_of(sizes, retention=3, chunk=2)
    records = [r for rows in epochs(sizes) for r in rows]
    more = epoch(4, 2, len(records))
    w.extend(more)
    everything = records + more
    full = w.full_view()
    assert isinstance(full, FullHistory) and w.full_view() is full
    assert len(full) == len(everything) == 12
    assert repr(full) == "<full history: 12 records>"
    assert list(full) == everything
    for i in range(len(everything)):
        assert full[i] == everything[i], i
        assert full[i - len(everything)] == everything[i], i
    for i in reversed(range(len(everything))):  # chunks out of order: the cache must follow
        assert full[i] == everything[i], i
    assert full[2:9:3] == everything[2:9:3] and full[-3:] == everything[-3:]
    for i in (len(everything), -len(everything) - 1):
        with pytest.raises(IndexError, match="^history index out of range$"):
            full[i]


def test_the_full_history_reads_committed_records_that_left_the_window_from_disk():
    storage, w = writer_of([2, 2], retention=2, chunk=1)
    records = [r for rows in epochs([2, 2]) for r in rows]
    full = w.full_view()
    assert [full[i] for i in range(4)] == records  # records 0 and 1 are only on disk
    storage.delete(FILES.chunk(0))
    with pytest.raises(HistoryCorruptionError):
        list(JournalWriter(storage, RID, HistoryJournal(retention=2, chunk_size=1), last_epoch=1).full_view())


def test_the_full_history_follows_the_writers_commits():
    _, w = writer_of([3], retention=2, chunk=2)
    full = w.full_view()
    assert list(full) == epochs([3])[0]  # the index is loaded now
    for rows in epochs([3, 2, 3])[1:]:
        w.extend(rows)
        w.commit()
    records = [r for rows in epochs([3, 2, 3]) for r in rows]
    assert list(full) == records
    assert [full[i] for i in range(len(records))] == records


def test_the_full_history_when_the_window_holds_everything():
    storage, w = writer_of([2], retention=10, chunk=2)
    w.extend(epoch(1, 3, 2))
    records = [r for rows in epochs([2, 3]) for r in rows]
    storage.delete(FILES.chunk(0))  # never needed: the window has every record
    storage.delete(FILES.index)  # nor the index
    assert list(w.full_view()) == records
    assert [w.full_view()[i] for i in range(5)] == records


class Counting(MemoryStorage):
    """Counts the reads of each path."""

    def __init__(self):
        super().__init__()
        self.reads: dict[str, int] = {}

    def read(self, path):
        self.reads[path] = self.reads.get(path, 0) + 1
        return super().read(path)


def test_the_full_history_reads_from_disk_only_the_records_that_left_the_window():
    storage, w = writer_of([2, 2, 2], retention=4, chunk=2)  # chunks [0,1] [2,3] [4,5]; window 2..5
    records = [r for rows in epochs([2, 2, 2]) for r in rows]
    storage.delete(FILES.chunk(1))
    storage.delete(FILES.chunk(2))
    assert list(w.full_view()) == records


def test_the_full_history_caches_the_chunk_it_read_last():
    storage = Counting()
    _, w = writer_of([3, 3, 3], storage=storage, retention=3, chunk=3)  # chunks 0 and 1 left the window
    records = [r for rows in epochs([3, 3, 3]) for r in rows]
    full = w.full_view()
    assert [full[i] for i in (0, 1, 2, 3, 4)] == records[:5]
    assert full[0] == records[0]
    assert (storage.reads[FILES.chunk(0)], storage.reads[FILES.chunk(1)]) == (2, 1)


def test_the_full_history_when_pending_records_overflow_the_window():
    _, w = writer_of([3], retention=2, chunk=2)
    w.extend(epoch(1, 3, 3))
    records = [r for rows in epochs([3, 3]) for r in rows]
    assert list(w.full_view()) == records
    assert [w.full_view()[i] for i in range(6)] == records


def test_a_fresh_writers_full_history_is_its_pending_records():
    _, w = writer_of([])
    rows = epoch(0, 3, 0)
    w.extend(rows)
    assert list(w.full_view()) == rows and len(w.full_view()) == 3


# -- the history step -----------------------------------------------------------------------------


def test_a_commit_writes_chunks_index_rows_then_the_manifest():
    sizes = [3, 1, 2]
    storage, w = writer_of(sizes, retention=4, chunk=2)
    records = [r for rows in epochs(sizes) for r in rows]
    names = sorted(n for n in storage.list(FILES.folder) if n.startswith("chunk-"))
    assert names == [FILES.chunk_name(i) for i in range(4)]  # [0,1] [2] | [3] | [4,5]
    assert storage.read(FILES.chunk(0)) == encode_record(records[0]) + encode_record(records[1])
    assert storage.read(FILES.chunk(1)) == encode_record(records[2])
    index = storage.read(FILES.index)
    chain = GENESIS
    for line in index.splitlines():
        chain = chain_next(chain, line)
    m = JournalManifest.from_bytes(storage.read(FILES.manifest), run_id=RID)
    assert m == w.manifest
    assert m == JournalManifest(
        run_id=RID, retention=4, chunk_size=2, chunks=4, records=6, index_bytes=len(index), index_chain=chain,
        epochs=3, epochs_bytes=len(storage.read(FILES.epochs)), last_epoch=2, last_iter=5,
    )
    assert w.committed_records == 6 and w.pending == []
    assert visible(storage, 2) == records


def test_committing_several_epochs_at_once_writes_what_committing_them_one_by_one_does():
    sizes = [3, 1, 2]
    storage = MemoryStorage()
    w = JournalWriter(storage, RID, HistoryJournal(retention=4, chunk_size=2), last_epoch=None)
    for rows in epochs(sizes):
        w.extend(rows)
    w.commit()
    one_by_one, fresh = writer_of(sizes)
    assert files_of(storage) == files_of(one_by_one)
    assert w.manifest == fresh.manifest


def test_a_clean_commit_only_adds_files():
    """Constant-cost commits: after a clean commit the next one reads neither index.jsonl nor
    epochs.jsonl (it appends to them)."""
    storage = Counting()
    _, w = writer_of([2, 2], storage=storage)
    storage.reads.clear()
    w.extend(epoch(2, 2, 4))
    w.commit()
    assert storage.reads == {}


def test_a_commit_with_nothing_pending_writes_nothing():
    storage, w = writer_of([])
    w.commit()
    assert storage.list(FILES.folder) == []


def test_ensure_published_makes_a_journal_run_once():
    storage, w = writer_of([])
    w.ensure_published()
    assert JournalManifest.from_bytes(storage.read(FILES.manifest), run_id=RID) == JournalManifest(
        run_id=RID, retention=4, chunk_size=2
    )
    storage, w = writer_of([2])
    before = storage.count_ops()
    w.ensure_published()
    assert storage.count_ops() == before


@pytest.mark.parametrize("rows", [epoch(2, 1, 9) + epoch(1, 1, 10), epoch(1, 1, 9), epoch(0, 1, 9)])
def test_records_must_come_in_epoch_order_after_the_last_committed_epoch(rows):
    _, w = writer_of([2, 2])
    w.extend(rows)
    with pytest.raises(ValueError, match=f"run {RID}: journal records must come in epoch order after epoch 1"):
        w.commit()


class Failing(MemoryStorage):
    """Fails the next call of one port method (``fail = "append"``...) once."""

    fail: str | None = None
    skip = 0

    def _maybe(self, name):
        if self.fail == name:
            if self.skip:
                self.skip -= 1
                return
            self.fail = None
            raise OSError(f"injected {name}")

    def append(self, path, data):
        self._maybe("append")
        return super().append(path, data)

    def write(self, path, data, *, sha256=None):
        self._maybe("write")
        return super().write(path, data, sha256=sha256)


@pytest.mark.parametrize(("method", "skip"), [("append", 0), ("append", 1), ("write", 0), ("write", 1)])
def test_a_failed_history_step_is_cut_away_before_the_next_commit(method, skip):
    storage = Failing()
    _, w = writer_of([2, 1], storage=storage)
    before = {n: storage.read(f"{FILES.folder}/{n}") for n in ("index.jsonl", "epochs.jsonl", "journal.json")}
    rows = epoch(2, 3, 3)
    w.extend(rows)
    storage.fail, storage.skip = method, skip
    if method == "write":  # the chunk writes (two chunks), the manifest
        storage.skip = {0: 0, 1: 2}[skip]
    with pytest.raises(OSError, match="injected"):
        w.commit()
    assert visible(storage, 1) == [r for rs in epochs([2, 1]) for r in rs]
    w.commit()  # the same pending records again
    records = [r for rs in epochs([2, 1]) for r in rs] + rows
    assert visible(storage, 2) == records
    assert storage.read(FILES.index).startswith(before["index.jsonl"])
    _, fresh = writer_of([2, 1, 3])
    assert w.manifest == fresh.manifest
    assert storage.read(FILES.index) == fresh.storage.read(FILES.index)
    assert storage.read(FILES.epochs) == fresh.storage.read(FILES.epochs)


def test_a_failure_while_retrying_a_failed_step_leaves_the_committed_manifest():
    storage = Failing()
    _, w = writer_of([2, 1], storage=storage)
    committed = storage.read(FILES.manifest)
    w.extend(epoch(2, 3, 3))
    for _ in range(2):
        storage.fail = "append"
        with pytest.raises(OSError, match="injected"):
            w.commit()
        assert storage.read(FILES.manifest) == committed
        assert visible(storage, 1) == [r for rs in epochs([2, 1]) for r in rs]


def test_rollback_republishes_the_previous_manifest():
    storage, w = writer_of([2, 3], retention=3)
    full = w.full_view()
    assert len(list(full)) == 5
    previous = storage.read(FILES.manifest)
    w.extend(epoch(2, 2, 5))
    w.commit()
    w.rollback()
    assert storage.read(FILES.manifest) == previous
    assert w.manifest == JournalManifest.from_bytes(previous, run_id=RID)
    records = [r for rs in epochs([2, 3]) for r in rs]
    assert list(w.idps) == records[-3:]
    assert list(full) == records and len(full) == 5
    assert visible(storage, 1) == records
    again = epoch(2, 1, 5)
    w.extend(again)
    w.commit()  # the rolled-back tail is cut and overwritten
    assert visible(storage, 2) == records + again
    assert list(full) == records + again
    _, fresh = writer_of([2, 3, 1], retention=3)
    assert storage.read(FILES.manifest) == fresh.storage.read(FILES.manifest)


def test_rolling_back_a_commit_with_nothing_pending_keeps_every_committed_epoch():
    """rollback undoes the history step LAST failed after; a step with no records changed nothing."""
    storage, w = writer_of([2, 3])
    published = storage.read(FILES.manifest)
    w.commit()  # nothing pending
    w.rollback()
    assert storage.read(FILES.manifest) == published
    records = [r for rs in epochs([2, 3]) for r in rs]
    assert visible(storage, 1) == records and w.committed_records == 5


def test_rolling_back_the_first_commit_removes_the_manifest():
    storage, w = writer_of([2])
    w.rollback()
    assert not storage.exists(FILES.manifest)
    assert w.manifest == JournalManifest(run_id=RID, retention=4, chunk_size=2)
    assert list(w.idps) == [] and w.committed_records == 0
    assert JournalReader.open(storage, RID, None) is None


def test_rolling_back_a_fresh_writer_that_committed_nothing_leaves_no_journal():
    storage, w = writer_of([])
    w.rollback()
    assert storage.list(FILES.folder) == [] and w.manifest == JournalManifest(run_id=RID, retention=4, chunk_size=2)


@pytest.mark.parametrize("sizes", [[2, 1], [2, 1, 2]])  # without a tail; with one cut on opening
def test_a_resumed_writers_first_rollback_republishes_the_manifest_it_opened(sizes):
    storage, _ = writer_of(sizes)
    w = JournalWriter(storage, RID, HistoryJournal(retention=4, chunk_size=2), last_epoch=1)
    opened = storage.read(FILES.manifest)
    w.extend(epoch(2, 1, 3))
    w.commit()
    w.rollback()
    assert storage.read(FILES.manifest) == opened
    assert visible(storage, 1) == [r for rs in epochs([2, 1]) for r in rs]


def test_a_larger_retention_on_reopening_and_after_rollback_fills_the_larger_window():
    storage, _ = writer_of([3, 3], retention=2, chunk=2)
    records = [r for rs in epochs([3, 3]) for r in rs]
    w = JournalWriter(storage, RID, HistoryJournal(retention=5, chunk_size=2), last_epoch=1)
    assert list(w.idps) == records[-5:]
    w.extend(epoch(2, 1, 6))
    w.commit()
    w.rollback()  # back to the manifest written with retention 2
    assert list(w.idps) == records[-5:]


def test_a_resumed_commit_publishes_the_writers_own_sizes():
    """Readers load a run's last ``retention`` records (``JournalReader.tail()``'s default is the
    manifest's): after a resume with other sizes, the manifest names the writer's."""
    storage, _ = writer_of([3, 3], retention=2, chunk=2)
    w = JournalWriter(storage, RID, HistoryJournal(retention=5, chunk_size=3), last_epoch=1)
    w.extend(epoch(2, 1, 6))
    w.commit()
    m = JournalManifest.from_bytes(storage.read(FILES.manifest), run_id=RID)
    assert (m.retention, m.chunk_size) == (5, 3)
    records = [r for rs in epochs([3, 3, 1]) for r in rs]
    assert JournalReader.open(storage, RID, 2).tail() == records[-5:]


# -- opening: the uncommitted tail ----------------------------------------------------------------


def files_of(storage) -> dict[str, bytes]:
    return {n: storage.read(f"{FILES.folder}/{n}") for n in storage.list(FILES.folder)}


@pytest.mark.parametrize("last", [None, 0, 1, 2, 3])
def test_opening_at_last_cuts_the_tail_to_what_a_run_ending_there_wrote(last):
    sizes = [3, 1, 2, 3]
    storage, _ = writer_of(sizes, retention=3)
    w = JournalWriter(storage, RID, HistoryJournal(retention=3, chunk_size=2), last_epoch=last)
    kept = sizes[: 0 if last is None else last + 1]
    fresh_storage, fresh = writer_of(kept, retention=3)
    if last is None:
        fresh.ensure_published()
    assert w.manifest == fresh.manifest
    assert files_of(storage) == files_of(fresh_storage)
    assert list(w.idps) == list(fresh.idps)


def test_opening_a_journal_that_ends_before_last_is_refused():
    storage, _ = writer_of([2, 2])
    with pytest.raises(HistoryCorruptionError, match=f"run {RID}: the history journal ends at epoch 1 but LAST is "
                                                      "epoch 2; the journal lost committed epochs"):
        JournalWriter(storage, RID, HistoryJournal(retention=4, chunk_size=2), last_epoch=2)
    storage, w = writer_of([])
    w.ensure_published()
    with pytest.raises(HistoryCorruptionError, match="ends at epoch None but LAST is epoch 0"):
        JournalWriter(storage, RID, HistoryJournal(retention=4, chunk_size=2), last_epoch=0)


def test_opening_cuts_bytes_and_chunks_no_manifest_names():
    """A crash after the manifest cut but before the files were cut, or before a manifest named
    the appended bytes and new chunks: the reopened writer leaves exactly the published journal."""
    storage, _ = writer_of([2, 1])
    expected = files_of(storage)
    storage.append(FILES.index, b'{"x":1}\n')
    storage.append(FILES.epochs, b'{"epoch":2}\n')
    storage.write(FILES.chunk(3), b"stray")
    storage.write(FILES.chunk(12), b"stray")
    storage.write(f"{FILES.folder}/chunk-notes.jsonl", b"kept")
    storage.write(f"{FILES.folder}/chunk-00000009.json", b"kept")
    storage.write(f"{FILES.folder}/xchunk-00000009.jsonl", b"kept")
    storage.write(f"{FILES.folder}/chunk-x0000009.jsonl", b"kept")
    storage.write(f"{FILES.folder}/chunk-0000009x.jsonl", b"kept")
    storage.write(f"{FILES.folder}/chunk-10000001.jsonl", b"stray")  # seq 10000001: never committed
    w = JournalWriter(storage, RID, HistoryJournal(retention=4, chunk_size=2), last_epoch=1)
    extra = {n: b"kept" for n in ("chunk-notes.jsonl", "chunk-00000009.json", "xchunk-00000009.jsonl",
                                  "chunk-x0000009.jsonl", "chunk-0000009x.jsonl")}
    assert files_of(storage) == {**expected, **extra}
    w.extend(epoch(2, 1, 3))
    w.commit()
    assert visible(storage, 2) == [r for rs in epochs([2, 1, 1]) for r in rs]


def test_opening_an_empty_journal_removes_stale_files():
    storage, w = writer_of([])
    w.ensure_published()
    storage.write(FILES.index, b"stale\n")
    storage.write(FILES.epochs, b"stale\n")
    storage.write(FILES.chunk(0), b"stale")
    JournalWriter(storage, RID, HistoryJournal(retention=4, chunk_size=2), last_epoch=None)
    assert storage.list(FILES.folder) == ["journal.json"]
    storage.write(FILES.epochs, b"stale\n")  # without an index file
    JournalWriter(storage, RID, HistoryJournal(retention=4, chunk_size=2), last_epoch=None)
    assert storage.list(FILES.folder) == ["journal.json"]


def test_opening_a_journal_whose_files_are_short_or_missing_is_refused():
    storage, _ = writer_of([2, 1])
    index = storage.read(FILES.index)
    storage.write(FILES.index, index + b"x")
    storage.write(FILES.epochs, storage.read(FILES.epochs)[:-1])
    with pytest.raises(HistoryCorruptionError, match=f"run {RID}: {FILES.epochs} is shorter than its manifest says"):
        JournalWriter(storage, RID, HistoryJournal(retention=4, chunk_size=2), last_epoch=1)
    storage.delete(FILES.epochs)
    with pytest.raises(HistoryCorruptionError, match=f"run {RID}: {FILES.epochs} is missing"):
        JournalWriter(storage, RID, HistoryJournal(retention=4, chunk_size=2), last_epoch=1)
