"""Each rank's share of the data (seed §3, "Partitions").

``train_loader(dataset, batch_size, policy=, seed=)`` deals each epoch's permutation (seeded by
``seed + epoch``) to the ranks after padding ("pad": leading rows repeated) or dropping ("drop")
the tail, so every rank takes the same number of steps: exactly torch's ``DistributedSampler``,
which does the dealing (NNx calls ``set_epoch`` before every epoch). With
``global_batch_size=G`` the same permutation is padded or dropped to a multiple of ``G`` instead
(of the world size) and dealt the same way, so the group's batch *i* is rows ``i·G … i·G+G-1``
of the padded permutation on any world size, the tail included. Batches of a
``TensorDataset`` are gathered with one index per tensor. ``validation_loader(dataset,
batch_size)`` scores rows ``rank::world`` unpadded (a ``Subset``): every row exactly once, a rank
may have none, and the validation loop runs no collective.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch.utils.data import DistributedSampler, Subset, default_collate

from nnx_core.errors import ParamsError
from nnx_api.distributed.process_group import _group_place

POLICIES = ("pad", "drop")


def _collate(dataset: Any, index: Sequence[int], collate_fn: Callable[[list[Any]], Any] | None = None) -> Any:
    if collate_fn is not None:  # the user's, as a DataLoader would call it
        return collate_fn([dataset[i] for i in index])
    tensors = getattr(dataset, "tensors", None)
    if isinstance(tensors, tuple) and all(isinstance(t, torch.Tensor) for t in tensors):  # TensorDataset: one gather
        rows = torch.as_tensor(index, dtype=torch.long)
        return tuple(t[rows] for t in tensors)
    return default_collate([dataset[i] for i in index])


def _check_collate(collate_fn: Any, where: str) -> Any:
    if collate_fn is not None and not callable(collate_fn):
        raise ParamsError(f"{where}.collate_fn", f"must be callable (a list of dataset items -> a batch), got {collate_fn!r}")
    return collate_fn


def _check_dataset(dataset: Any, batch_size: Any, where: str) -> int:
    if not hasattr(dataset, "__getitem__") or not hasattr(dataset, "__len__"):
        raise ParamsError(f"{where}.dataset", f"must be a map-style dataset (len + indexing), got {type(dataset).__name__}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ParamsError(f"{where}.batch_size", f"must be an int ≥ 1, got {batch_size!r}")
    return len(dataset)


class ShardedTrainLoader:
    """One rank's share of every epoch (``train_loader``); ``set_epoch`` picks the permutation."""

    def __init__(
        self, dataset: Any, batch_size: int, policy: str, seed: int, rank: int, world_size: int, shuffle: bool = True,
        collate_fn: Callable[[list[Any]], Any] | None = None,
    ) -> None:
        self.rows = _check_dataset(dataset, batch_size, "train_loader")
        if policy not in POLICIES:
            raise ParamsError("train_loader.policy", f"must be 'pad' or 'drop', got {policy!r}")
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ParamsError("train_loader.seed", f"must be an int ≥ 0, got {seed!r}")
        if not isinstance(shuffle, bool):
            raise ParamsError("train_loader.shuffle", f"must be True or False, got {shuffle!r}")
        self.shuffle, self.collate_fn = shuffle, _check_collate(collate_fn, "train_loader")
        self.dataset, self.batch_size, self.policy, self.seed = dataset, batch_size, policy, seed
        self.rank, self.world_size = rank, world_size
        self.global_batch_size: int | None = None  # train_loader(global_batch_size=...): the group's rows per step
        self.sampler = DistributedSampler(
            dataset, num_replicas=world_size, rank=rank, shuffle=shuffle, seed=seed, drop_last=policy == "drop"
        )

    def set_epoch(self, epoch: int) -> None:
        """Deal the permutation of ``epoch`` (NNx calls this before every epoch)."""
        self.sampler.set_epoch(int(epoch))

    @property
    def epoch(self) -> int:
        """The epoch whose permutation is dealt."""
        return self.sampler.epoch

    @property
    def rows_per_rank(self) -> int:
        """How many rows each rank takes per epoch."""
        if self.global_batch_size is None:
            return self.sampler.num_samples
        return self._global_rows() // self.world_size

    def _global_rows(self) -> int:
        """Under ``global_batch_size``: the epoch's rows after padding or dropping to a multiple of it."""
        g = self.global_batch_size
        assert g is not None
        return -(-self.rows // g) * g if self.policy == "pad" else self.rows // g * g

    def __len__(self) -> int:
        return -(-self.rows_per_rank // self.batch_size)

    def ids(self) -> list[int]:
        """This rank's rows of the current epoch, in batch order (NNx's name for ``indices``)."""
        return self.indices()

    def indices(self) -> list[int]:
        """This rank's rows of the current epoch, in batch order."""
        if self.global_batch_size is None:
            return list(iter(self.sampler))
        g = torch.Generator()
        g.manual_seed(self.seed + self.sampler.epoch)  # DistributedSampler's permutation
        order = torch.randperm(self.rows, generator=g).tolist() if self.shuffle else list(range(self.rows))
        total = self._global_rows()
        while len(order) < total:  # "pad": leading rows again, as often as needed
            order += order[: total - len(order)]
        return order[:total][self.rank :: self.world_size]

    def __iter__(self) -> Iterator[Any]:
        index = self.indices()
        for start in range(0, len(index), self.batch_size):
            yield _collate(self.dataset, index[start : start + self.batch_size], self.collate_fn)

    def partition(self) -> dict[str, Any]:
        """What a checkpoint records of this deal (a stateful resume needs the same)."""
        record = {
            "kind": "nnx.train_loader", "rows": self.rows, "batch_size": self.batch_size, "policy": self.policy,
            "seed": self.seed, "world_size": self.world_size, "rank": self.rank, "steps": len(self),
        }
        if not self.shuffle:  # only then: the records of earlier runs stay as they were
            record["shuffle"] = False
        if self.global_batch_size is not None:  # only then: the records of runs before it stay as they were
            record["global_batch_size"] = self.global_batch_size
            record["tail"] = "global"  # padded or dropped to a multiple of the global batch, not of the world size
        return record


class PositionedShards:
    """A ``ShardedTrainLoader`` driven from a position inside an epoch (``commit_every`` under
    ``DDP()``; the interface of ``nnx_adapters.pytorch.positioned.PositionedLoader``). A position is
    a count of the group's batches: the deal draws nothing from any RNG stream, so skipping batches
    is slicing this rank's rows, and with ``global_batch_size`` the group's batch *k* is the same
    rows on any world size, so the epoch's remaining batches are dealt anew to the ranks of a
    resharded run (``resume_mode="reshard"``)."""

    exact_workers = True  # no worker processes: the deal is collated in the process

    def __init__(self, loader: ShardedTrainLoader) -> None:
        self.loader = loader

    def __len__(self) -> int:
        return len(self.loader)

    def state(self) -> None:
        """Nothing beyond the batch count: the deal is a function of the epoch."""
        return None

    def epoch(
        self, epoch: int, skip: int = 0, at_position: Callable[[], None] | None = None, state: Any = None
    ) -> Iterator[tuple[Any, bool]]:
        """``(batch, is_last)`` for this rank's batches ``skip..len-1`` of ``epoch``; nothing is
        drawn or loaded before them; ``at_position`` is called once, before the first; ``state``
        is unused."""
        if not 0 <= skip <= len(self):
            raise ValueError(f"skip={skip} is outside the epoch's {len(self)} batches")
        return self._pairs(epoch, skip, at_position)

    def _pairs(self, epoch: int, skip: int, at_position: Callable[[], None] | None) -> Iterator[tuple[Any, bool]]:
        loader, n = self.loader, len(self)
        loader.set_epoch(epoch)
        if at_position is not None:
            at_position()
        index, size = loader.indices(), loader.batch_size
        for i in range(skip, n):
            yield _collate(loader.dataset, index[i * size : (i + 1) * size], loader.collate_fn), i == n - 1


class ShardedValidationLoader:
    """Rows ``rank::world`` in order, unpadded (``validation_loader``): every row scored once."""

    rank_shard = True  # one rank's share: it may hold no batch (the run's checks do not refuse it as empty)

    def __init__(
        self, dataset: Any, batch_size: int, rank: int, world_size: int, collate_fn: Callable[[list[Any]], Any] | None = None
    ) -> None:
        self.rows = _check_dataset(dataset, batch_size, "validation_loader")
        self.collate_fn = _check_collate(collate_fn, "validation_loader")
        if self.rows == 0:
            raise ParamsError("validation_loader.dataset", "has no rows: no rank would score anything; give it rows")
        self.rank, self.world_size, self.batch_size = rank, world_size, batch_size
        self.shard = Subset(dataset, range(rank, self.rows, world_size))

    def indices(self) -> list[int]:
        """This rank's rows: ``rank::world_size``, unpadded."""
        return list(self.shard.indices)

    def ids(self) -> list[int]:
        """This rank's rows (NNx's name for ``indices``)."""
        return self.indices()

    def __len__(self) -> int:
        return -(-len(self.shard) // self.batch_size)

    def __iter__(self) -> Iterator[Any]:
        index = self.indices()
        for start in range(0, len(index), self.batch_size):
            yield _collate(self.shard.dataset, index[start : start + self.batch_size], self.collate_fn)


def train_loader(
    dataset: Any, batch_size: int | None = None, policy: str = "pad", seed: int = 0, *,
    global_batch_size: int | None = None, rank: int | None = None, world_size: int | None = None, shuffle: bool = True,
    collate_fn: Callable[[list[Any]], Any] | None = None,
) -> ShardedTrainLoader:
    """This rank's training batches: each epoch's permutation (seeded by ``seed + epoch``) padded or
    dropped to a multiple of the world size and dealt to the ranks, so every rank takes the same
    number of steps. ``rank`` / ``world_size`` default to the process group's (0 / 1 without one).
    ``shuffle=False`` deals the rows in dataset order every epoch instead of a permutation;
    ``collate_fn`` turns a batch's list of dataset items into the batch, as a ``DataLoader``'s does.

    ``batch_size`` is the rows of one rank's step; ``global_batch_size=G`` fixes the rows of one
    step over the whole group instead (``G / world_size`` per rank; a ``G`` that does not divide is
    refused, naming the nearest sizes that do). The permutation is then padded ("pad": its
    leading rows repeated) or dropped ("drop") to a multiple of ``G``, not of the world size, so
    the ranks' batch *i* together are the same rows of the epoch on any number of ranks, the tail
    included, and every step has ``G`` rows: the updates do not depend on the world size, up to
    float summation order, and ``resume_mode="reshard"`` can continue the run on another one."""
    r, w = _group_place(rank, world_size)
    if global_batch_size is not None:
        if batch_size is not None:
            raise ParamsError("train_loader", "give batch_size (rows per rank and step) or global_batch_size, not both")
        batch_size = per_rank_batch(global_batch_size, w)
    elif batch_size is None:
        raise ParamsError("train_loader.batch_size", "give batch_size (rows per rank and step) or global_batch_size=")
    loader = ShardedTrainLoader(dataset, batch_size, policy, seed, r, w, shuffle, collate_fn)
    loader.global_batch_size = global_batch_size
    if global_batch_size is not None and policy == "drop" and loader.rows < global_batch_size:
        raise ParamsError(
            "train_loader.global_batch_size",
            f"policy='drop' with {global_batch_size} rows per step drops all {loader.rows} rows of the dataset; use a "
            "smaller global_batch_size or policy='pad'",
        )
    return loader


def per_rank_batch(global_batch_size: Any, world_size: int) -> int:
    """``global_batch_size / world_size``, refused unless it is a whole number of rows ≥ 1."""
    g = global_batch_size
    if isinstance(g, bool) or not isinstance(g, int) or g < 1:
        raise ParamsError("train_loader.global_batch_size", f"must be an int ≥ 1, got {g!r}")
    if g % world_size:
        lower, upper = g - g % world_size, g - g % world_size + world_size
        nearest = f"{lower} or {upper}" if lower else f"{upper}"
        raise ParamsError(
            "train_loader.global_batch_size",
            f"{g} rows do not divide among {world_size} ranks; use {nearest} (a multiple of {world_size})",
        )
    return g // world_size


def validation_loader(
    dataset: Any, batch_size: int, *, rank: int | None = None, world_size: int | None = None,
    collate_fn: Callable[[list[Any]], Any] | None = None,
) -> ShardedValidationLoader:
    """This rank's validation rows ``rank::world``, unpadded: every row is scored exactly once and a
    rank may have none. The validation loop runs no collective; its sums are added once per epoch.
    ``collate_fn``: as ``train_loader``'s."""
    r, w = _group_place(rank, world_size)
    return ShardedValidationLoader(dataset, batch_size, r, w, collate_fn)


def partition_of(loader: Any) -> dict[str, Any]:
    """A train loader's partition record (a custom loader: its type and step count)."""
    if isinstance(loader, ShardedTrainLoader):
        return loader.partition()
    return {"kind": "custom", "loader": type(loader).__name__, "steps": len(loader)}


__all__ = ["POLICIES", "PositionedShards", "ShardedTrainLoader", "ShardedValidationLoader", "partition_of", "train_loader", "validation_loader"]
