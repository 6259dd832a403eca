"""A user's ``DataLoader`` driven from a position inside an epoch (exact mid-epoch resume).

``PositionedLoader.epoch(e, skip, at_position)`` draws what ``for batch in loader`` draws, in the
same order, and adds only what a position needs. Read ``_pairs`` (and ``_Keys.__iter__``, the batch
sampler it hands the inner loader) top to bottom:

    [skip == 0] at_position()     the run's streams as they stood before the epoch drew anything
    iterator made                 the base seed: one int64 from ``loader.generator`` (else the global
                                  torch RNG), every epoch; with reused persistent workers torch draws
                                  none, so NNx draws it (what an epoch draws is then the same whether
                                  the loader object began at epoch 0 or at a resumed epoch)
    batch sampler starts          its own seed (``RandomSampler``: an int64 from the global RNG, or a
                                  randperm from ``loader.generator``) at its first index batch
    index batches 0..skip-1       drawn and dropped: no sample is loaded
    [skip > 0] at_position()      where the plain loop stood once batch skip-1 was taken: the session
                                  puts the commit point's streams back here
    batches skip..n-1             ``(batch, is_last)``; is_last is ``i == len(batch_sampler) - 1``, so
                                  without workers batch i is loaded only when it is asked for
    end                           the batch sampler yielded ``len(batch_sampler)`` index batches, or
                                  ``TrainingInputError``

When: with ``num_workers=0`` the base seed is drawn as the iterator is made and the sampler's seed
at the first batch asked for; with workers both as the iterator is made (the first
``prefetch_factor × num_workers`` index batches are drawn then, and more ahead of the batches
returned). Either way the base seed comes first.

Samples are fetched through ``SeededSamples`` with keys ``(epoch, index)``. In a worker process each
sample's torch, ``random`` and numpy streams are seeded from (seed, epoch, index) before
``dataset[index]``, so neither the worker count, nor worker persistence, nor the resume position
changes what a sample draws. The main process seeds nothing: there the global streams are the run's
own, made exact across a resume by the session's RNG restore in ``at_position``.

A loader with ``state_dict()`` / ``load_state_dict()`` and a ``len()`` (torchdata's
``StatefulDataLoader`` protocol) is driven by ``StatefulLoader`` instead: its position is its own
state, asked at each commit inside an epoch (after batch k, before batch k+1 is drawn) and handed
back before the resumed epoch's iterator is made; the loader skips as it does (a
``StatefulDataLoader`` over a map-style dataset without loading the skipped samples). NNx seeds
nothing in its workers.
"""

from __future__ import annotations

import hashlib
import inspect
import random
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, get_worker_info

from nnx_core.errors import TrainingInputError

__all__ = ["PositionedLoader", "SeededSamples", "StatefulLoader", "position_refusal", "positioned"]

STATEFUL = (
    "pass a torch.utils.data.DataLoader over a map-style Dataset (NNx skips into its epochs by index), or leave "
    "commit_every unset: commits at epoch ends still work with any loader"
)
COPIED = ("num_workers", "collate_fn", "pin_memory", "timeout", "worker_init_fn", "multiprocessing_context",
          "generator", "prefetch_factor", "persistent_workers", "pin_memory_device", "in_order")


def position_refusal(loader: Any) -> str | None:
    """Why NNx cannot position ``loader`` inside an epoch (None: it can). One sentence that names
    the loader type and what to do."""
    name = type(loader).__name__
    if type(loader) is not DataLoader:
        if _has_state(loader):
            try:
                len(loader)
            except TypeError:
                return (f"{name} has state_dict()/load_state_dict() but no len(), so an epoch's last batch is unknown; "
                        f"give it a length, or {STATEFUL}")
            return None
        return (f"{name} is not a plain torch.utils.data.DataLoader (a subclass may iterate differently) and has no "
                f"state_dict()/load_state_dict() (torchdata's StatefulDataLoader protocol), so NNx cannot skip into its "
                f"epochs; {STATEFUL}")
    if isinstance(loader.dataset, IterableDataset):
        return f"DataLoader over the IterableDataset {type(loader.dataset).__name__} has no index to skip to; {STATEFUL}"
    if loader.batch_sampler is None:
        return ("DataLoader with batch_size=None (no automatic batching) cannot be positioned inside an epoch; give it a "
                "batch_size or a batch_sampler")
    try:
        len(loader.batch_sampler)  # type: ignore[arg-type]  # the question asked
    except TypeError:
        return (f"DataLoader's batch sampler {type(loader.batch_sampler).__name__} has no len(), so an epoch's last batch is "
                f"unknown; give it __len__, or {STATEFUL}")
    return None


def positioned(loader: Any, seed: int) -> PositionedLoader | StatefulLoader | None:
    """How NNx drives ``loader`` from a position inside an epoch: a plain ``DataLoader`` by index
    (``PositionedLoader``), a loader with the state protocol by its state (``StatefulLoader``);
    None when it cannot (``position_refusal``)."""
    if position_refusal(loader) is not None:
        return None
    return PositionedLoader(loader, seed) if type(loader) is DataLoader else StatefulLoader(loader)


def _has_state(loader: Any) -> bool:
    return callable(getattr(loader, "state_dict", None)) and callable(getattr(loader, "load_state_dict", None))


def sample_seed(seed: int, epoch: int, index: Any) -> int:
    """The 64-bit seed of one sample's streams in a worker: a hash of (seed, epoch, index)."""
    return int.from_bytes(hashlib.blake2b(f"{seed}/{epoch}/{index}".encode(), digest_size=8).digest(), "little")


class SeededSamples(Dataset[Any]):
    """``dataset`` read by keys ``(epoch, index)``; in a worker process each sample's torch,
    ``random`` and numpy streams are seeded from (seed, epoch, index) first. The main process
    seeds nothing (module docstring)."""

    def __init__(self, dataset: Any, seed: int) -> None:
        self.dataset, self.seed = dataset, seed

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, key: tuple[int, Any]) -> Any:
        epoch, index = key
        if get_worker_info() is not None:
            s = sample_seed(self.seed, epoch, index)
            torch.default_generator.manual_seed(s)  # not torch.manual_seed: it queues accelerator seeding (~150 µs)
            random.seed(s)
            np.random.seed(s % 2**32)
        return self.dataset[index]

    def __getitems__(self, keys: list[tuple[int, Any]]) -> list[Any]:
        """A batch's samples: the dataset's own ``__getitems__`` in the main process (as the plain
        loop calls it), one seeded ``__getitem__`` per sample in a worker."""
        many = getattr(self.dataset, "__getitems__", None)
        if not many or get_worker_info() is not None:
            return [self[key] for key in keys]
        return list(many([index for _, index in keys]))


class _Keys:
    """The user's batch sampler as lists of ``(epoch, index)`` keys, from a position on."""

    def __init__(self, batches: Any) -> None:
        self.batches, self.epoch, self.skip, self.drawn = batches, 0, 0, 0
        self.at_position: Callable[[], None] | None = None

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Iterator[list[tuple[int, Any]]]:
        epoch, skip, at_position = self.epoch, self.skip, self.at_position
        self.drawn, batches, done = 0, iter(self.batches), object()
        while self.drawn < skip and next(batches, done) is not done:  # drawn, never loaded
            self.drawn += 1
        if skip and at_position is not None:
            at_position()
        for batch in batches:
            self.drawn += 1
            yield [(epoch, index) for index in batch]


class PositionedLoader:
    """A plain ``DataLoader`` driven from a position inside an epoch (module docstring).

    ``loader`` is the one inner ``DataLoader`` it iterates every epoch (so persistent workers
    persist): the user's dataset wrapped in ``SeededSamples``, the user's batch sampler yielding
    ``(epoch, index)`` keys, every other option copied. The user's loader and dataset are never
    changed."""

    exact_workers = True  # each sample's worker randomness is NNx's (module docstring)

    def __init__(self, user: DataLoader[Any], seed: int) -> None:
        self.user, self._keys, self._started = user, _Keys(user.batch_sampler), False
        accepted = inspect.signature(DataLoader.__init__).parameters  # in_order: recent torch only
        # prefetch_factor: None without workers (torch >= 2.0), as the DataLoader asks
        options = {name: getattr(user, name) for name in COPIED if name in accepted and hasattr(user, name)}
        self.loader = DataLoader(SeededSamples(user.dataset, seed), batch_sampler=self._keys, **options)
        self._reuses = self.loader.persistent_workers and self.loader.num_workers > 0

    def __len__(self) -> int:
        """Batches per epoch: ``len(user_loader.batch_sampler)``."""
        return len(self._keys)

    def state(self) -> None:
        """Nothing beyond the batch count: the epoch's order is drawn again from the RNG streams."""
        return None

    def epoch(
        self, epoch: int, skip: int = 0, at_position: Callable[[], None] | None = None, state: Any = None
    ) -> Iterator[tuple[Any, bool]]:
        """``(batch, is_last)`` for the epoch's batches ``skip..len-1``; the first ``skip`` are
        drawn, not loaded; ``at_position`` is called once, at the position (module docstring).
        ``state`` (what ``state()`` returned at the position) is unused."""
        if not 0 <= skip <= len(self):
            raise ValueError(f"skip={skip} is outside the epoch's {len(self)} batches")
        return self._pairs(epoch, skip, at_position)

    def _pairs(self, epoch: int, skip: int, at_position: Callable[[], None] | None) -> Iterator[tuple[Any, bool]]:
        n = len(self)
        if skip == 0 and at_position is not None:
            at_position()
        if self._reuses and self._started:  # the base seed a fresh iterator would draw
            torch.empty((), dtype=torch.int64).random_(generator=self.loader.generator)
        self._keys.epoch, self._keys.skip, self._keys.at_position = epoch, skip, at_position
        batches, self._started = iter(self.loader), True
        for i, batch in enumerate(batches, start=skip):
            if i >= n:
                self._mismatch(epoch, f"more than {n}")
            yield batch, i == n - 1
        if self._keys.drawn != n:
            self._mismatch(epoch, str(self._keys.drawn))

    def _mismatch(self, epoch: int, drawn: str) -> None:
        _mismatch(f"the batch sampler {type(self.user.batch_sampler).__name__}", len(self), drawn, epoch)


class StatefulLoader:
    """A loader with ``state_dict()`` / ``load_state_dict()`` and a ``len()`` driven from the state
    it had at a commit (module docstring). The user's loader itself is iterated:

        [skip == 0] at_position()     as for ``PositionedLoader``
        [skip > 0] load_state_dict    the loader's state at the commit (``state()`` then)
        iterator made                 the loader resumes where its state says
        [skip > 0] at_position()      the commit point's streams back
        batches skip..n-1             ``(batch, is_last)``, is_last from ``len(loader)``
        end                           ``len(loader)`` batches in all, or ``TrainingInputError``
    """

    exact_workers = False  # its workers' randomness is the loader's own: a resume starts new streams

    def __init__(self, user: Any) -> None:
        self.user = user

    def __len__(self) -> int:
        """Batches per epoch: ``len(loader)``."""
        return len(self.user)

    def state(self) -> Any:
        """The loader's ``state_dict()``: asked at a commit, after the epoch's last batch taken."""
        return self.user.state_dict()

    def epoch(
        self, epoch: int, skip: int = 0, at_position: Callable[[], None] | None = None, state: Any = None
    ) -> Iterator[tuple[Any, bool]]:
        """``(batch, is_last)`` for the epoch's batches ``skip..len-1``; a position (``skip > 0``)
        needs ``state``, what ``state()`` returned there."""
        if not 0 <= skip <= len(self):
            raise ValueError(f"skip={skip} is outside the epoch's {len(self)} batches")
        if skip and state is None:
            raise ValueError(f"a position inside the epoch (skip={skip}) needs the loader's state_dict() from there")
        return self._pairs(epoch, skip, at_position, state)

    def _pairs(self, epoch: int, skip: int, at_position: Callable[[], None] | None, state: Any) -> Iterator[tuple[Any, bool]]:
        n, i = len(self), skip - 1
        if skip == 0 and at_position is not None:
            at_position()
        if skip:
            self.user.load_state_dict(state)
        batches = iter(self.user)
        if skip and at_position is not None:
            at_position()
        for i, batch in enumerate(batches, start=skip):
            if i >= n:
                _mismatch(type(self.user).__name__, n, f"more than {n}", epoch)
            yield batch, i == n - 1
        if i != n - 1:
            _mismatch(type(self.user).__name__, n, str(i + 1), epoch)


def _mismatch(what: str, n: int, drawn: str, epoch: int) -> None:
    raise TrainingInputError(
        f"{what}'s len() is {n} but it yielded {drawn} batches in epoch {epoch}; make its __len__ agree with what it yields"
    )
