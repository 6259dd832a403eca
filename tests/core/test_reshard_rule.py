"""``resume_mode="reshard"``: when a distributed checkpoint of another world size may be restored
(``agreement.resume_refusal``). A new rank's RNG streams: ``tests/api/test_reshard_streams.py``."""

from __future__ import annotations

import pytest

from nnx_core import agreement


def deal(world: int, rank: int, *, global_batch: int | None = 8, **kw) -> dict:
    """A partition record as ``train_loader`` writes it (``global_batch``: None for a per-rank batch)."""
    part = {"kind": "nnx.train_loader", "rows": 45, "policy": "pad", "seed": 11, "world_size": world, "rank": rank,
            "batch_size": 8 // world if global_batch else 4, "steps": 6}
    if global_batch:
        part.update(global_batch_size=global_batch, tail="global")
    return {**part, **kw}


def saved(world: int, **kw) -> dict:
    return {"world_size": world, "writer_rank": 0, "partitions": [deal(world, r, **kw) for r in range(world)]}


def refusal(checkpoint, world, *, reshard, **kw):
    return agreement.resume_refusal(checkpoint, stateful=True, world_size=world,
                                    partitions=[deal(world, r, **kw) for r in range(world)], reshard=reshard)


@pytest.mark.parametrize("before,after", [(2, 1), (1, 4), (2, 4), (4, 2)])
def test_reshard_restores_a_fixed_global_batch_on_another_world_size(before, after):
    assert refusal(saved(before), after, reshard=True) is None
    assert refusal(saved(before), before, reshard=True) is None  # the same world size: a stateful resume


def test_another_world_size_without_reshard_is_refused_naming_the_mode():
    reason = refusal(saved(2), 4, reshard=False)
    assert "written by 2 ranks, this run has 4" in reason and "resume_mode='reshard'" in reason


def test_reshard_needs_a_global_batch_on_both_sides():
    reason = refusal(saved(2, global_batch=None), 4, reshard=True)
    assert "global_batch_size=G" in reason and "weights_only" in reason
    assert "global_batch_size=G" in refusal(saved(2), 4, reshard=True, global_batch=None)
    assert "global_batch_size=G" in refusal(saved(2, tail=None), 4, reshard=True)  # a deal from before the global tail


def test_reshard_refuses_another_deal_naming_it():
    reason = refusal(saved(2), 4, reshard=True, global_batch=16)
    assert "differs from this run's" in reason and "16" in reason
    assert "seed" in refusal(saved(2), 1, reshard=True, seed=12)


def test_weights_only_is_never_refused():
    assert agreement.resume_refusal(saved(2), stateful=False, world_size=3, partitions=[], reshard=False) is None
