"""Admission's recovery rules over ``MemoryStorage`` (no torch): a run is never continued, returned
or restarted over a lie — a history that lacks LAST's epoch, checkpoints that vanished, other data.
The plain admission table is ``test_admission.py``."""

from __future__ import annotations

import pytest

from nnx_core import admission as adm
from nnx_core.commit import LAST, BlobRef, RunFiles, TagManifest
from nnx_core.eager_history import EagerHistory, continuity_problems
from nnx_core.errors import CorruptRunError, DataChangedError, RunExistsError
from nnx_core.journal import HistoryJournal, JournalWriter
from nnx_core.records import EvaluationDataPoint, IterationDataPoint
from nnx_adapters.storage.memory import MemoryStorage

RID = "ab" * 16


def records(epochs: int, batches: int = 2) -> list[IterationDataPoint]:
    return [
        IterationDataPoint(iter_idx=e * batches + b, epoch_idx=e, batch_idx=b, lr=0.1,
                           train_edp=EvaluationDataPoint(loss=1.0, count=1))
        for e in range(epochs) for b in range(batches)
    ]


def run_on_disk(epochs_in_history: int, last_epoch: int | None, status: str = "running",
                committed: int | None = None) -> RunFiles:
    files = RunFiles(MemoryStorage(), RID)
    files.storage.write(files.run_yaml, b"id: x\n")
    files.storage.write(files.history, EagerHistory(records(epochs_in_history)).render())
    if last_epoch is not None:
        sha = "0" * 64
        files.write_tag(TagManifest(tag=LAST, run_id=RID, epoch=last_epoch, blobs={"state": BlobRef(sha, 1)}, meta={}))
    record = adm.AttemptRecord(attempt_id="a", run_id=RID, started_at="2026-01-01T00:00:00+00:00", status=status,
                               last_committed_epoch=committed)
    record.save(files)
    return files


def test_a_history_that_lacks_lasts_epoch_is_refused_and_nothing_is_removed():
    files = run_on_disk(epochs_in_history=2, last_epoch=2)
    before = files.storage.snapshot()
    with pytest.raises(CorruptRunError, match="no rows for LAST's epoch 2.*nnx runs verify"):
        adm.admit(files, resume=True, overwrite=False, n_epochs=5)
    assert files.storage.snapshot() == before


def test_a_history_that_holds_lasts_epoch_continues_or_finishes():
    files = run_on_disk(epochs_in_history=3, last_epoch=2)
    assert adm.admit(files, resume=True, overwrite=False, n_epochs=5).action == adm.CONTINUE
    assert adm.admit(files, resume=True, overwrite=False, n_epochs=3).action == adm.FINISHED


@pytest.mark.parametrize("resume", [True, False])
def test_vanished_checkpoints_are_refused_rather_than_restarted_over_the_history(resume):
    files = run_on_disk(epochs_in_history=3, last_epoch=None)  # two or more epochs: LAST existed
    before = files.storage.snapshot()
    with pytest.raises(CorruptRunError, match="checkpoints/.*overwrite_existing=True"):
        adm.admit(files, resume=resume, overwrite=False, n_epochs=5)
    assert files.storage.snapshot() == before


def test_an_attempt_record_naming_a_committed_epoch_also_proves_a_commit():
    files = run_on_disk(epochs_in_history=0, last_epoch=None, status="failed", committed=4)
    with pytest.raises(CorruptRunError, match="checkpoints/"):
        adm.admit(files, resume=True, overwrite=False, n_epochs=5)


def test_a_killed_first_attempt_is_still_cleaned_and_restarted():
    files = run_on_disk(epochs_in_history=1, last_epoch=None)  # killed inside epoch 0's commit
    assert adm.admit(files, resume=True, overwrite=False, n_epochs=5).action == adm.FRESH
    assert not files.exists()


def journal_run(epochs: int) -> RunFiles:
    """A journal run whose journal committed ``epochs`` epochs and whose LAST is missing."""
    files = RunFiles(MemoryStorage(), RID)
    files.storage.write(files.run_yaml, b"id: x\n")
    writer = JournalWriter(files.storage, RID, HistoryJournal(retention=8, chunk_size=4), last_epoch=None)
    for epoch in range(epochs):
        writer.extend(r for r in records(epochs) if r.epoch_idx == epoch)
        writer.commit()
    adm.AttemptRecord(attempt_id="a", run_id=RID, started_at="2026-01-01T00:00:00+00:00").save(files)
    return files


def test_a_journal_run_killed_inside_its_first_commit_is_restarted():
    """The journal of epoch 0 is durable before epoch 0's LAST: a kill between them (ckpt-chaos
    found it) leaves a journal of one epoch and no LAST — nothing was committed."""
    files = journal_run(1)
    assert adm.admit(files, resume=True, overwrite=False, n_epochs=5).action == adm.FRESH
    assert not files.exists()


def test_a_journal_of_two_epochs_without_last_is_refused():
    files = journal_run(2)
    before = files.storage.snapshot()
    with pytest.raises(CorruptRunError, match="a journal of 2 epochs.*checkpoints/"):
        adm.admit(files, resume=True, overwrite=False, n_epochs=5)
    assert files.storage.snapshot() == before


def test_overwrite_discards_even_a_run_whose_checkpoints_vanished():
    files = run_on_disk(epochs_in_history=3, last_epoch=None)
    assert adm.admit(files, resume=False, overwrite=True, n_epochs=5).action == adm.FRESH
    assert not files.exists()


def test_without_resume_an_existing_run_says_how_to_proceed():
    files = run_on_disk(epochs_in_history=3, last_epoch=2)
    with pytest.raises(RunExistsError, match="overwrite_existing=True.*data_id=.*resume='auto'"):
        adm.admit(files, resume=False, overwrite=False, n_epochs=5)


FP = {"train_loader": {"rows": 512, "batches": 8, "batch": ["tensor[64, 8] torch.float32"], "sample": "aa", "sampled": "x"}}


def test_data_refusal_names_the_loader_what_changed_and_both_ways_out():
    assert adm.data_refusal(RID, FP, FP) is None
    assert adm.data_refusal(RID, None, FP) is None  # a run from before fingerprints
    changed = {"train_loader": {**FP["train_loader"], "rows": 600}}
    error = adm.data_refusal(RID, FP, changed)
    assert isinstance(error, DataChangedError)
    assert "train_loader: rows 512 → 600" in str(error) and "data_id=" in str(error) and "overwrite_existing=True" in str(error)
    resampled = {"train_loader": {**FP["train_loader"], "sample": "bb"}}
    assert "sampled rows differ" in str(adm.data_refusal(RID, FP, resampled))
    added = {**FP, "val_loader": FP["train_loader"]}
    assert "val_loader is given now" in str(adm.data_refusal(RID, FP, added))


def test_write_failure_note_says_what_is_committed_and_how_to_continue():
    assert "epoch 3 is committed" in adm.write_failure_note(RID, 3) and "resume='auto'" in adm.write_failure_note(RID, 3)
    assert "continue from epoch 4" in adm.write_failure_note(RID, 3)
    assert "no committed epoch" in adm.write_failure_note(RID, None)


def test_continuity_problems_find_a_repeated_or_skipped_iteration_and_a_step_back():
    good = records(3)
    assert continuity_problems(good, "h") == []
    repeated = [*good[:4], *good[2:]]  # epoch 1 written twice (a resume over it)
    problems = continuity_problems(repeated, "h")
    assert any("iter_idx jumps" in p for p in problems) and any("batch_idx 0" in p for p in problems)
    assert any("goes back from epoch 1 to 0" in p for p in continuity_problems([*good[:4], *good[:2]], "h"))
    gap = [r for r in good if r.iter_idx != 2]  # epoch 1 starts at its second batch
    assert any("batch_idx" in p for p in continuity_problems(gap, "h"))


def test_the_history_gap_refusal_names_the_history_and_both_ways_on():
    files = run_on_disk(epochs_in_history=2, last_epoch=2)
    with pytest.raises(CorruptRunError) as info:
        adm.admit(files, resume=True, overwrite=False, n_epochs=5)
    text = str(info.value)
    assert "cannot be resumed: its history (idps.csv) has no rows" in text and f"`nnx runs verify {RID[:8]}`;" in text
    assert text.endswith("pass overwrite_existing=True (without resume='auto')")


@pytest.mark.parametrize(("epochs", "seen"), [(2, "history for epochs 0..1"), (3, "history for epochs 0..2")])
def test_the_vanished_refusal_says_what_proves_a_commit(epochs, seen):
    files = run_on_disk(epochs_in_history=epochs, last_epoch=None)  # two epochs already prove a commit
    with pytest.raises(CorruptRunError) as info:
        adm.admit(files, resume=True, overwrite=False, n_epochs=5)
    assert f"run {RID} holds {seen} but no committed checkpoint" in str(info.value)
    assert str(info.value).endswith("Put checkpoints/ back, or pass overwrite_existing=True (without resume='auto') "
                                    "to discard the run and start over")


def test_the_vanished_refusal_names_the_attempt_record_when_only_it_proves_a_commit():
    files = run_on_disk(epochs_in_history=1, last_epoch=None, status="failed", committed=0)
    with pytest.raises(CorruptRunError, match=f"run {RID} holds a record of committed epochs but"):
        adm.admit(files, resume=True, overwrite=False, n_epochs=5)


def test_data_refusal_lists_every_loader_and_every_change():
    second = {"rows": 10, "batches": 1, "batch": ["x"], "sample": "s"}
    error = adm.data_refusal(RID, {"a_loader": second, **FP},
                             {"train_loader": {**FP["train_loader"], "rows": 600, "batches": 9, "batch": ["y"]}})
    text = str(error)
    assert text.startswith(f"run {RID[:8]} was trained on other data (a_loader was given then, not now; "
                           "train_loader: rows 512 → 600, batches 8 → 9, first batch ['y'] (was "
                           "['tensor[64, 8] torch.float32']))")
    assert text.endswith("so resume='auto' will not continue or return it. For a distinct run on this data pass "
                         "data_id='<a name for this data>' to NNTrainParams; to replace the old run, drop "
                         "resume='auto' and pass overwrite_existing=True")


def test_data_refusal_names_the_new_sample_or_says_a_sample():
    resampled = {"train_loader": {**FP["train_loader"], "sample": "bb", "sampled": "rows 3, 9"}}
    assert "the sampled rows differ (rows 3, 9)" in str(adm.data_refusal(RID, FP, resampled))
    unnamed = {"train_loader": {k: v for k, v in FP["train_loader"].items() if k != "sampled"} | {"sample": "bb"}}
    assert "the sampled rows differ (a sample)" in str(adm.data_refusal(RID, FP, unnamed))


def test_write_failure_note_names_the_run_by_its_short_id():
    assert adm.write_failure_note(RID, None) == (
        f"NNx: run {RID[:8]} has no committed epoch (nothing of it is left half-written). Once the runs root is "
        "writable and has space, run the same call again.")
    assert adm.write_failure_note(RID, 3).startswith(f"NNx: run {RID[:8]}: epoch 3 is committed (LAST) and intact.")
