"""``nnx.distributed`` as NNx documents it: ``init_process_group()`` returns ``(rank,
world_size)``; ``RankPartition`` deals a seeded permutation (padded or dropped to the world size)
``rank::world_size`` for training and rows ``rank::world_size`` unpadded for validation; and
``extra_metrics`` in a data-parallel run are computed on the gathered global arrays, so every rank
records the same values — those one process records on the union of the ranks' batches and on
the whole validation set (seed §3 "Records and decisions")."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import ddp_extras_worker as worker
import pytest
import torch

import nnx_api as nnx
from nnx_api.distributed import RankPartition

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
LAUNCH_TIMEOUT = 180

needs_gloo = pytest.mark.skipif(
    not torch.distributed.is_available() or not torch.distributed.is_gloo_available(), reason="no gloo"
)


# ----------------------------------------------------------------------------- RankPartition
def spec_order(n, world, epoch, seed, policy, shuffle=True):
    """The documented deal, by hand: permute range(n) with seed + epoch, pad by repeating leading
    indices or drop the tail to a multiple of the world size."""
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed + epoch)).tolist() if shuffle else list(range(n))
    if policy == "pad":
        while len(order) % world:
            order += order[: world - len(order) % world]
    else:
        order = order[: n - n % world]
    return order


@pytest.mark.parametrize("n,world,policy,shuffle", [(10, 3, "pad", True), (10, 3, "drop", True), (7, 2, "pad", False),
                                                    (2, 4, "pad", True), (0, 2, "pad", True)])
def test_train_partition_deals_the_documented_permutation(n, world, policy, shuffle):
    parts = [RankPartition(n, rank=r, world_size=world, policy=policy, shuffle=shuffle, seed=3) for r in range(world)]
    for p in parts:
        p.set_epoch(2)
    order = spec_order(n, world, 2, 3, policy, shuffle)
    assert parts[0].global_order() == order
    for r, p in enumerate(parts):
        assert p.indices() == list(p) == order[r::world] and len(p) == len(order) // world  # the same count everywhere
    parts[0].set_epoch(3)
    if n > 2 and shuffle:
        assert parts[0].global_order() == spec_order(n, world, 3, 3, policy) != order


def test_validation_partition_is_unpadded_and_covers_every_row_once():
    parts = [RankPartition(7, rank=r, world_size=3, kind="validation") for r in range(3)]
    assert [p.indices() for p in parts] == [[0, 3, 6], [1, 4], [2, 5]]
    assert parts[0].descriptor() == {"n": 7, "world_size": 3, "kind": "validation", "policy": "pad", "shuffle": True,
                                     "seed": 0}


def test_the_partition_equals_what_train_loader_deals():
    dataset = torch.utils.data.TensorDataset(torch.arange(11.0))
    for rank in range(2):
        loader = nnx.distributed.train_loader(dataset, 4, seed=9, rank=rank, world_size=2)
        partition = RankPartition(11, rank=rank, world_size=2, seed=9)
        loader.set_epoch(1), partition.set_epoch(1)
        assert loader.indices() == partition.indices()


def test_train_loader_without_shuffle_deals_the_dataset_order_as_rank_partition_does():
    dataset = torch.utils.data.TensorDataset(torch.arange(11.0))
    for rank in range(2):
        loader = nnx.distributed.train_loader(dataset, 4, seed=9, rank=rank, world_size=2, shuffle=False)
        partition = RankPartition(11, rank=rank, world_size=2, seed=9, shuffle=False)
        loader.set_epoch(1), partition.set_epoch(1)
        assert loader.indices() == partition.indices() == [[0, 2, 4, 6, 8, 10], [1, 3, 5, 7, 9, 0]][rank]
        assert loader.partition()["shuffle"] is False
    assert "shuffle" not in nnx.distributed.train_loader(dataset, 4, rank=0, world_size=2).partition()  # records as before


def test_the_sharded_loaders_batch_with_the_users_collate_fn():
    dataset = torch.utils.data.TensorDataset(torch.arange(5.0))

    def as_dict(items):
        return {"x": torch.stack([item[0] for item in items])}

    train = nnx.distributed.train_loader(dataset, 2, rank=1, world_size=2, shuffle=False, collate_fn=as_dict)
    assert [b["x"].tolist() for b in train] == [[1.0, 3.0], [0.0]]
    val = nnx.distributed.validation_loader(dataset, 2, rank=0, world_size=2, collate_fn=as_dict)
    assert [b["x"].tolist() for b in val] == [[0.0, 2.0], [4.0]]
    with pytest.raises(ValueError, match="collate_fn"):
        nnx.distributed.train_loader(dataset, 2, rank=0, world_size=2, collate_fn="stack")


def test_a_validation_shard_may_be_empty_but_not_the_dataset():
    one_row = torch.utils.data.TensorDataset(torch.arange(1.0))
    assert len(nnx.distributed.validation_loader(one_row, 2, rank=1, world_size=2)) == 0  # rank 1 scores nothing
    with pytest.raises(ValueError, match="validation_loader.dataset"):
        nnx.distributed.validation_loader(torch.utils.data.TensorDataset(torch.arange(0.0)), 2, rank=0, world_size=2)


def test_without_a_process_group_ddp_names_torchrun_and_shutdown_checks_its_timeout_first():
    assert not torch.distributed.is_initialized()
    with pytest.raises(RuntimeError, match="torchrun"):
        nnx.distributed.DDP().group()
    nnx.distributed.shutdown(timeout_seconds=1)  # nothing to leave
    for bad in (0, -1.0, float("inf"), float("nan"), True, "5"):
        with pytest.raises(ValueError, match="timeout_seconds"):
            nnx.distributed.shutdown(timeout_seconds=bad)
    from nnx_core.agreement import AgreedError

    assert nnx.distributed.DistributedFailure is AgreedError  # NNx's name for what the other ranks raise


def test_a_writer_only_factory_building_a_stateful_callback_is_refused_on_the_writer():
    from nnx_api.distributed.callbacks import resolve_callbacks

    class Counter(nnx.Callback):
        distributed = "all"

        def component_spec(self):
            return ("counter", 1)

    wrapped = [nnx.distributed.writer_only(Counter)]
    with pytest.raises(ValueError, match="component state"):
        resolve_callbacks(wrapped, is_writer=True)
    assert resolve_callbacks(wrapped, is_writer=False)[1] == []  # the others build nothing (the refusal is agreed)


def test_rank_partition_refusals():
    for bad in (dict(n=-1, rank=0, world_size=1), dict(n=3, rank=2, world_size=2), dict(n=3, rank=0, world_size=1, kind="test"),
                dict(n=3, rank=0, world_size=1, policy="wrap"), dict(n=3, rank=0, world_size=1, shuffle="yes")):
        with pytest.raises((ValueError, TypeError)):
            RankPartition(**bad)


# ----------------------------------------------------------------------------- the process group
def test_group_info_is_nnx_two_tuple_with_its_attributes():
    info = nnx.distributed.GroupInfo(1, 2, 1, "gloo")
    rank, world = info
    assert (rank, world) == (1, 2) and info == (1, 2) and len(info) == 2 and info[1] == 2
    assert (info.rank, info.world_size, info.local_rank, info.backend) == (1, 2, 1, "gloo")
    assert info != nnx.distributed.GroupInfo(1, 2, 0, "gloo")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Union:
    """One process's equivalent of a 2-rank epoch: batch i is rank 0's batch i, then rank 1's."""

    def __init__(self, dataset, world=2):
        self.dataset, self.world, self.epoch = dataset, world, 0

    def set_epoch(self, epoch):
        self.epoch = epoch

    def __len__(self):
        return len(self._ranks()[0]) // worker.BATCH + bool(len(self._ranks()[0]) % worker.BATCH)

    def _ranks(self):
        parts = [RankPartition(len(self.dataset), rank=r, world_size=self.world, seed=worker.SEED) for r in range(self.world)]
        for p in parts:
            p.set_epoch(self.epoch)
        return [p.indices() for p in parts]

    def __iter__(self):
        ranks = self._ranks()
        for start in range(0, len(ranks[0]), worker.BATCH):
            rows = torch.tensor([i for r in ranks for i in r[start : start + worker.BATCH]])
            yield self.dataset.tensors[0][rows], self.dataset.tensors[1][rows]


@needs_gloo
@pytest.mark.timeout(300)
def test_two_ranks_record_the_extra_metrics_of_the_gathered_global_arrays(tmp_path):
    port = free_port()
    procs = []
    for rank in range(2):
        env = {**os.environ, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2",
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "NNX_PROGRESS": "0", "OMP_NUM_THREADS": "1",
               "PYTHONPATH": str(ROOT)}
        log = open(tmp_path / f"rank{rank}.log", "w")
        procs.append(subprocess.Popen([sys.executable, str(HERE / "ddp_extras_worker.py"), str(tmp_path), str(tmp_path / "runs")],
                                      env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT))
    try:
        codes = [p.wait(timeout=LAUNCH_TIMEOUT) for p in procs]
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        pytest.fail("the 2-rank launch hung")
    logs = [(tmp_path / f"rank{r}.log").read_text()[-3000:] for r in range(2)]
    assert codes == [0, 0], "\n".join(logs)
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(2)]
    assert [r["pair"] for r in ranks] == [(0, 2), (1, 2)]
    assert [r["info"] for r in ranks] == [(0, 2, 0, "gloo"), (1, 2, 1, "gloo")]
    assert ranks[0]["train"] == ranks[1]["train"] and ranks[0]["val"] == ranks[1]["val"]  # global: identical

    train_set, val_set = worker.datasets()
    single = worker.model().train(worker.params(Union(train_set), [val_set.tensors]), root=tmp_path / "single")
    drop = lambda extra: {k: v for k, v in extra.items() if k != "hits"}  # noqa: E731  (predictions: weights agree to 1e-6 only)
    assert [drop(e) for e in ranks[0]["train"]] == [drop(i.train_edp.extra) for i in single.idps]
    assert [drop(e) for e in ranks[0]["val"]] == [drop(single.epochs[e].val_edp.extra) for e in sorted(single.epochs)]
    assert ranks[0]["val"][0]["n"] == worker.VAL_ROWS - 2  # every validation row once, ignored targets removed
