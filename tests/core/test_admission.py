"""Admission (``nnx_core.admission``) over ``MemoryStorage``: no torch, no disk.

Oracle (the module's table, from the seed's resume rules): no folder → fresh; no LAST and a
"running" attempt → a killed first attempt, removed → fresh; resume="auto" with LAST → continue,
or finished when LAST holds the last epoch or the last attempt completed; resume="auto" without
LAST → fresh; overwrite → removed → fresh, or a replacement (nothing written yet) when LAST exists;
otherwise RunExistsError — and a refusal writes nothing.
"""

from __future__ import annotations

import pytest

from nnx_core import admission as adm
from nnx_core.commit import LAST, RunFiles, TagManifest
from nnx_core.eager_history import EagerHistory
from nnx_core.errors import CorruptRunError, RunExistsError
from nnx_core.records import EvaluationDataPoint, IterationDataPoint
from nnx_adapters.storage.memory import MemoryStorage

RUN = "ab" * 16


def files_with(*, last_epoch: int | None = None, status: str | None = None) -> RunFiles:
    files = RunFiles(MemoryStorage(), RUN)
    files.storage.write(files.run_yaml, b"id: x\n")
    if last_epoch is not None:  # a committed run's history holds every epoch up to LAST
        files.storage.write(files.history, EagerHistory([
            IterationDataPoint(iter_idx=e, epoch_idx=e, batch_idx=0, lr=0.1, train_edp=EvaluationDataPoint(loss=1.0, count=1))
            for e in range(last_epoch + 1)
        ]).render())
        files.write_tag(TagManifest(tag=LAST, run_id=RUN, epoch=last_epoch, blobs={"state": files.put_blob(b"state")}))
    if status is not None:
        adm.AttemptRecord(attempt_id="a", run_id=RUN, started_at="t0", status=status).save(files)
    return files


def decide(files: RunFiles, *, resume: bool = False, overwrite: bool = False, n_epochs: int = 5) -> adm.Admission:
    return adm.admit(files, resume=resume, overwrite=overwrite, n_epochs=n_epochs)


def test_no_folder_is_fresh():
    assert decide(RunFiles(MemoryStorage(), RUN)).action == adm.FRESH


def test_a_killed_first_attempt_is_removed_and_admitted_fresh():
    files = files_with(status=adm.RUNNING)
    assert decide(files).action == adm.FRESH and not files.exists()


def test_an_existing_run_is_refused_unless_told_what_to_do_and_the_refusal_writes_nothing():
    files = files_with(last_epoch=1, status=adm.FAILED)
    before = files.storage.snapshot()
    with pytest.raises(RunExistsError, match="overwrite_existing=True.*resume='auto'"):
        decide(files)
    assert files.storage.snapshot() == before


def test_resume_auto_continues_from_last_or_returns_a_finished_run():
    continued = decide(files_with(last_epoch=1, status=adm.FAILED), resume=True)
    assert continued.action == adm.CONTINUE and continued.last.epoch == 1
    assert decide(files_with(last_epoch=4, status=adm.FAILED), resume=True).action == adm.FINISHED  # last epoch
    assert decide(files_with(last_epoch=1, status=adm.COMPLETED), resume=True).action == adm.FINISHED  # early stop
    assert decide(files_with(last_epoch=1, status=adm.STOPPED), resume=True).action == adm.CONTINUE  # update-boundary stop


def test_resume_auto_without_last_and_overwrite_start_fresh():
    files = files_with(status=adm.FAILED)
    assert decide(files, resume=True).action == adm.FRESH and not files.exists()
    files = files_with(status=adm.FAILED)  # nothing committed: nothing to keep
    assert decide(files, overwrite=True) == adm.Admission(adm.FRESH) and not files.exists()


def test_overwrite_of_a_committed_run_is_a_replacement_that_writes_nothing_yet():
    """The committed run stays where it is until the replacement's first write (nnx_core.replacement)."""
    files = files_with(last_epoch=2, status=adm.COMPLETED)
    before = files.storage.snapshot()
    assert decide(files, overwrite=True) == adm.Admission(adm.FRESH, replace=True)
    assert files.storage.snapshot() == before


def test_the_attempt_record_is_written_at_start_and_end_with_the_committed_epoch():
    files = files_with(last_epoch=3)
    record = adm.AttemptRecord(attempt_id="a", run_id=RUN, started_at="t0")
    record.save(files)
    assert adm.read_attempt(files)["status"] == adm.RUNNING
    record.finish(files, adm.FAILED, "t1", error=OSError(28, "no space left"))
    saved = adm.read_attempt(files)
    assert (saved["status"], saved["last_committed_epoch"], saved["last_committed_tag"]) == (adm.FAILED, 3, LAST)
    assert saved["error"].startswith("OSError")


def test_a_running_record_whose_lease_is_free_reads_as_interrupted():
    record = {"status": adm.RUNNING}
    assert adm.attempt_status(record, lease_free=True) == adm.INTERRUPTED
    assert adm.attempt_status(record, lease_free=False) == adm.RUNNING
    assert adm.attempt_status({"status": adm.COMPLETED}, lease_free=True) == adm.COMPLETED
    assert adm.attempt_status(None, lease_free=True) is None


def test_every_reader_reads_the_attempt_record_through_attempt_now():
    """A killed writer's record says "running" with no committed epoch; ``attempt_now`` reads it
    by the rule ``nnx runs list`` shows: interrupted when the lease is free, LAST's epoch."""
    files = files_with(last_epoch=2, status=adm.RUNNING)
    assert adm.read_attempt(files)["last_committed_epoch"] is None  # what the record itself says
    now = adm.attempt_now(files)
    assert (now["status"], now["last_committed_epoch"], now["last_committed_tag"]) == (adm.INTERRUPTED, 2, LAST)
    with files.storage.lease(RUN):  # a live writer holds the lease
        assert adm.attempt_now(files)["status"] == adm.RUNNING
        assert adm.attempt_now(files, lease_held=True)["status"] == adm.INTERRUPTED  # the writer's own view
    assert adm.attempt_now(files_with(status=adm.COMPLETED))["last_committed_epoch"] is None
    assert adm.attempt_now(RunFiles(MemoryStorage(), RUN)) is None


def test_the_never_committed_cleanup_removes_only_a_folder_without_last():
    files = files_with(status=adm.RUNNING)
    assert adm.discard_uncommitted(files) and not files.exists()
    files = files_with(last_epoch=0)
    assert not adm.discard_uncommitted(files) and files.exists()


def test_a_checkpoint_resumes_statefully_only_through_its_own_entry_point():
    assert adm.kind_refusal("nnmodel", "nnmodel") is None
    assert "not a Trainer" in adm.kind_refusal("nnmodel", "trainer")
    assert "resume it with that entry point" in adm.kind_refusal("trainer", "nnmodel")
    assert adm.kind_refusal("nnmodel", "nnmodel-ddp", accepted=("nnmodel",)) is None


def test_the_refusal_names_where_the_run_is_and_every_way_on():
    files = files_with(last_epoch=1, status=adm.FAILED)
    with pytest.raises(RunExistsError) as info:
        decide(files)
    assert f"run {RUN} already exists under the runs root." in str(info.value)
    assert str(info.value).endswith(" to replace it, salt='...' or data_id='...' for a distinct run, or resume='auto' "
                                    "to continue it")
    with pytest.raises(RunExistsError, match="under /data/runs"):
        adm.admit(files, resume=False, overwrite=False, n_epochs=5, where="/data/runs")


def test_a_run_with_one_epoch_left_continues():
    assert decide(files_with(last_epoch=3, status=adm.FAILED), resume=True, n_epochs=5).action == adm.CONTINUE


def test_the_attempt_record_writes_every_field_and_compile_only_when_there_is_one():
    files = files_with()
    adm.AttemptRecord(attempt_id="a", run_id=RUN, started_at="t0").save(files)
    assert adm.read_attempt(files) == {"attempt_id": "a", "run_id": RUN, "status": adm.RUNNING, "started_at": "t0",
                                       "finished_at": None, "last_committed_epoch": None, "last_committed_tag": None,
                                       "error": None, "number": 1, "earlier": []}
    adm.AttemptRecord(attempt_id="a", run_id=RUN, started_at="t0", compile={"status": "eager"}).save(files)
    assert adm.read_attempt(files)["compile"] == {"status": "eager"} and adm.read_attempt(files)["finished_at"] is None


def test_finishing_without_last_records_no_committed_epoch_and_the_error_text():
    files = files_with()
    record = adm.AttemptRecord(attempt_id="a", run_id=RUN, started_at="t0")
    record.finish(files, adm.FAILED, "t1", error=OSError(28, "no space left"))
    saved = adm.read_attempt(files)
    assert (saved["last_committed_epoch"], saved["last_committed_tag"]) == (None, None)
    assert saved["error"] == "OSError: [Errno 28] no space left" and saved["finished_at"] == "t1"
    record.finish(files, adm.FAILED, "t2", error=ValueError("x" * 600))  # the error text is cut at 500 characters
    assert adm.read_attempt(files)["error"] == "ValueError: " + "x" * 500


def test_an_attempt_record_that_is_not_an_object_reads_as_absent():
    files = files_with()
    files.storage.write(files.attempt, b"[1, 2]")
    assert adm.read_attempt(files) is None


def test_the_trainer_refusal_offers_weights_only():
    assert adm.kind_refusal("nnmodel", "trainer").endswith(
        "resume it with NNModel.train (or use resume_mode='weights_only' to start from its weights)")


def test_resume_auto_refuses_a_committed_run_whose_history_was_deleted_and_writes_nothing():
    files = files_with(last_epoch=1, status=adm.FAILED)
    files.storage.delete(files.history)
    before = files.storage.snapshot()
    with pytest.raises(CorruptRunError, match=r"idps.csv\) is missing, though LAST committed epoch 1"):
        decide(files, resume=True)
    assert files.storage.snapshot() == before
