"""The commit protocol's rules a reader's view cannot show, checked on the bytes in the store.

Readers truncate history to LAST, so a history file left one epoch ahead of LAST looks fine
through them; these tests read the files themselves (``MemoryStorage``, no torch). Below them,
the module's other rules one by one (its docstring and each function's), each pinned because a
mutant that broke it survived the suite (docs/testing.md, "Mutation testing").
"""

from __future__ import annotations

import hashlib

import pytest

from nnx_adapters.storage.memory import MemoryStorage
from nnx_core.commit import (
    BEST,
    FIRST,
    LAST,
    Q1,
    Q2,
    Q3,
    BlobRef,
    EpochCommit,
    RunFiles,
    TagManifest,
    commit_epoch,
    epoch_tags,
    phase_tags,
    refresh_last,
    truncate_to_last,
    weights_tag,
)
from nnx_core.errors import CorruptRunError

RUN = "c" * 32


class FailingTag:
    """A store whose write of one tag's manifest fails (before its rename: nothing visible)."""

    def __init__(self, store: MemoryStorage, tag: str) -> None:
        self.store, self.tag, self.armed = store, tag, False

    def __getattr__(self, name: str):
        return getattr(self.store, name)

    def write(self, path: str, data, **kwargs):
        if self.armed and path == f"{RUN}/checkpoints/{self.tag}.json":
            raise OSError(28, f"injected: no space left writing {self.tag}")
        return self.store.write(path, data, **kwargs)


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
    assert files.read_tag(BEST).epoch == 0


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
    assert (last.epoch, last.blobs, last.meta) == (0, {"state": BlobRef(sha(b"w0"), 2)}, {"k": 1})
    assert files.read_tag(BEST) == TagManifest(tag=BEST, run_id=RUN, epoch=0, blobs=last.blobs, meta={"k": 1})


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
        tag=LAST, run_id=RUN, epoch=2, blobs={"state": BlobRef(sha(b"final"), 5)}, meta={"k": 1})
    assert files.storage.list(files.objects) == [sha(b"final")]


class Row:
    def __init__(self, epoch_idx: int) -> None:
        self.epoch_idx = epoch_idx


def test_readers_see_records_up_to_lasts_epoch_and_none_without_last():
    rows = [Row(e) for e in (0, 0, 1, 2)]
    assert truncate_to_last(rows, None) == []
    last = TagManifest(tag=LAST, run_id=RUN, epoch=1, blobs={})
    assert truncate_to_last(rows, last) == rows[:3]
