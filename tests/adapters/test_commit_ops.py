"""File-system operations of one epoch commit on a real disk (issue 18, decisions 2 and 3).

Each epoch kind is committed through ``nnx_core.commit.commit_epoch`` over ``FileStorage`` while
``OsTrace`` records the ``os`` calls that change or sync the file system. Pinned: the upper bounds
of the operation counts and that a LAST-only epoch waits for at most two dependent fsync rounds
(blob and history made durable together, then LAST). Each epoch after the first appends its rows
to ``idps.csv``, as the training session does after a commit of its own. Torch-free: the payload
is a few bytes streamed through ``write_blob`` as the training session streams its ``torch.save``.
"""

from __future__ import annotations

import pytest

from nnx_core.commit import BEST, FIRST, LAST, Q1, EpochCommit, RunFiles, commit_epoch
from nnx_adapters.storage.fs import FileStorage
from nnx_adapters.testing.oscalls import OsTrace

RUN_ID = "opsrun"
BOUNDS = {"last": 13, "last+best": 16, "last+q1": 16, "last+q1+best": 18}


class Run:
    """A run whose epochs commit like the training session's: new weights every epoch, the eager
    history growing by one row."""

    def __init__(self, root: str) -> None:
        self.files = RunFiles(FileStorage(root), RUN_ID)
        self.files.storage.write(self.files.run_yaml, b"id: opsrun\n")
        self.epoch, self.history = -1, b"epoch,loss\n"

    def commit(self, *tags: str) -> OsTrace:
        self.epoch += 1
        previous, self.history = self.history, self.history + b"%d,0.5\n" % self.epoch
        state = b"weights of epoch %d" % self.epoch
        with OsTrace() as trace:
            commit_epoch(self.files, EpochCommit(
                epoch=self.epoch, payload=lambda sink: sink.write(state), history=self.history,
                previous_history=previous, append_history=self.epoch > 0, tags=tags,
            ))
        return trace


@pytest.fixture
def run(tmp_path) -> Run:
    run = Run(str(tmp_path / "runs"))
    run.commit(FIRST, BEST)  # folders exist; LAST and BEST name epoch 0's blob
    return run


def test_a_last_only_epoch_commit_stays_within_its_operation_budget(run):
    run.commit(), run.commit()  # epoch 2's LAST moves off epoch 1's blob, which nothing names now
    trace = run.commit()  # so epoch 3 collects it, as every steady LAST-only epoch does
    counts = trace.counts()
    assert counts["unlink"] == 1 and counts["rename"] == 2, trace.calls  # dead blob; blob, LAST (idps.csv appended)
    assert trace.total() <= BOUNDS["last"], trace.calls
    assert trace.durable_steps() <= 2, trace.calls


@pytest.mark.parametrize("tags", [(BEST,), (Q1,), (Q1, BEST)], ids=lambda t: "last+" + "+".join(t))
def test_an_epoch_moving_tags_stays_within_its_operation_budget(run, tags):
    run.commit(), run.commit()
    trace = run.commit(*tags)  # collects epoch 1's blob too
    assert trace.counts()["rename"] == 2 + len(tags), trace.calls
    assert trace.total() <= BOUNDS["+".join((LAST, *tags))], trace.calls
    assert trace.durable_steps() <= 3, trace.calls  # history with the blob, LAST, then the tags


def test_the_history_and_the_blob_are_durable_before_last_and_last_before_the_tags(run):
    run.commit(), run.commit()
    calls = run.commit(BEST).calls
    renames = [i for i, kind in enumerate(calls) if kind == "rename"]
    folder_syncs = [i for i, kind in enumerate(calls) if kind == "fsync_dir"]
    blob, last, best = renames  # idps.csv is appended (write, fsync: no rename, no new folder entry)
    history = calls.index("fsync", blob + 1)
    assert calls[history - 1] == "write" and history < last and any(blob < s < last for s in folder_syncs)
    assert any(last < s < best for s in folder_syncs)
    assert folder_syncs[-1] > best
