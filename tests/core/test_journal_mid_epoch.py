"""``nnx_core.journal`` with mid-epoch commits (``extend(records, closes=False)``), pinned from the
module's stated protocol without torch: a mid-epoch commit writes the epoch's records so far as
chunks and no summary row; the commit that ends the epoch writes the row from all its records; a
reader and a reopened writer see exactly what a mid-epoch LAST commits; the files equal those of a
run that committed at epoch ends only, apart from where chunks end."""

from __future__ import annotations

import pytest

from nnx_core.errors import HistoryCorruptionError
from nnx_core.journal import HistoryJournal, JournalWriter
from nnx_core.journal_format import epoch_summary
from nnx_core.journal_reader import JournalReader
from nnx_adapters.storage.memory import MemoryStorage

from tests.core.test_journal_writer import FILES, RID, epochs

SPEC = HistoryJournal(retention=3, chunk_size=2)


def writer(storage, last_epoch=None, in_epoch=None, spec=SPEC):
    return JournalWriter(storage, RID, spec, last_epoch=last_epoch, in_epoch=in_epoch)


def rows(storage):
    return [line for line in storage.read(FILES.epochs).decode().splitlines()]


def run_with_cuts(sizes, cuts):
    """Epochs of ``sizes`` records, each committed at the record counts in ``cuts[e]`` and at its end."""
    storage = MemoryStorage()
    w = writer(storage)
    for e, records in enumerate(epochs(sizes)):
        done = 0
        for cut in cuts.get(e, ()):
            w.extend(records[done:cut], closes=False)
            w.commit()
            done = cut
        w.extend(records[done:])
        w.commit()
    return storage, w


def test_a_mid_epoch_commit_writes_chunks_and_no_row_then_the_end_writes_the_row_of_the_whole_epoch():
    storage = MemoryStorage()
    w = writer(storage)
    first, second = epochs([3, 5])
    w.extend(first)
    w.commit()
    w.extend(second[:3], closes=False)
    w.commit()
    assert (w.manifest.records, w.manifest.epochs, w.manifest.open_records, w.manifest.last_epoch) == (6, 1, 3, 1)
    assert w.open == second[:3] and len(rows(storage)) == 1
    w.extend(second[3:])
    w.commit()
    assert (w.manifest.records, w.manifest.epochs, w.manifest.open_records) == (8, 2, 0)
    assert rows(storage)[1] == rows(run_with_cuts([3, 5], {})[0])[1]  # the row of all five records
    assert b"open_records" not in storage.read(FILES.manifest)  # a manifest of whole epochs keeps its bytes
    assert w.open == []


@pytest.mark.parametrize("cuts", [{1: [1]}, {1: [2, 4]}, {0: [1, 2], 1: [3]}, {1: [5]}])
def test_commits_inside_epochs_give_the_records_and_rows_of_epoch_end_commits(cuts):
    storage, _ = run_with_cuts([3, 6], cuts)
    plain, _ = run_with_cuts([3, 6], {})
    assert list(JournalReader.open(storage, RID, 1)) == list(JournalReader.open(plain, RID, 1))
    assert rows(storage) == rows(plain)


def test_a_reader_shows_what_a_mid_epoch_last_commits():
    storage, _ = run_with_cuts([3, 6], {1: [2, 4]})
    first, second = epochs([3, 6])
    reader = JournalReader.open(storage, RID, 1, in_epoch=4)
    assert list(reader) == first + second[:4]
    assert [r["epoch"] for r in reader.epoch_rows()] == [0]  # the epoch has not ended for this LAST
    assert list(JournalReader.open(storage, RID, 1, in_epoch=0)) == first


@pytest.mark.parametrize(("in_epoch", "open_records"), [(2, 2), (4, 4), (0, 0)])
def test_reopening_at_a_mid_epoch_last_cuts_the_tail_and_the_epoch_goes_on(in_epoch, open_records):
    storage, _ = run_with_cuts([3, 6], {1: [2, 4]})  # a crash after the journal committed more than LAST
    first, second = epochs([3, 6])
    w = writer(storage, last_epoch=1, in_epoch=in_epoch)
    assert (w.manifest.open_records, w.manifest.records, w.manifest.epochs) == (open_records, 3 + in_epoch, 1)
    assert w.open == second[:in_epoch] and list(w.idps) == (first + second[:in_epoch])[-3:]
    w.extend(second[in_epoch:])  # the resumed epoch's remaining records, then its end
    w.commit()
    plain, _ = run_with_cuts([3, 6], {})
    assert list(JournalReader.open(storage, RID, 1)) == list(JournalReader.open(plain, RID, 1))
    assert rows(storage) == rows(plain)
    assert len([n for n in storage.list(FILES.folder) if n.startswith("chunk-")]) == w.manifest.chunks  # no stray chunk


def test_a_rolled_back_mid_epoch_commit_restores_the_open_records_before_it():
    storage = MemoryStorage()
    w = writer(storage)
    first, second = epochs([3, 6])
    w.extend(first)
    w.commit()
    w.extend(second[:2], closes=False)
    w.commit()
    w.extend(second[2:4], closes=False)
    w.commit()
    w.rollback()  # LAST of the second mid-epoch commit failed
    assert w.open == second[:2] and w.manifest.open_records == 2
    w.extend(second[2:])
    w.commit()
    assert rows(storage) == rows(run_with_cuts([3, 6], {})[0])


@pytest.mark.parametrize(
    ("last_epoch", "in_epoch", "words"),
    [
        (1, 5, "holds 4 records of epoch 1 .*but LAST commits its first 5 records"),
        (1, 3, "holds 2 records of epoch 1 .*but LAST commits its first 3 records"),  # not at a commit's end
        (1, None, r"holds 4 records of epoch 1 \(the epoch not ended\) but LAST commits all of it"),
    ],
)
def test_a_journal_that_does_not_hold_what_last_commits_is_refused(last_epoch, in_epoch, words):
    storage = MemoryStorage()
    w = writer(storage)
    first, second = epochs([3, 6])
    w.extend(first)
    w.commit()
    for cut in ((0, 2), (2, 4)):
        w.extend(second[slice(*cut)], closes=False)
        w.commit()
    before = storage.snapshot()
    with pytest.raises(HistoryCorruptionError, match=words):
        writer(storage, last_epoch=last_epoch, in_epoch=in_epoch)
    assert storage.snapshot() == before  # nothing was cut


def test_records_of_a_later_epoch_while_one_is_open_are_refused():
    w = writer(MemoryStorage())
    first, second = epochs([3, 6])
    w.extend(first[:2], closes=False)
    w.commit()
    w.extend(second)
    with pytest.raises(ValueError, match="continuing its open epoch 0"):
        w.commit()


def test_the_summary_row_of_a_resumed_epoch_is_made_from_all_its_records():
    storage, _ = run_with_cuts([2, 5], {1: [3]})
    w = writer(storage, last_epoch=1, in_epoch=3)
    second = epochs([2, 5])[1]
    w.extend(second[3:])
    w.commit()
    assert rows(storage)[1] == rows(run_with_cuts([2, 5], {})[0])[1]
    assert epoch_summary(second)["records"] == 5
