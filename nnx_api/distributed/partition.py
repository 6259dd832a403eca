"""``RankPartition``: one rank's dataset indices per epoch, as a ``torch.utils.data.Sampler``.

The deal is the one ``nnx.distributed.train_loader`` makes (torch's ``DistributedSampler`` deals
both): ``kind="train"`` permutes ``range(n)`` with the seed ``seed + epoch`` (identity order with
``shuffle=False``), evens it out to a multiple of the world size by ``policy`` — ``"pad"`` repeats
leading indices, ``"drop"`` drops the tail — and gives this rank positions ``rank, rank + world,
...``, so every rank serves the same count. ``kind="validation"`` is rows ``rank::world_size`` in
order, unpadded: every row exactly once over the ranks, and a rank may serve none.

>>> RankPartition(5, rank=1, world_size=2, shuffle=False).indices()
[1, 3, 0]
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from torch.utils.data import DistributedSampler, Sampler

from nnx_core.errors import ParamsError
from nnx_core.validate import check_choice, check_int

KINDS = ("train", "validation")
POLICIES = ("pad", "drop")


class RankPartition(Sampler[int]):
    """This rank's indices of a dataset of ``n`` rows (module docstring); ``set_epoch`` picks a
    train partition's permutation."""

    def __init__(
        self, n: int, *, rank: int, world_size: int, kind: str = "train", policy: str = "pad", shuffle: bool = True,
        seed: int = 0,
    ) -> None:
        self.n = check_int("RankPartition.n", n, minimum=0)
        self.world_size = check_int("RankPartition.world_size", world_size, minimum=1)
        self.rank = check_int("RankPartition.rank", rank, minimum=0)
        if self.rank >= self.world_size:
            raise ParamsError("RankPartition.rank", f"rank {rank} is outside a world of {world_size}")
        self.kind = check_choice("RankPartition.kind", kind, KINDS)
        self.policy = check_choice("RankPartition.policy", policy, POLICIES)
        if not isinstance(shuffle, bool):
            raise ParamsError("RankPartition.shuffle", f"must be True or False, got {shuffle!r}")
        self.shuffle = shuffle
        self.seed = check_int("RankPartition.seed", seed, minimum=0)
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Deal the permutation of ``epoch`` (a train partition; NNx calls it before every epoch)."""
        self.epoch = check_int("RankPartition.epoch", epoch, minimum=0)

    def _rank_indices(self, rank: int) -> list[int]:
        if self.kind == "validation":
            return list(range(rank, self.n, self.world_size))
        sampler = DistributedSampler(
            range(self.n), num_replicas=self.world_size, rank=rank, shuffle=self.shuffle, seed=self.seed,
            drop_last=self.policy == "drop",
        )
        sampler.set_epoch(self.epoch)
        return list(iter(sampler))

    def global_order(self) -> list[int]:
        """Every rank's indices of this epoch before dealing (train: padded or dropped)."""
        per_rank = [self._rank_indices(r) for r in range(self.world_size)]
        order: list[int] = []
        for position in range(max((len(p) for p in per_rank), default=0)):
            order.extend(p[position] for p in per_rank if position < len(p))
        return order

    def indices(self) -> list[int]:
        """This rank's indices of this epoch."""
        return self._rank_indices(self.rank)

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices())

    def __len__(self) -> int:
        return len(self.indices())

    def descriptor(self) -> dict[str, Any]:
        """What a resume must match: dataset size, world, kind, policy, shuffle and seed (never
        the epoch or the rank)."""
        return {"n": self.n, "world_size": self.world_size, "kind": self.kind, "policy": self.policy,
                "shuffle": self.shuffle, "seed": self.seed}


__all__ = ["KINDS", "POLICIES", "RankPartition"]
