"""``nnx.distributed.train_loader(global_batch_size=G)``: the rows of one step over the whole
group are fixed, so the ranks' batch *i* together are the same rows on any number of ranks.

The oracle is the specification's words, not the product's dealing: each epoch's permutation is
``torch.randperm`` seeded with ``seed + epoch``, and a step of the group takes the next ``G`` rows
of it.
"""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from torch.utils.data import TensorDataset

import nnx_api as nnx

ROWS, G, SEED, EPOCH = 96, 16, 7, 3


def union_batches(world: int) -> list[set[int]]:
    """Every step's rows over the ranks of a ``world``-rank group."""
    data = TensorDataset(torch.arange(ROWS))
    loaders = [nnx.distributed.train_loader(data, global_batch_size=G, seed=SEED, rank=r, world_size=world)
               for r in range(world)]
    for loader in loaders:
        loader.set_epoch(EPOCH)
    per_rank = [[set(batch[0].tolist()) for batch in loader] for loader in loaders]
    assert len({len(steps) for steps in per_rank}) == 1  # every rank takes the same number of steps
    return [set().union(*(steps[i] for steps in per_rank)) for i in range(len(per_rank[0]))]


def test_a_global_batch_is_the_same_rows_on_one_two_and_four_ranks():
    permutation = torch.randperm(ROWS, generator=torch.Generator().manual_seed(SEED + EPOCH)).tolist()
    expected = [set(permutation[i : i + G]) for i in range(0, ROWS, G)]
    for world in (1, 2, 4):
        assert union_batches(world) == expected, world


@pytest.mark.parametrize("policy", ["pad", "drop"])
def test_the_tail_is_the_same_rows_on_any_world_size(policy):
    """45 rows in steps of 8: "pad" fills the last step with the permutation's leading rows (so
    6 steps of 8), "drop" leaves the last 5 rows out (5 steps), whatever the number of ranks; each
    step is a multiset (a padded row may train twice in a step)."""
    rows, g = 45, 8
    data = TensorDataset(torch.arange(rows))
    permutation = torch.randperm(rows, generator=torch.Generator().manual_seed(SEED + EPOCH)).tolist()
    padded = (permutation + permutation[:3]) if policy == "pad" else permutation[:40]
    expected = [Counter(padded[i : i + g]) for i in range(0, len(padded), g)]
    for world in (1, 2, 4, 8):
        loaders = [nnx.distributed.train_loader(data, global_batch_size=g, policy=policy, seed=SEED, rank=r,
                                                world_size=world) for r in range(world)]
        for loader in loaders:
            loader.set_epoch(EPOCH)
        per_rank = [[batch[0].tolist() for batch in loader] for loader in loaders]
        assert {len(steps) for steps in per_rank} == {len(expected)}, world
        assert all(len(batch) == g // world for steps in per_rank for batch in steps), world  # every step full
        assert [sum((Counter(steps[i]) for steps in per_rank), Counter()) for i in range(len(expected))] == expected, world


def test_dropping_every_row_is_refused():
    with pytest.raises(nnx.ParamsError, match="drops all 5 rows"):
        nnx.distributed.train_loader(TensorDataset(torch.arange(5)), global_batch_size=8, policy="drop", rank=0, world_size=2)


def test_a_global_batch_that_does_not_divide_is_refused_naming_the_nearest_sizes():
    data = TensorDataset(torch.arange(ROWS))
    with pytest.raises(nnx.ParamsError, match=r"30 rows do not divide among 4 ranks; use 28 or 32"):
        nnx.distributed.train_loader(data, global_batch_size=30, rank=0, world_size=4)
    with pytest.raises(nnx.ParamsError, match=r"3 rows do not divide among 4 ranks; use 4 "):
        nnx.distributed.train_loader(data, global_batch_size=3, rank=0, world_size=4)
    with pytest.raises(nnx.ParamsError, match="not both"):
        nnx.distributed.train_loader(data, 4, global_batch_size=16, rank=0, world_size=4)
    with pytest.raises(nnx.ParamsError, match="global_batch_size="):
        nnx.distributed.train_loader(data, rank=0, world_size=4)


def test_the_partition_records_the_global_batch_only_when_given():
    data = TensorDataset(torch.arange(ROWS))
    fixed = nnx.distributed.train_loader(data, global_batch_size=G, rank=1, world_size=2)
    assert fixed.batch_size == G // 2 and fixed.partition()["global_batch_size"] == G
    assert fixed.partition()["tail"] == "global"
    plain = nnx.distributed.train_loader(data, 8, rank=1, world_size=2).partition()
    assert "global_batch_size" not in plain and "tail" not in plain
