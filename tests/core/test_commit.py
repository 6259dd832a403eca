"""The commit protocol's rules a reader's view cannot show, checked on the bytes in the store.

Readers truncate history to LAST, so a history file left one epoch ahead of LAST looks fine
through them; these tests read the files themselves (``MemoryStorage``, no torch). Below them,
the module's other rules one by one (its docstring and each function's), each pinned because a
mutant that broke it survived the suite (docs/testing.md, "Mutation testing").
"""

from __future__ import annotations

import hashlib
import json

import attrs
import pytest

from nnx_core.commit import (
    BEST,
    FIRST,
    HISTORY_BYTES,
    LAST,
    Q1,
    Q2,
    Q3,
    BlobRef,
    EpochCommit,
    RunFiles,
    TagManifest,
    commit_epoch,
    complete_tags,
    epoch_tags,
    history_tail,
    phase_tags,
    read_history,
    refresh_last,
    truncate_to_last,
    weights_tag,
)
from nnx_core.eager_history import EagerHistory
from nnx_core.errors import CorruptRunError, StaleCheckpointError
from nnx_core.records import EvaluationDataPoint, IterationDataPoint
from nnx_adapters.storage.memory import MemoryStorage

RUN = "c" * 32


class FailingTag:
    """A store whose write (or copy) of one tag's manifest fails (before its rename: nothing visible)."""

    def __init__(self, store: MemoryStorage, tag: str) -> None:
        self.store, self.tag, self.armed = store, tag, False

    def __getattr__(self, name: str):
        return getattr(self.store, name)

    def write(self, path: str, data, **kwargs):
        if self.armed and path == f"{RUN}/checkpoints/{self.tag}.json":
            raise OSError(28, f"injected: no space left writing {self.tag}")
        return self.store.write(path, data, **kwargs)

    def copy(self, source: str, destination: str) -> None:
        if self.armed and destination == f"{RUN}/checkpoints/{self.tag}.json":
            raise OSError(28, f"injected: no space left writing {self.tag}")
        self.store.copy(source, destination)


def history(epochs: int) -> bytes:
    return b"epoch\n" + b"".join(b"%d\n" % e for e in range(epochs))


def commit(files: RunFiles, epoch: int, tags: tuple[str, ...] = ()) -> None:
    commit_epoch(files, EpochCommit(epoch=epoch, payload=b"state %d" % epoch, history=history(epoch + 1),
                                    previous_history=history(epoch) if epoch else None, tags=tags))


def test_a_failed_last_puts_the_previous_history_bytes_back():
    store = FailingTag(MemoryStorage(), LAST)
    files = RunFiles(store, RUN)
    commit(files, 0)
    commit(files, 1)
    store.armed = True
    with pytest.raises(OSError, match="no space left writing last"):
        commit(files, 2)
    assert store.read(files.history) == history(2)  # the bytes, not a reader's truncated view
    assert files.read_tag(LAST).epoch == 1


def test_a_failed_first_last_removes_the_history_it_wrote():
    store = FailingTag(MemoryStorage(), LAST)
    files = RunFiles(store, RUN)
    store.armed = True
    with pytest.raises(OSError):
        commit(files, 0)
    assert not store.exists(files.history) and files.read_tag(LAST) is None


def test_a_failure_after_last_keeps_the_new_history_with_the_new_last():
    store = FailingTag(MemoryStorage(), BEST)
    files = RunFiles(store, RUN)
    commit(files, 0, tags=(BEST,))
    store.armed = True
    with pytest.raises(OSError, match="writing best"):
        commit(files, 1, tags=(BEST,))
    assert store.read(files.history) == history(2) and files.read_tag(LAST).epoch == 1
    assert files.read_written(BEST).epoch == 0  # the file behind; readers see it as LAST, which lists it
    assert files.read_tag(BEST).epoch == 1 and files.read_tag(BEST).blobs == files.read_tag(LAST).blobs


def test_the_next_writer_finishes_the_tags_a_crash_after_last_left_behind():
    store = FailingTag(MemoryStorage(), BEST)
    files = RunFiles(store, RUN)
    commit(files, 0, tags=(FIRST, BEST))
    store.armed = True
    with pytest.raises(OSError, match="writing best"):  # LAST (epoch 1) durable, BEST still epoch 0's
        commit(files, 1, tags=(Q1, BEST))
    store.armed = False
    assert files.read_written(BEST).epoch == 0 and files.read_tag(Q1).epoch == 1
    assert files.read_tag(BEST).epoch == 1  # a reader never sees a tag behind the commit that moved it
    dead = files.read_written(BEST).blobs["state"].sha256
    files.collect_garbage()
    assert store.exists(files.blob_path(dead))  # the file still names it: kept until the tag is finished
    assert complete_tags(files) == (BEST,)  # Q1 made it; BEST is behind LAST, which lists it
    assert store.read(files.tag_path(BEST)) == store.read(files.tag_path(LAST))  # what step 4 writes: LAST's copy
    assert files.read_tag(BEST).epoch == 1 and files.read_tag(FIRST).epoch == 0  # a tag LAST does not list stays
    assert complete_tags(files) == ()  # nothing behind: nothing written
    store.delete(files.tag_path(Q1))
    assert Q1 in files.tags() and files.read_tag(Q1).epoch == 1 and files.read_written(Q1) is None  # read as LAST
    assert complete_tags(files) == (Q1,) and files.read_written(Q1).epoch == 1  # a missing one too
    assert complete_tags(RunFiles(MemoryStorage(), RUN)) == ()  # nothing committed


# --- the rules of the module docstring and of each function's docstring, one by one -----------------


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_the_layout_of_one_run_is_the_documented_one():
    files = RunFiles(MemoryStorage(), RUN)
    assert (files.root, files.run_yaml, files.metadata_yaml, files.history, files.attempt) == (
        RUN, f"{RUN}/run.yaml", f"{RUN}/metadata.yaml", f"{RUN}/idps.csv", f"{RUN}/attempt.json")
    assert files.tag_path(BEST) == f"{RUN}/checkpoints/best.json"
    assert files.blob_path("ab") == f"{RUN}/checkpoints/objects/ab"


def test_phase_tags_follow_the_quarter_points_as_an_elif_chain():
    # REFERENCE §9.4: 0 → FIRST, int(n/4)-1 → Q1, int(n/2)-1 → Q2, int(3n/4)-1 → Q3
    assert [phase_tags(e, 12) for e in range(12)] == [
        (FIRST,), (), (Q1,), (), (), (Q2,), (), (), (Q3,), (), (), ()]
    assert [phase_tags(e, 4) for e in range(4)] == [(FIRST,), (Q2,), (Q3,), ()]  # Q1 = 0 collides with FIRST
    assert [phase_tags(e, 2) for e in range(2)] == [(FIRST,), ()]  # Q1 = -1, Q2 = 0, Q3 = 0
    assert phase_tags(0, 1) == (FIRST,)
    # quarters that are not whole epochs round down: int(n/4), not n/4
    assert [phase_tags(e, 10) for e in range(10)] == [(FIRST,), (Q1,), (), (), (Q2,), (), (Q3,), (), (), ()]
    assert [phase_tags(e, 7) for e in range(7)] == [(FIRST,), (), (Q2,), (), (Q3,), (), ()]


def test_an_epoch_moves_its_phase_tag_then_best():
    assert epoch_tags(0, 8, phases=True, improved=True) == (FIRST, BEST)
    assert epoch_tags(1, 8, phases=True, improved=False) == (Q1,)
    assert epoch_tags(1, 8, phases=False, improved=True) == (BEST,)
    assert epoch_tags(2, 8, phases=True, improved=False) == ()


def test_a_manifest_reads_back_as_written_and_its_bytes_are_canonical():
    files = RunFiles(MemoryStorage(), RUN)
    manifest = TagManifest(tag=BEST, run_id=RUN, epoch=3, blobs={"state": BlobRef("ab" * 32, 7)}, meta={"b": 1, "a": 2})
    files.write_tag(manifest)
    assert files.read_tag(BEST) == manifest
    same = TagManifest(tag=BEST, run_id=RUN, epoch=3, blobs={"state": BlobRef("ab" * 32, 7)}, meta={"a": 2, "b": 1})
    assert same.to_bytes() == manifest.to_bytes()  # the same content gives the same bytes


def corrupt(data: bytes, tag: str = LAST, run_id: str = RUN) -> str:
    with pytest.raises(CorruptRunError) as caught:
        TagManifest.from_bytes(data, tag=tag, run_id=run_id)
    return str(caught.value)


def test_an_unreadable_tag_is_refused_naming_the_run_and_tag_never_as_erase_history():
    good = TagManifest(tag=LAST, run_id=RUN, epoch=0, blobs={}).to_bytes()
    for data in (b"", b"  \n", b"{torn", good.replace(b"nnx.tag/1", b"nnx.tag/0"), b'{"format": "nnx.tag/1"}'):
        message = corrupt(data)
        assert message.startswith(f"run {RUN} tag 'last': ") and "history was NOT erased" in message
    assert "empty" in corrupt(b"")
    assert "unknown format 'nnx.tag/0'" in corrupt(good.replace(b"nnx.tag/1", b"nnx.tag/0"))


def test_a_tag_file_of_another_tag_or_another_run_is_refused():
    other = "d" * 32
    assert "names tag 'best' of run" in corrupt(TagManifest(tag=BEST, run_id=RUN, epoch=0, blobs={}).to_bytes())
    assert f"of run {other} (mixed or copied files)" in corrupt(TagManifest(tag=LAST, run_id=other, epoch=0, blobs={}).to_bytes())


def test_a_manifest_written_with_aliases_reads_as_each_of_them_and_as_no_other_tag():
    shared = TagManifest(tag=LAST, run_id=RUN, epoch=2, blobs={}, meta={"k": 1}, aliases=(Q1, BEST)).to_bytes()
    for tag in (LAST, Q1, BEST):  # one file's bytes, copied to each name
        assert TagManifest.from_bytes(shared, tag=tag, run_id=RUN) == TagManifest(tag=tag, run_id=RUN, epoch=2, blobs={}, meta={"k": 1})
    assert "names tag 'last' of run" in corrupt(shared, tag=Q2)
    plain = TagManifest(tag=LAST, run_id=RUN, epoch=0, blobs={}).to_bytes()
    assert b"aliases" not in plain  # a manifest without aliases keeps its bytes
    for bad in (b'"aliases": "best",', b'"aliases": [1],'):
        assert "aliases is not a list of tag names" in corrupt(plain.replace(b'"blobs"', bad + b' "blobs"'), tag=BEST)


def test_an_epoch_s_tags_are_copies_of_its_last_which_lists_them():
    files = RunFiles(MemoryStorage(), RUN)
    commit(files, 0, tags=(FIRST, BEST))
    raw = files.storage.read(files.tag_path(LAST))
    assert json.loads(raw)["aliases"] == [FIRST, BEST]
    assert files.storage.read(files.tag_path(FIRST)) == files.storage.read(files.tag_path(BEST)) == raw
    commit(files, 1)
    assert "aliases" not in json.loads(files.storage.read(files.tag_path(LAST)))  # moved no tag
    assert [files.read_tag(t).epoch for t in (LAST, FIRST, BEST)] == [1, 0, 0]


def test_tags_lists_every_committed_tag_name_and_nothing_else():
    files = RunFiles(MemoryStorage(), RUN)
    commit(files, 0, tags=(FIRST, BEST))
    files.storage.write(f"{files.checkpoints}/notes.txt", b"not a tag")
    assert files.tags() == [BEST, FIRST, LAST]


def test_a_blob_is_stored_once_under_its_sha256_from_bytes_or_a_producer():
    store = MemoryStorage()
    files = RunFiles(store, RUN)
    assert files.put_blob(b"payload") == BlobRef(sha(b"payload"), 7)
    assert store.read(files.blob_path(sha(b"payload"))) == b"payload"
    writes = store.count_ops()
    assert files.put_blob(b"payload") == BlobRef(sha(b"payload"), 7)
    assert store.count_ops() == writes  # an existing blob is not rewritten
    assert files.put_blob(lambda sink: sink.write(b"streamed")) == BlobRef(sha(b"streamed"), 8)
    assert store.read(files.blob_path(sha(b"streamed"))) == b"streamed"


def test_read_and_verify_a_blob_refuse_a_missing_or_corrupted_one():
    store = MemoryStorage()
    files = RunFiles(store, RUN)
    ref = files.put_blob(b"payload")
    assert files.read_blob(ref) == b"payload"
    files.verify_blob(ref)
    missing = BlobRef("0" * 64, 1)
    commit(files, 0)  # a tag naming the missing blob: it is damage (named by none, it is a stale read, below)
    files.write_tag(attrs.evolve(files.read_tag(LAST), tag=BEST, blobs={"state": missing}))
    for check in (files.read_blob, files.verify_blob):
        with pytest.raises(CorruptRunError, match=f"run {RUN}: blob {'0' * 64} is missing"):
            check(missing)
    for damaged in (b"paylord", b"payload!"):  # same size other bytes; other size
        store.write(files.blob_path(ref.sha256), damaged)
        for check in (files.read_blob, files.verify_blob):
            with pytest.raises(CorruptRunError, match=f"run {RUN}: blob {ref.sha256} does not match its SHA-256 .*"
                               "resume from another checkpoint tag$"):
                check(ref)
        assert files.read_blob(ref, verify=False) == damaged


def test_garbage_collection_deletes_exactly_the_blobs_no_tag_names():
    files = RunFiles(MemoryStorage(), RUN)
    named, dead = files.put_blob(b"named"), files.put_blob(b"dead")
    files.write_tag(TagManifest(tag=BEST, run_id=RUN, epoch=0, blobs={"state": named}))
    assert files.collect_garbage() == 1
    assert files.storage.list(files.objects) == [named.sha256]
    assert not files.storage.exists(files.blob_path(dead.sha256))


def test_last_names_the_payload_as_state_with_the_commit_meta_and_the_tags_repeat_it():
    files = RunFiles(MemoryStorage(), RUN)
    commit_epoch(files, EpochCommit(epoch=0, payload=b"w0", history=history(1), tags=(BEST,), meta={"k": 1}))
    last = files.read_tag(LAST)
    meta = {"k": 1, "history_bytes": len(history(1))}  # the caller's meta and the committed history's size
    assert (last.epoch, last.blobs, last.meta) == (0, {"state": BlobRef(sha(b"w0"), 2)}, meta)
    assert files.read_tag(BEST) == TagManifest(tag=BEST, run_id=RUN, epoch=0, blobs=last.blobs, meta=meta)


def test_a_commit_without_history_is_refused_before_anything_is_written():
    store = MemoryStorage()
    files = RunFiles(store, RUN)
    with pytest.raises(ValueError, match="^EpochCommit needs the eager history bytes or a history_step$"):
        commit_epoch(files, EpochCommit(epoch=0, payload=b"w0"))
    assert store.count_ops() == 0


class Step:
    """A history step (a journal's) that records when it runs."""

    def __init__(self, files: RunFiles, log: list[str]) -> None:
        self.files, self.log = files, log

    def commit(self) -> None:
        self.log.append(f"commit, blob present: {bool(self.files.storage.list(self.files.objects))}")

    def rollback(self) -> None:
        self.log.append("rollback")


def test_a_history_step_replaces_the_eager_history_after_the_blob():
    store = FailingTag(MemoryStorage(), LAST)
    files = RunFiles(store, RUN)
    log: list[str] = []
    commit_epoch(files, EpochCommit(epoch=0, payload=b"w0", history_step=Step(files, log)))
    assert log == ["commit, blob present: True"] and not store.exists(files.history)
    store.armed = True
    with pytest.raises(OSError):
        commit_epoch(files, EpochCommit(epoch=1, payload=b"w1", history_step=Step(files, log)))
    assert log[1:] == ["commit, blob present: True", "rollback"]


class LateFailure(FailingTag):
    """LAST's rename happens, then the folder fsync fails: readers already see the new LAST."""

    def write(self, path: str, data, **kwargs):
        receipt = self.store.write(path, data, **kwargs)
        if self.armed and path == f"{RUN}/checkpoints/{self.tag}.json":
            raise OSError(5, "injected: fsync of the checkpoints folder failed")
        return receipt


class Unreadable(FailingTag):
    """LAST's write fails and LAST cannot be read back either (the disk went away)."""

    failed = False

    def write(self, path: str, data, **kwargs):
        try:
            return super().write(path, data, **kwargs)
        except OSError:
            self.failed = True
            raise

    def read(self, path: str):
        if self.failed and path == f"{RUN}/checkpoints/{self.tag}.json":
            raise OSError(5, "injected: read failed")
        return self.store.read(path)


@pytest.mark.parametrize(("store_class", "error", "last_epoch"), [
    (LateFailure, "fsync of the checkpoints folder failed", 1),  # readers see the new LAST: keep its history
    (Unreadable, "no space left writing last", 0),  # LAST cannot be read back: roll history back
])
def test_a_failed_last_write_leaves_the_history_of_the_last_readers_see(store_class, error, last_epoch):
    store = store_class(MemoryStorage(), LAST)
    files = RunFiles(store, RUN)
    commit(files, 0)
    store.armed = True
    with pytest.raises(OSError, match=error):
        commit(files, 1)
    assert RunFiles(store.store, RUN).read_tag(LAST).epoch == last_epoch
    assert store.read(files.history) == history(last_epoch + 1)


def test_weights_tag_names_the_committed_epoch_with_a_weights_only_blob():
    files = RunFiles(MemoryStorage(), RUN)
    written = weights_tag(files, "mine", 4, b"weights")
    assert files.read_tag("mine") == written == TagManifest(
        tag="mine", run_id=RUN, epoch=4, blobs={"state": BlobRef(sha(b"weights"), 7)}, meta={"weights_only": True})
    assert files.read_blob(written.blobs["state"]) == b"weights"


def test_refresh_last_keeps_epoch_and_meta_with_a_new_blob_and_collects_the_old():
    files = RunFiles(MemoryStorage(), RUN)
    assert refresh_last(files, b"final") is None and files.storage.count_ops() == 0  # nothing committed
    commit_epoch(files, EpochCommit(epoch=2, payload=b"w2", history=history(3), meta={"k": 1}))
    refreshed = refresh_last(files, b"final")
    assert files.read_tag(LAST) == refreshed == TagManifest(
        tag=LAST, run_id=RUN, epoch=2, blobs={"state": BlobRef(sha(b"final"), 5)},
        meta={"k": 1, "history_bytes": len(history(3))})
    assert files.storage.list(files.objects) == [sha(b"final")]


class Row:
    def __init__(self, epoch_idx: int) -> None:
        self.epoch_idx = epoch_idx


def test_readers_see_records_up_to_lasts_epoch_and_none_without_last():
    rows = [Row(e) for e in (0, 0, 1, 2)]
    assert truncate_to_last(rows, None) == []
    last = TagManifest(tag=LAST, run_id=RUN, epoch=1, blobs={})
    assert truncate_to_last(rows, last) == rows[:3]


# -- the eager history appended (issue 18): the file, the size in LAST's meta, the readers --------

def rows(epoch: int, *, extra: bool = False) -> list[IterationDataPoint]:
    """Two records of an epoch; ``extra`` adds a training-summary column the header lacked."""
    summary = EvaluationDataPoint(loss=0.5, extra={"auc": 0.5}) if extra else None
    return [IterationDataPoint(iter_idx=2 * epoch + b, epoch_idx=epoch, batch_idx=b, lr=0.1,
                               train_edp=EvaluationDataPoint(loss=1.0 + epoch), train_summary=summary if b else None)
            for b in range(2)]


class Writer:
    """Commits epochs as the training session does: the previous bytes known, appends after a
    commit of its own (``appends``)."""

    def __init__(self, files: RunFiles, records=(), *, appends: bool = True) -> None:
        self.files, self.history, self.appends = files, EagerHistory(records), appends
        self.previous = self.history.render() if records else None
        self.own = False

    def commit(self, epoch: int, *, extra: bool = False) -> bytes:
        self.history.extend(rows(epoch, extra=extra))
        data = self.history.render()
        commit_epoch(self.files, EpochCommit(epoch=epoch, payload=b"w%d" % epoch, history=data,
                                             previous_history=self.previous, append_history=self.appends and self.own))
        self.previous, self.own = data, True
        return data


def history_ops(store: MemoryStorage, since: int) -> list[str]:
    return [kind for _, kind, path in store.log[since:] if path.endswith("idps.csv") or "idps.csv" in path]


def test_a_writer_appends_the_new_rows_after_its_own_commit_and_last_records_the_size():
    store = MemoryStorage()
    files, writer = RunFiles(store, RUN), Writer(RunFiles(store, RUN))
    writer.commit(0)  # no file yet: created whole through a temporary
    assert "rename" in history_ops(store, 0)
    mark = len(store.log)
    data = writer.commit(1)
    assert history_ops(store, mark) == ["append", "fsync"]  # no temporary, rename or folder fsync
    assert store.read(files.history) == data
    assert files.read_tag(LAST).meta[HISTORY_BYTES] == len(data)
    assert read_history(files, files.read_tag(LAST)) == rows(0) + rows(1)


def test_a_header_that_gains_a_column_or_a_restarted_writer_replaces_the_file_whole():
    store = MemoryStorage()
    files, writer = RunFiles(store, RUN), Writer(RunFiles(store, RUN))
    writer.commit(0), writer.commit(1)
    mark = len(store.log)
    data = writer.commit(2, extra=True)  # every row is rendered again under the new header
    assert "append" not in history_ops(store, mark) and "rename" in history_ops(store, mark)
    assert store.read(files.history) == data
    restarted = Writer(files, read_history(files, files.read_tag(LAST)))  # a new session: the file may hold a tail
    mark = len(store.log)
    data = restarted.commit(3)
    assert "append" not in history_ops(store, mark) and store.read(files.history) == data
    mark = len(store.log)
    restarted.commit(4)
    assert "append" in history_ops(store, mark)


def test_a_failed_last_after_an_append_puts_the_previous_bytes_back():
    store = FailingTag(MemoryStorage(), LAST)
    files = RunFiles(store, RUN)
    writer = Writer(files)
    committed = (writer.commit(0), writer.commit(1))[1]
    store.armed = True
    with pytest.raises(OSError, match="no space left writing last"):
        writer.commit(2)
    assert store.read(files.history) == committed and files.read_tag(LAST).epoch == 1


@pytest.mark.parametrize("tail", [b"\0" * 40, b"4,2,0,0.1,1.", b"4,2", b"\xff\xfe garbage\n"],
                         ids=["zeros", "torn-row", "torn-cells", "garbage"])
def test_readers_cut_a_torn_append_at_lasts_history_bytes(tail):
    store = MemoryStorage()
    files, writer = RunFiles(store, RUN), Writer(RunFiles(store, RUN))
    writer.commit(0), writer.commit(1)
    last = files.read_tag(LAST)
    store.append(files.history, tail)  # an append no LAST committed, cut by a crash
    assert read_history(files, last) == rows(0) + rows(1)
    assert history_tail(files, last) == len(tail)


def test_a_torn_tail_is_not_cut_without_lasts_size_nor_when_the_committed_part_is_damaged():
    store = MemoryStorage()
    files, writer = RunFiles(store, RUN), Writer(RunFiles(store, RUN))
    committed = (writer.commit(0), writer.commit(1))[1]
    last = files.read_tag(LAST)
    store.append(files.history, b"\0" * 8)
    legacy = TagManifest(tag=LAST, run_id=RUN, epoch=1, blobs=last.blobs, meta={})  # written before the size was
    with pytest.raises(CorruptRunError):
        read_history(files, legacy)
    store.write(files.history, committed[:20] + b"\0" * 10 + committed[30:] + b"\0" * 8)  # damaged inside LAST's size
    with pytest.raises(CorruptRunError):
        read_history(files, last)
    store.write(files.history, committed + b"\0" * 8)
    short = attrs.evolve(last, meta={HISTORY_BYTES: len(EagerHistory(rows(0)).render())})  # a prefix without epoch 1
    with pytest.raises(CorruptRunError):
        read_history(files, short)  # not the file LAST committed (replaced whole since): refused, not shortened


def test_the_uncommitted_tail_is_counted_in_bytes_with_or_without_lasts_size():
    store = MemoryStorage()
    files, writer = RunFiles(store, RUN), Writer(RunFiles(store, RUN), appends=False)
    writer.commit(0)
    last = files.read_tag(LAST)
    data = writer.history.render()
    assert history_tail(files, last) == 0 and history_tail(files, None) == len(data)
    writer.history.extend(rows(1))
    whole = writer.history.render()
    store.write(files.history, whole)  # epoch 1's rows written, its LAST never
    assert history_tail(files, last) == len(whole) - len(data)
    legacy = TagManifest(tag=LAST, run_id=RUN, epoch=0, blobs=last.blobs, meta={})
    assert history_tail(files, legacy) == len(whole) - len(data)  # the rows of later epochs
    assert read_history(files, legacy) == rows(0)


def test_no_uncommitted_tail_without_a_file_nor_when_a_legacy_last_covers_every_row():
    store = MemoryStorage()
    files = RunFiles(store, RUN)
    last = TagManifest(tag=LAST, run_id=RUN, epoch=0, blobs={}, meta={HISTORY_BYTES: 10})
    assert history_tail(files, None) == 0 and history_tail(files, last) == 0  # no idps.csv: no bytes at all
    store.write(files.history, EagerHistory(rows(0) + rows(1)).render())
    legacy = TagManifest(tag=LAST, run_id=RUN, epoch=1, blobs={}, meta={})  # written before the size was
    assert history_tail(files, legacy) == 0  # every row is of an epoch LAST committed


def test_an_unparsable_history_without_last_is_refused_as_corrupt():
    store = MemoryStorage()
    files = RunFiles(store, RUN)
    store.write(files.history, EagerHistory(rows(0)).render() + b"\0" * 8)  # no LAST: no committed size to cut at
    with pytest.raises(CorruptRunError):
        read_history(files, None)


def test_a_blob_released_after_its_tag_was_read_is_a_stale_read_not_a_corrupt_run():
    """Each commit releases the blobs no tag names any more, so a reader holding a manifest read
    two commits ago finds its blob gone: ``StaleCheckpointError`` (read the tag again), never a
    ``CorruptRunError`` claiming damage. A blob a tag still names that is not there is damage."""
    store = MemoryStorage()
    files = RunFiles(store, RUN)
    commit(files, 0)
    held = files.read_tag(LAST)
    commit(files, 1)  # LAST names epoch 1's blob; epoch 0's stays until the next commit's collection
    assert files.read_blob(held.blobs["state"]) == b"state 0"
    commit(files, 2)
    for read in (files.read_blob, files.verify_blob):
        with pytest.raises(StaleCheckpointError, match="released after its checkpoint was read.*read the checkpoint again"):
            read(held.blobs["state"])
    assert not issubclass(StaleCheckpointError, CorruptRunError)
    assert files.read_blob(files.read_tag(LAST).blobs["state"]) == b"state 2"  # read again: the run is whole

    store.delete(files.blob_path(files.read_tag(LAST).blobs["state"].sha256))
    for read in (files.read_blob, files.verify_blob):
        with pytest.raises(CorruptRunError, match="is missing"):
            read(files.read_tag(LAST).blobs["state"])


def test_a_missing_blob_whose_tags_cannot_be_read_is_reported_as_missing():
    store = MemoryStorage()
    files = RunFiles(store, RUN)
    commit(files, 0)
    ref = files.read_tag(LAST).blobs["state"]
    store.delete(files.blob_path(ref.sha256))
    store.write(files.tag_path(BEST), b"{not json")
    with pytest.raises(CorruptRunError, match="is missing"):
        files.read_blob(ref)
