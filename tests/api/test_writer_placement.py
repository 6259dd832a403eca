"""Where a data-parallel run continues when each node has its own runs root, over real run
folders: ``DataParallel.place_writer`` on simulated ranks (threads), each with its own root.

The multi-node integration test (``tests/integration/test_multinode.py``) runs the same through
torchrun end to end; here each case costs milliseconds: which rank writes, the refusal of two
different copies of one epoch on every rank, naming both roots, and what the user is told.
"""

from __future__ import annotations

import shutil

import attrs
import pytest
import torch

from nnx_core.commit import LAST, RunFiles
from nnx_core.errors import DivergedCopiesError
from nnx_adapters.collective.threads import run_ranks
from nnx_adapters.storage.fs import FileStorage
import nnx_api as nnx
from nnx_api.distributed.group import DataParallel


@pytest.fixture(scope="module")
def committed(tmp_path_factory):
    """A run with two committed epochs: (its root, its id)."""
    root = tmp_path_factory.mktemp("source")
    x, y = torch.randn(16, 4), torch.randint(0, 3, (16,))
    model = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(8,)), nnx.NNModelParams(net=nnx.Nets.FEED_FWD))
    two = model.train(nnx.NNTrainParams(n_epochs=2, train_loader=[(x, y)], progress=False), root=root)
    return root, two.id


def place(roots, run_id, preferred=0):
    """Every simulated rank's (writer, note) or error, rank r reading ``roots[r]``."""
    def body(collective):
        group = DataParallel(collective, preferred)
        note = group.place_writer(run_id, FileStorage(roots[collective.rank]))
        return group.writer_rank, note

    return run_ranks(len(roots), body)


def copy_run(source, run_id, dest):
    shutil.copytree(source / run_id, dest / run_id)


def test_the_rank_whose_root_holds_the_run_writes_it(tmp_path, committed):
    source, run_id = committed
    empty, holder = tmp_path / "empty", tmp_path / "holder"
    copy_run(source, run_id, holder)
    results = place([empty, holder], run_id)
    assert [r[0] for r in results] == [1, 1]  # every rank agrees: rank 1 writes
    assert "rank 1 writes this run instead of rank 0" in results[1][1] and str(holder) in results[1][1]
    assert not empty.exists() or not any(empty.iterdir())  # nothing written where the run is not


def test_a_fresh_run_and_shared_storage_keep_the_configured_writer(tmp_path, committed):
    source, run_id = committed
    assert [r[0] for r in place([tmp_path / "a", tmp_path / "b"], run_id, preferred=1)] == [1, 1]
    assert place([source, source], run_id, preferred=1) == [(1, None), (1, None)]


def test_the_newest_copy_wins_and_the_older_one_is_named(tmp_path, committed):
    source, run_id = committed
    old, new = tmp_path / "old", tmp_path / "new"
    copy_run(source, run_id, new)
    copy_run(source, run_id, old)
    files = RunFiles(FileStorage(old), run_id)
    last = files.read_tag(LAST)
    files.write_tag(attrs.evolve(last, epoch=last.epoch - 1))  # LAST one epoch behind
    results = place([old, new], run_id)
    assert [r[0] for r in results] == [1, 1]
    assert f"keeps an older copy (epoch {last.epoch - 1}), left as it is" in results[1][1]


def test_two_different_copies_of_one_epoch_are_refused_on_every_rank_naming_both_roots(tmp_path, committed):
    source, run_id = committed
    a, b = tmp_path / "node-a", tmp_path / "node-b"
    copy_run(source, run_id, a)
    copy_run(source, run_id, b)
    last = b / RunFiles(FileStorage(b), run_id).tag_path(LAST)
    last.write_bytes(last.read_bytes() + b"\n")  # the same epoch, another copy (its manifest differs)
    results = place([a, b], run_id)
    assert all(isinstance(r, DivergedCopiesError) for r in results), results
    assert str(results[0]) == str(results[1]) and str(a) in str(results[0]) and str(b) in str(results[0])


def test_an_unreadable_last_on_any_root_is_never_passed_over(tmp_path, committed):
    source, run_id = committed
    good, broken = tmp_path / "good", tmp_path / "broken"
    copy_run(source, run_id, good)
    copy_run(source, run_id, broken)
    (broken / RunFiles(FileStorage(broken), run_id).tag_path(LAST)).write_bytes(b"{not json")
    assert [r[0] for r in place([good, broken], run_id)] == [1, 1]  # its writer refuses it, as one process would
