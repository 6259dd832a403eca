"""Commit points in a data-parallel group: every rank commits at the same update.

A signal reaches one rank and every rank has its own clock, so ``CommitPoints`` lets its two
answers (preempted? is the clock due?) ride on the all-reduces the group makes anyway
(``TorchCollective.rider``) and answers from their sums. Here the ranks are ``CommitPoints``
objects in one process and an all-reduce is the sum of their ``local()`` handed to each one's
``note`` — what ``TorchCollective.all_reduce_sum`` does with its rider (its own test below, on a
real one-rank gloo group). ``PositionedShards``: a position is a count of the group's batches, the
same rows on any world size with ``global_batch_size`` (checked against the loader's own
uninterrupted iteration and against the epoch's rows dealt by hand). ``DataParallel``: each rank's
part of a mid-epoch commit back on the same world size, and on another one rank 0's summary equal
to one accumulator fed every old rank's batches.
"""

from __future__ import annotations

import signal
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
from torch.utils.data import TensorDataset

from nnx_adapters.collective.torch import TorchCollective
from nnx_adapters.pytorch.metrics import EpochAccumulator
from nnx_adapters.pytorch.tasks import TaskAdapter
import nnx_api as nnx
from nnx_api.distributed.group import DataParallel
from nnx_api.distributed.loaders import PositionedShards, train_loader
from nnx_api.training.partial import EVERY, PREEMPTED, CommitPoints, load_tree, tree_state
from nnx_api.training.preemption import Preemption


def flag_of_one_rank() -> Preemption:
    """A rank's preemption flag, never entered: a signal "arrives" when a test sets ``.signal``."""
    return Preemption((signal.SIGTERM,))


def all_reduce(points: list[CommitPoints]) -> None:
    """One all-reduce of the group: every rank's riding numbers summed, the sums to each."""
    sums = [sum(column) for column in zip(*(p.local() for p in points), strict=True)]
    for p in points:
        p.note(sums)


def group(n: int, every=None, clocks=None) -> tuple[list[CommitPoints], list[Preemption]]:
    flags = [flag_of_one_rank() for _ in range(n)]
    points = [CommitPoints(every, flags[r], **({"clock": clocks[r]} if clocks else {})) for r in range(n)]
    for p in points:
        assert p.rides
        p.ride()
    return points, flags


def test_a_signal_on_one_rank_is_obeyed_by_every_rank_at_the_same_boundary():
    points, flags = group(2)
    flags[1].signal = signal.SIGTERM
    # before the next all-reduce no rank knows: rank 1 must not commit alone
    assert [p.due(5) for p in points] == [None, None]
    all_reduce(points)
    assert [p.due(5) for p in points] == [PREEMPTED, PREEMPTED]
    assert [p.preempted for p in points] == [True, True]
    # the rank that got no signal says so in its error
    assert "a signal on another rank" in str(points[0].preempted_error("r" * 32, 1, 5))
    assert "SIGTERM" in str(points[1].preempted_error("r" * 32, 1, 5))


def test_an_agreed_answer_is_kept_until_consumed():
    points, flags = group(2)
    flags[0].signal = signal.SIGTERM
    all_reduce(points)
    flags[0].signal = None  # (a later all-reduce carrying 0 does not undo what was agreed)
    all_reduce(points)
    assert [p.due(1) for p in points] == [PREEMPTED, PREEMPTED]


def test_each_ranks_clock_rides_and_a_commit_resets_it_on_every_rank():
    now = [0.0, 0.0]
    points, _ = group(2, every=timedelta(seconds=10), clocks=[lambda: now[0], lambda: now[1]])
    now[0] = 11.0  # rank 0's clock is due, rank 1's is not yet
    assert points[0].local() == [0.0, 1.0, 0.0] and points[1].local() == [0.0, 0.0, 0.0]
    all_reduce(points)
    assert [p.due(3) for p in points] == [EVERY, EVERY]
    for p in points:
        p.mark(3)
    assert [p.due(4) for p in points] == [None, None]
    all_reduce(points)  # rank 0's clock was reset by the commit
    assert [p.due(4) for p in points] == [None, None]


def test_a_count_of_updates_never_rides():
    points = CommitPoints(4, None)
    assert not points.rides
    assert CommitPoints(4, flag_of_one_rank()).rides and CommitPoints(timedelta(seconds=1), None).rides


def test_one_process_answers_alone():
    flag = flag_of_one_rank()
    points = CommitPoints(None, flag)
    assert points.due(1) is None
    flag.signal = signal.SIGTERM
    assert points.due(1) == PREEMPTED


@pytest.fixture
def gloo_one_rank(tmp_path):
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        yield TorchCollective()
    finally:
        dist.destroy_process_group()


def test_the_rider_travels_with_every_all_reduce_and_leaves_the_values_alone(gloo_one_rank):
    collective = gloo_one_rank
    points, flags = group(1)
    collective.rider = points[0]
    flags[0].signal = signal.SIGTERM
    assert points[0].due(1) is None  # not agreed before an all-reduce
    assert collective.all_reduce_sum([1.5, 2.0]) == [1.5, 2.0]
    assert points[0].due(1) == PREEMPTED
    collective.rider = None
    assert collective.all_reduce_sum([3.0]) == [3.0]


# --- PositionedShards --------------------------------------------------------------------------

ROWS = 45


def data() -> TensorDataset:
    return TensorDataset(torch.arange(ROWS, dtype=torch.float32).unsqueeze(1), torch.arange(ROWS))


def rows_of(batch) -> list[int]:
    return batch[1].tolist()


@pytest.mark.parametrize("skip", [0, 1, 3, 5, 6])
def test_skipping_batches_yields_the_rest_of_the_loaders_own_epoch(skip):
    loader = train_loader(data(), global_batch_size=8, policy="pad", seed=11, rank=1, world_size=2)
    loader.set_epoch(3)
    plain = [rows_of(b) for b in loader]
    pairs = list(PositionedShards(loader).epoch(3, skip=skip))
    assert [rows_of(b) for b, _ in pairs] == plain[skip:]
    assert [last for _, last in pairs] == [i == len(plain) - 1 for i in range(skip, len(plain))]


def test_the_position_is_called_once_before_the_first_batch():
    calls: list[int] = []
    loader = train_loader(data(), global_batch_size=8, rank=0, world_size=1)
    pairs = PositionedShards(loader).epoch(0, skip=2, at_position=lambda: calls.append(1))
    assert calls == []  # nothing runs before the first batch is asked for
    next(pairs)
    assert calls == [1]
    list(pairs)
    assert calls == [1]


def test_the_groups_remaining_batches_are_the_same_rows_on_any_world_size():
    """The epoch's rows by hand: the permutation seeded by seed + epoch, padded with its leading
    rows to a multiple of G; the group's batch k is positions k·G … k·G+G-1, whatever the ranks."""
    g, epoch, skip = 8, 2, 3
    order = torch.randperm(ROWS, generator=torch.Generator().manual_seed(11 + epoch)).tolist()
    order += order[: -ROWS % g]
    expected = [sorted(order[k * g : (k + 1) * g]) for k in range(skip, len(order) // g)]
    for world in (1, 2, 4):
        ranks = [list(PositionedShards(train_loader(data(), global_batch_size=g, seed=11, rank=r, world_size=world))
                      .epoch(epoch, skip=skip)) for r in range(world)]
        together = [sorted(row for pairs in ranks for row in rows_of(pairs[k][0])) for k in range(len(ranks[0]))]
        assert together == expected, world


def test_a_position_outside_the_epoch_is_refused():
    loader = train_loader(data(), global_batch_size=8, rank=0, world_size=1)
    with pytest.raises(ValueError, match="outside the epoch"):
        PositionedShards(loader).epoch(0, skip=len(loader) + 1)




# --- DataParallel: what it positions, and each rank's part of a mid-epoch commit ---------------


class Gathering:
    """The collective calls ``partial_state`` / ``partial_view`` make, for one rank of a group
    whose every rank's object is given (``all_gather`` returns them in rank order)."""

    def __init__(self, rank: int, world_size: int, objects: list | None = None) -> None:
        self.rank, self.world_size, self.objects = rank, world_size, objects

    def all_gather(self, obj):
        return [obj if r == self.rank else o for r, o in enumerate(self.objects)]


class Model:
    """What ``partial_view`` reads of the model."""

    class head:
        width = 3

    device = torch.device("cpu")


def test_a_group_positions_its_own_deal_only_and_says_what_to_use_instead():
    group = DataParallel(Gathering(0, 2), writer_rank=0)
    deal = train_loader(data(), global_batch_size=8, rank=0, world_size=2)
    assert isinstance(group.positioned(deal, seed=0), PositionedShards) and group.position_refusal(deal) is None
    plain = torch.utils.data.DataLoader(data(), batch_size=4)
    assert group.positioned(plain, seed=0) is None
    assert "use nnx.distributed.train_loader" in group.position_refusal(plain)


def summary_batches(seed: int):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(n, 3, generator=g), torch.randint(0, 3, (n,), generator=g)) for n in (4, 4, 3)]


def fed(batches) -> EpochAccumulator:
    task = TaskAdapter("categorical", "cross_entropy")
    acc = EpochAccumulator(task, 3, (nnx.MetricSpec(id="f1"),), full_scores=False)
    for output, target in batches:
        acc.add_loss(*task.sum_terms(output, target))
        acc.update(output, target)
    return acc


def test_each_rank_takes_back_its_own_part_on_the_same_world_size():
    parts = [{"summary": tree_state(fed(summary_batches(r))), "samples": 11 + r, "record_sizes": [4, 4, 3 + r]}
             for r in range(2)]
    saved = DataParallel(Gathering(0, 2, parts), writer_rank=0).partial_state(parts[0])
    assert saved["samples"] == 23 and saved["summary"] is None  # the group's samples; every rank's own in ranks
    for rank in range(2):
        view = DataParallel(Gathering(rank, 2), writer_rank=0).partial_view(saved, Model, fed([]))
        assert view["samples"] == parts[rank]["samples"] and view["record_sizes"] == parts[rank]["record_sizes"]
        restored = load_tree(fed([]), view["summary"])
        assert restored.result() == fed(summary_batches(rank)).result()


@pytest.mark.parametrize("new_world", [1, 3])
def test_on_another_world_size_rank_0_holds_the_sums_of_every_old_rank(new_world):
    """The oracle: one accumulator fed every old rank's batches (the epoch's summary adds the same
    numbers in another order, so it agrees within float tolerance)."""
    batches = [summary_batches(r) for r in range(2)]
    parts = [{"summary": tree_state(fed(b)), "samples": 11, "record_sizes": [4, 4, 3]} for b in batches]
    saved = DataParallel(Gathering(0, 2, parts), writer_rank=0).partial_state(parts[0])
    views = [DataParallel(Gathering(r, new_world), writer_rank=0).partial_view(saved, Model, fed([]))
             for r in range(new_world)]
    whole = fed(batches[0] + batches[1]).result()
    got = load_tree(fed([]), views[0]["summary"]).result()
    assert got["count"] == whole["count"] and got["loss"] == pytest.approx(whole["loss"], rel=1e-6)
    assert got["accuracy"] == pytest.approx(whole["accuracy"])
    assert views[0]["samples"] == 22 and all(v["summary"] is None and v["samples"] == 0 for v in views[1:])


def test_the_commit_points_ride_for_one_call_only():
    """A collective given to several ``train()`` calls (``DDP(collective=...)``) carries no
    earlier call's commit points: ``ride`` puts them on, the call's ``close`` takes them off."""
    collective = Gathering(0, 2)
    collective.rider = None
    group = DataParallel(collective, writer_rank=0)
    points, _ = group_of_one()
    group.ride(points)
    assert collective.rider is points
    group.close()
    assert collective.rider is None
    quiet = CommitPoints(3, None)  # a count of updates: nothing rides
    group.ride(quiet)
    assert collective.rider is None and quiet.agreed is None


def group_of_one() -> tuple[CommitPoints, Preemption]:
    flag = flag_of_one_rank()
    return CommitPoints(None, flag), flag


def test_a_collective_without_a_rider_agrees_at_each_boundary_in_an_all_reduce_of_its_own():
    """``DDP(collective=...)`` with a collective of the user's: the answers are summed at the
    update boundary itself (one more all-reduce there), so the ranks still commit alike."""
    flags = [flag_of_one_rank(), flag_of_one_rank()]
    points = [CommitPoints(None, f) for f in flags]

    class Summing:  # both ranks' all-reduce at the boundary, in one process
        rank, world_size = 0, 2

        def all_reduce_sum(self, values):
            return [a + b for a, b in zip(points[0].local(), points[1].local(), strict=True)]

    for p in points:
        DataParallel(Summing(), writer_rank=0).ride(p)
    flags[1].signal = signal.SIGTERM
    assert [p.due(2) for p in points] == [PREEMPTED, PREEMPTED]
