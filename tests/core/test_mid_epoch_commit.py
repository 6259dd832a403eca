"""Mid-epoch commits (``nnx_core.commit``: the epoch's records so far → LAST naming its
``Position``, nothing else) and what readers and admission make of them, over ``MemoryStorage``
and ``FileStorage``.

Oracle: the module docstring's load rule. A mid-epoch LAST at epoch e commits every record of the
epochs before e and the first ``records`` records of e in file order; nothing else of the file is
committed. Epoch e is not complete (``complete_epoch``), a run whose LAST is mid-epoch is never
finished (admission), and a history holding fewer than ``records`` records of e lacks committed
records (``committed_coverage``; admission refuses it).
"""

from __future__ import annotations

import json

import attrs
import pytest

from nnx_core import admission as adm
from nnx_core.commit import (
    BEST,
    HISTORY_BYTES,
    LAST,
    POSITION,
    EpochCommit,
    Position,
    RunFiles,
    TagManifest,
    commit_epoch,
    committed_coverage,
    complete_epoch,
    history_tail,
    iter_committed,
    position_of,
    read_history,
    truncate_to_last,
)
from nnx_core.eager_history import EagerHistory
from nnx_core.errors import CorruptRunError
from nnx_core.records import EvaluationDataPoint, IterationDataPoint
from nnx_adapters.storage.fs import FileStorage
from nnx_adapters.storage.memory import MemoryStorage

RUN = "d" * 32
PER_EPOCH = 6  # records an epoch has


def records(epoch: int, first: int = 0, upto: int = PER_EPOCH) -> list[IterationDataPoint]:
    """Records ``first``..``upto``-1 of an epoch (batch ``b`` of epoch ``e`` is record ``e * 6 + b``)."""
    return [IterationDataPoint(iter_idx=PER_EPOCH * epoch + b, epoch_idx=epoch, batch_idx=b, lr=0.1,
                               train_edp=EvaluationDataPoint(loss=1.0 + b, count=4)) for b in range(first, upto)]


def position(held: int, **more: int | None) -> dict[str, int | None]:
    return Position(records=held, batches=held, updates=held, samples=4 * held, epoch_batches=PER_EPOCH,
                    epoch_updates=more.get("epoch_updates", PER_EPOCH)).state()


class Writer:
    """Commits as the training session does: the whole history every time, appended after a commit
    of its own (``appends``), LAST naming a position inside an epoch (``partial``) or none."""

    def __init__(self, files: RunFiles, *, appends: bool) -> None:
        self.files, self.history, self.previous, self.appends = files, EagerHistory(), None, appends

    def commit(self, epoch: int, new: list[IterationDataPoint], held: int | None = None) -> TagManifest:
        self.history.extend(new)
        data = self.history.render()
        meta = {} if held is None else {POSITION: position(held)}
        last = commit_epoch(self.files, EpochCommit(
            epoch=epoch, payload=b"state %d %s" % (epoch, str(held).encode()), history=data,
            previous_history=self.previous, append_history=self.appends and self.previous is not None, meta=meta,
        ))
        self.previous = data
        return last


@pytest.fixture(params=["memory", "file"])
def files(request, tmp_path) -> RunFiles:
    storage = MemoryStorage() if request.param == "memory" else FileStorage(tmp_path / "runs")
    return RunFiles(storage, RUN)


def seen(files: RunFiles) -> list[IterationDataPoint]:
    return read_history(files, files.read_tag(LAST))


@pytest.mark.parametrize("appends", [True, False], ids=["appended", "replaced"])
def test_readers_see_exactly_the_committed_prefix_at_every_commit(files, appends):
    writer = Writer(files, appends=appends)
    writer.commit(0, records(0))
    writer.commit(1, records(1))
    steps = [  # (epoch, the records it adds, the position of LAST: None at the epoch end)
        (2, records(2, 0, 2), 2), (2, records(2, 2, 3), 3), (2, records(2, 3, 5), 5), (2, records(2, 5), None),
        (3, records(3, 0, 1), 1), (3, records(3, 1), None), (4, records(4, 0, 4), 4),
    ]
    committed = records(0) + records(1)
    for epoch, new, held in steps:
        last = writer.commit(epoch, new, held)
        committed += new
        assert seen(files) == committed and history_tail(files, last) == 0
        assert last.epoch == epoch and last.aliases == () and files.tags() == [LAST]
        assert position_of(files.read_tag(LAST)) == (None if held is None else Position(**position(held)))
        assert complete_epoch(last) == (epoch if held is None else epoch - 1)
        assert committed_coverage((r.epoch_idx for r in seen(files)), last, "the history") == []


def test_a_crash_between_the_history_and_last_shows_only_the_committed_records(files):
    """The next commit wrote idps.csv (more records of epoch e, and of e + 1) and died before
    LAST: readers see the R records LAST names, and the rest is the uncommitted tail."""
    writer = Writer(files, appends=True)
    writer.commit(0, records(0))
    last = writer.commit(1, records(1, 0, 2), held=2)
    for more in (records(1, 2, 4), records(1, 4) + records(2, 0, 3)):
        files.storage.append(files.history, EagerHistory(records(0) + records(1, 0, 2) + more).render()[len(writer.previous):])
        assert seen(files) == records(0) + records(1, 0, 2)
        assert history_tail(files, last) == len(files.storage.read(files.history)) - last.meta[HISTORY_BYTES] > 0
        files.storage.write(files.history, writer.previous)
    files.storage.write(files.history, EagerHistory(records(0) + records(1, 0, 5)).render())  # replaced whole: no size to cut at
    legacy = attrs.evolve(last, meta={POSITION: last.meta[POSITION]})  # a LAST without history_bytes
    assert read_history(files, legacy) == records(0) + records(1, 0, 2)
    tail = len(EagerHistory(records(0) + records(1, 0, 5)).render()) - len(EagerHistory(records(0) + records(1, 0, 2)).render())
    assert history_tail(files, legacy) == tail  # the three rows past the position, in bytes


def test_a_torn_append_at_a_mid_epoch_last_is_cut_and_must_hold_its_records(files):
    writer = Writer(files, appends=True)
    writer.commit(0, records(0))
    last = writer.commit(1, records(1, 0, 3), held=3)
    files.storage.append(files.history, b"\0" * 16)  # the next append, cut by a crash
    assert seen(files) == records(0) + records(1, 0, 3)
    short = attrs.evolve(last, meta={**last.meta, HISTORY_BYTES: len(EagerHistory(records(0) + records(1, 0, 2)).render())})
    with pytest.raises(CorruptRunError):
        read_history(files, short)  # the committed prefix lacks a record LAST names: not the file it committed


def test_the_position_rule_keeps_the_first_records_of_the_epoch_in_file_order():
    rows = records(0) + records(1, 0, 4) + records(2, 0, 1)
    last = TagManifest(tag=LAST, run_id=RUN, epoch=1, blobs={}, meta={POSITION: position(2)})
    assert truncate_to_last(rows, last) == list(iter_committed(iter(rows), last)) == records(0) + records(1, 0, 2)
    none = attrs.evolve(last, meta={POSITION: position(0)})
    assert truncate_to_last(rows, none) == records(0) and complete_epoch(none) == 0
    assert complete_epoch(attrs.evolve(none, epoch=0)) is None and complete_epoch(None) is None
    assert truncate_to_last(rows, attrs.evolve(last, meta={})) == records(0) + records(1, 0, 4)  # an epoch end


@pytest.mark.parametrize("bad", [
    None, "3", [1, 2], {"batches": 1, "updates": 1, "samples": 1},
    {**position(2), "records": -1}, {**position(2), "updates": True}, {**position(2), "samples": 1.5},
    {**position(2), "epoch_batches": "6"}, {**position(2), "batches": 7}, {**position(2), "updates": 9},
], ids=["null", "text", "list", "no-records", "negative", "bool", "float", "total-text", "batches-past-total",
        "updates-past-total"])
def test_a_malformed_position_is_refused_never_ignored(files, bad):
    writer = Writer(files, appends=True)
    writer.commit(0, records(0))
    before = files.storage.read(files.tag_path(LAST))
    doc = json.loads(before)
    doc["meta"][POSITION] = bad
    files.storage.write(files.tag_path(LAST), json.dumps(doc).encode())
    with pytest.raises(CorruptRunError, match="mid-epoch position is malformed"):
        files.read_tag(LAST)
    manifest = TagManifest(tag=LAST, run_id=RUN, epoch=0, blobs={}, meta={POSITION: bad})
    with pytest.raises(CorruptRunError, match="malformed"):
        position_of(manifest)
    files.storage.write(files.tag_path(LAST), before)
    history = files.storage.read(files.history)
    with pytest.raises(ValueError, match="well-formed position"):  # the writer refuses it before any write
        commit_epoch(files, EpochCommit(epoch=1, payload=b"x", history=history, meta={POSITION: bad}))
    assert files.storage.read(files.tag_path(LAST)) == before and files.storage.read(files.history) == history


def test_a_missing_total_reads_as_not_known_and_extra_keys_are_kept_out():
    doc = {"records": 1, "batches": 2, "updates": 1, "samples": 8, "later": "x"}
    assert Position.from_state(doc, "here") == Position(records=1, batches=2, updates=1, samples=8)


def test_a_mid_epoch_commit_moves_last_only(files):
    writer = Writer(files, appends=True)
    writer.commit(0, records(0))
    history = files.storage.read(files.history)
    for extra in ({"tags": (BEST,)}, {"deferred": [lambda: None]}):
        with pytest.raises(ValueError, match="moves LAST only"):
            commit_epoch(files, EpochCommit(epoch=1, payload=b"x", history=history, meta={POSITION: position(0)}, **extra))
    assert files.read_tag(LAST).epoch == 0 and files.tags() == [LAST]


def test_coverage_needs_the_records_of_the_epoch_in_progress_and_every_epoch_before():
    last = TagManifest(tag=LAST, run_id=RUN, epoch=2, blobs={}, meta={POSITION: position(3)})
    assert committed_coverage([0, 0, 1, 2, 2, 2], last, "h") == []
    assert committed_coverage([2, 2, 2], last, "h") == []  # a history that starts at e (a continuation)
    assert committed_coverage([0, 1, 2, 2], last, "h", "rows") == [
        "h holds 2 rows of epoch 2, but LAST committed the epoch up to its first 3 (a mid-epoch commit)"]
    assert committed_coverage([0, 2, 2, 2], last, "h") == ["h misses committed epoch(s) [1]"]
    none = attrs.evolve(last, meta={POSITION: position(0)})
    assert committed_coverage([0, 1], none, "h") == [] and committed_coverage([0], none, "h") == ["h misses committed epoch(s) [1]"]
    assert committed_coverage([0, 1], attrs.evolve(last, meta={}), "h") == ["h has no records for LAST's epoch 2"]


# -- admission and the attempt record ----------------------------------------------------------------

def admitted(files: RunFiles, last_epoch: int, held: int | None, n_epochs: int, *, status: str | None = None) -> adm.Admission:
    files.storage.write(files.run_yaml, b"id: x\n")
    writer = Writer(files, appends=True)
    for epoch in range(last_epoch):
        writer.commit(epoch, records(epoch))
    writer.commit(last_epoch, records(last_epoch, 0, held) if held is not None else records(last_epoch), held)
    if status is not None:
        adm.AttemptRecord(attempt_id="a", run_id=RUN, started_at="t0", status=status).finish(files, status, "t1")
    return adm.admit(files, resume=True, overwrite=False, n_epochs=n_epochs)


def test_a_mid_epoch_last_of_the_last_epoch_is_continued_never_finished(files):
    decided = admitted(files, 2, 4, n_epochs=3, status=adm.COMPLETED)
    assert decided.action == adm.CONTINUE and position_of(decided.last).records == 4


def test_an_epoch_end_last_of_the_last_epoch_is_still_finished(files):
    assert admitted(files, 2, None, n_epochs=3).action == adm.FINISHED


def test_a_history_lacking_the_committed_records_of_the_epoch_in_progress_is_refused(files):
    admitted(files, 1, 3, n_epochs=5)
    files.storage.write(files.history, EagerHistory(records(0) + records(1, 0, 2)).render())  # one committed record lost
    with pytest.raises(CorruptRunError, match="holds 2 rows of epoch 1, but LAST committed the epoch up to its first 3"):
        adm.admit(files, resume=True, overwrite=False, n_epochs=5)
    files.storage.write(files.history, EagerHistory(records(0) + records(1, 0, 3)).render())
    assert adm.admit(files, resume=True, overwrite=False, n_epochs=5).action == adm.CONTINUE


def test_the_attempt_record_names_the_epoch_committed_whole_and_the_position(files):
    admitted(files, 2, 4, n_epochs=5, status=adm.STOPPED)
    saved = json.loads(files.storage.read(files.attempt))
    now = adm.attempt_now(files)
    expected = {"epoch": 2, **position(4)}
    assert saved["last_committed_epoch"] == now["last_committed_epoch"] == 1
    assert saved["last_committed_position"] == now["last_committed_position"] == expected
    Writer(files, appends=False).commit(2, records(0) + records(1) + records(2))  # the epoch's end
    assert adm.attempt_now(files)["last_committed_epoch"] == 2 and adm.attempt_now(files)["last_committed_position"] is None


def test_an_epoch_end_attempt_record_is_saved_as_before(files):
    admitted(files, 1, None, n_epochs=5, status=adm.COMPLETED)
    saved = json.loads(files.storage.read(files.attempt))
    assert saved["last_committed_epoch"] == 1 and "last_committed_position" not in saved


def test_a_failed_write_note_says_how_far_the_epoch_in_progress_is_committed(files):
    admitted(files, 3, 2, n_epochs=5)
    last = files.read_tag(LAST)
    note = adm.write_failure_note(RUN, last)
    assert f"epoch 3 is committed up to update 2 of it (of {PER_EPOCH}) (LAST, mid-epoch)" in note
    assert "continue epoch 3 from there" in note and "epoch 4" not in note
    end = attrs.evolve(last, meta={})
    assert adm.write_failure_note(RUN, end) == adm.write_failure_note(RUN, 3)  # an epoch end: as before
    assert "continue from epoch 4" in adm.write_failure_note(RUN, 3)


def test_an_earlier_attempt_that_ended_inside_an_epoch_keeps_its_position(files):
    admitted(files, 2, 4, n_epochs=5, status=adm.STOPPED)
    following = adm.AttemptRecord(attempt_id="b", run_id=RUN, started_at="t2")
    following.follow(adm.attempt_now(files, lease_held=True))
    assert following.earlier[-1]["last_committed_epoch"] == 1
    assert following.earlier[-1]["last_committed_position"] == {"epoch": 2, **position(4)}
    ended = adm.AttemptRecord(attempt_id="c", run_id=RUN, started_at="t3")
    ended.follow({**adm.attempt_now(files, lease_held=True), "last_committed_position": None})
    assert "last_committed_position" not in ended.earlier[-1]  # an epoch end: the summary as before
