"""``nnx_adapters.pytorch.positioned``: a user's DataLoader driven from a position inside an epoch.

The oracle is the plain loop over the user's own loader: with ``num_workers=0`` a positioned epoch
draws what it draws and yields what it yields, bit for bit; a skipped start loads nothing; with
workers every sample's randomness is a function of (seed, epoch, index) alone.
"""

from __future__ import annotations

import os
import random

import numpy as np
import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, IterableDataset, RandomSampler, Sampler

from nnx_core.errors import TrainingInputError
from nnx_adapters.pytorch.positioned import PositionedLoader, SeededSamples, StatefulLoader, position_refusal, positioned

WAIT = 60  # seconds: every worker loader's DataLoader timeout
pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


class Augmenting(Dataset):
    """Sample i with draws from torch, random and numpy (an augmentation); counts what it loads
    (in the main process)."""

    def __init__(self, n: int = 12) -> None:
        self.n, self.loaded = n, []

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        self.loaded.append(i)
        draws = torch.cat([torch.rand(1), torch.tensor([random.random(), np.random.rand()], dtype=torch.float32)])
        return torch.tensor(i), draws


class Stream(IterableDataset):
    def __iter__(self):
        return iter(range(4))


class Unsized(Sampler):
    def __iter__(self):
        return iter([[0, 1], [2, 3]])


class Lying(Sampler):
    """A batch sampler whose len() says 3 while it yields ``yields`` batches."""

    def __init__(self, yields: int) -> None:
        self.yields = yields

    def __len__(self) -> int:
        return 3

    def __iter__(self):
        return iter([[2 * b, 2 * b + 1] for b in range(self.yields)])


class Stateful:
    def __iter__(self):
        return iter([])

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


def same(a, b) -> bool:
    """Batches (nested tuples/lists of tensors) equal bit for bit."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if not isinstance(a, (list, tuple)):
        return type(a) is type(b) and a == b
    return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))


def streams():
    return torch.get_rng_state(), random.getstate(), np.random.get_state()


def put_back(state) -> None:
    torch.set_rng_state(state[0])
    random.setstate(state[1])
    np.random.set_state(state[2])


def scramble() -> None:
    random.seed(999)
    np.random.seed(999)


def seeded(seed: int = 0) -> None:
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed)


# -- rule 1: which loaders are positionable --------------------------------------------------------


def test_plain_map_style_batched_loaders_are_positionable():
    ds = Augmenting()
    for loader in (DataLoader(ds, batch_size=4), DataLoader(ds, batch_size=5, shuffle=True, drop_last=True),
                   DataLoader(ds, batch_sampler=BatchSampler(RandomSampler(ds), 3, False))):
        assert position_refusal(loader) is None
        pl = positioned(loader, seed=1)
        assert isinstance(pl, PositionedLoader) and len(pl) == len(loader.batch_sampler)


class Sub(DataLoader):
    pass


@pytest.mark.parametrize(
    ("make", "named", "stateful_hint"),
    [
        (lambda: Sub(Augmenting(), batch_size=4), "Sub", True),
        (lambda: DataLoader(Stream(), batch_size=2), "Stream", True),
        (lambda: DataLoader(Augmenting(), batch_size=None), "batch_size=None", False),
        (lambda: DataLoader(Augmenting(), batch_sampler=Unsized()), "Unsized", True),
        (lambda: [[1, 2]], "list", True),
        (Stateful, "Stateful", True),
    ],
)
def test_other_loaders_are_refused_with_a_reason(make, named, stateful_hint):
    loader = make()
    why = position_refusal(loader)
    assert positioned(loader, seed=1) is None
    assert why is not None and named in why and why.count(". ") == 0
    assert ("commits at epoch ends still work with any loader" in why) is stateful_hint
    if isinstance(loader, Stateful):
        assert "state_dict()/load_state_dict() but no len()" in why


# -- rule 1b: a loader with the state protocol and a len() is driven by its state -------------------


class SizedStateful(Stateful):
    """Yields ``yields`` batches [i]; len() says 3; its state is how many it yielded."""

    def __init__(self, yields: int = 3) -> None:
        self.yields, self.at, self.loaded = yields, 0, []

    def __len__(self) -> int:
        return 3

    def __iter__(self):
        start, self.at = self.at, 0
        for i in range(start, self.yields):
            self.at = i + 1
            yield [i]
        self.at = 0

    def state_dict(self):
        return {"at": self.at}

    def load_state_dict(self, state):
        self.loaded.append(state)
        self.at = state["at"]


def test_a_loader_with_the_state_protocol_resumes_from_its_state():
    loader = SizedStateful()
    pl = positioned(loader, seed=1)
    assert position_refusal(loader) is None and isinstance(pl, StatefulLoader) and not pl.exact_workers
    pairs = pl.epoch(0)
    assert next(pairs) == ([0], False) and pl.state() == {"at": 1}
    calls = []
    rest = list(pl.epoch(0, skip=1, at_position=lambda: calls.append(loader.at), state={"at": 1}))
    assert rest == [([1], False), ([2], True)] and loader.loaded == [{"at": 1}]
    assert calls == [1]  # once, after the iterator was made at the position
    with pytest.raises(ValueError, match="needs the loader's state_dict"):
        pl.epoch(0, skip=1)


@pytest.mark.parametrize("yields", [2, 4])
def test_a_stateful_loader_whose_len_lies_is_refused_at_the_epoch_end(yields):
    with pytest.raises(TrainingInputError, match=f"SizedStateful's len\\(\\) is 3 but it yielded {'more than 3' if yields > 3 else 2}"):
        list(positioned(SizedStateful(yields), seed=1).epoch(0))


# -- rule 2: one inner DataLoader, options copied, the user's loader untouched ---------------------


def test_one_inner_loader_copies_every_option_and_leaves_the_user_loader_alone():
    ds, gen = Augmenting(), torch.Generator().manual_seed(3)

    def init(worker_id):
        pass

    def collate(samples):
        return samples

    user = DataLoader(ds, batch_size=4, shuffle=True, num_workers=2, collate_fn=collate, timeout=WAIT,
                      worker_init_fn=init, multiprocessing_context="fork", generator=gen, prefetch_factor=3,
                      persistent_workers=True, in_order=False)
    before = dict(vars(user))
    pl = positioned(user, seed=1)
    inner = pl.loader
    assert isinstance(inner.dataset, SeededSamples) and inner.dataset.dataset is ds
    for name in ("num_workers", "collate_fn", "pin_memory", "timeout", "worker_init_fn", "multiprocessing_context",
                 "generator", "prefetch_factor", "persistent_workers", "pin_memory_device", "in_order"):
        assert getattr(inner, name) == getattr(user, name), name
    assert inner.batch_sampler.batches is user.batch_sampler
    assert len(list(pl.epoch(0))) == 3
    assert vars(user) == before and user._iterator is None


def test_without_workers_no_prefetch_factor_is_passed():
    inner = positioned(DataLoader(Augmenting(), batch_size=4), seed=1).loader
    assert inner.prefetch_factor is None and inner.num_workers == 0


class Pids(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        return torch.tensor(os.getpid())


def test_persistent_workers_are_kept_across_epochs():
    pl = positioned(DataLoader(Pids(), batch_size=2, num_workers=2, persistent_workers=True, timeout=WAIT), seed=1)
    pids = [{int(p) for batch, _ in pl.epoch(e) for p in batch} for e in range(2)]
    assert pids[0] == pids[1] and len(pids[0]) == 2 and os.getpid() not in pids[0]


# -- rule 3: the plain loop's draws, in its order ---------------------------------------------------


@pytest.mark.parametrize("kind", ["shuffle", "generator", "sequential", "replacement"])
def test_an_epoch_draws_and_yields_what_the_plain_loop_does(kind):
    def user():
        ds = Augmenting(13)
        if kind == "replacement":
            return DataLoader(ds, batch_sampler=BatchSampler(RandomSampler(ds, replacement=True, num_samples=70), 4, False))
        gen = torch.Generator().manual_seed(5) if kind == "generator" else None
        return DataLoader(ds, batch_size=4, shuffle=kind != "sequential", generator=gen)

    plain_loader, loader = user(), user()
    seeded()
    expected = [list(plain_loader) for _ in range(2)]
    after = streams(), plain_loader.generator and plain_loader.generator.get_state()
    pl = positioned(loader, seed=1)
    seeded()
    got = [list(pl.epoch(e)) for e in range(2)]
    assert all(same(b, e) for g, x in zip(got, expected, strict=True) for (b, _), e in zip(g, x, strict=True))
    assert [[last for _, last in g] for g in got] == [[i == len(x) - 1 for i in range(len(x))] for x in expected]
    assert torch.equal(streams()[0], after[0][0]) and random.getstate() == after[0][1]
    assert np.array_equal(np.random.get_state()[1], after[0][2][1])
    if kind == "generator":
        assert torch.equal(loader.generator.get_state(), after[1])


# -- rule 4: nothing is loaded ahead; the sampler must yield its len() ------------------------------


def test_a_batch_is_loaded_only_when_asked_for():
    ds = Augmenting(12)
    pl = positioned(DataLoader(ds, batch_size=3, shuffle=True), seed=1)
    pairs = pl.epoch(0)
    for k in range(1, 5):
        batch, last = next(pairs)
        assert len(ds.loaded) == 3 * k and last is (k == 4)
    assert next(pairs, None) is None


@pytest.mark.parametrize("yields", [2, 4])
def test_a_batch_sampler_whose_len_disagrees_raises(yields):
    pl = positioned(DataLoader(Augmenting(), batch_sampler=Lying(yields)), seed=1)
    with pytest.raises(TrainingInputError, match=r"len\(\) is 3 but it yielded"):
        list(pl.epoch(0))


# -- rule 5: skipping loads nothing; the rest is the plain loop's tail -------------------------------


@pytest.mark.parametrize("skip", [0, 1, 3, 5])
def test_skipped_batches_are_drawn_not_loaded(skip):
    ds = Augmenting(15)
    pl = positioned(DataLoader(ds, batch_size=3, shuffle=True), seed=1)
    calls = []
    pairs = list(pl.epoch(0, skip=skip, at_position=lambda: calls.append(len(ds.loaded))))
    assert calls == [0]
    assert len(ds.loaded) == 3 * (5 - skip) and len(pairs) == 5 - skip
    assert [last for _, last in pairs] == [i == 4 for i in range(skip, 5)]


@pytest.mark.parametrize("generator", [False, True])
@pytest.mark.parametrize("skip", [1, 2, 4])
def test_a_resumed_epoch_is_the_tail_of_the_uninterrupted_one(skip, generator):
    def user():
        return DataLoader(Augmenting(13), batch_size=3, shuffle=True,
                          generator=torch.Generator().manual_seed(7) if generator else None)

    plain_loader = user()
    seeded()
    it, batches, at = iter(plain_loader), [], {}
    for i, batch in enumerate(it):
        batches.append(batch)
        at[i] = streams()
    seeded()
    scramble()
    pl = positioned(user(), seed=1)
    tail = list(pl.epoch(0, skip=skip, at_position=lambda: put_back(at[skip - 1])))
    assert len(tail) == len(batches) - skip
    assert all(same(b, e) for (b, _), e in zip(tail, batches[skip:], strict=True))


def test_at_position_at_skip_0_comes_before_the_epoch_draws_anything():
    seeded()
    before = streams()
    expected = list(DataLoader(Augmenting(13), batch_size=3, shuffle=True))
    seeded(123)
    pl = positioned(DataLoader(Augmenting(13), batch_size=3, shuffle=True), seed=1)
    got = list(pl.epoch(0, at_position=lambda: put_back(before)))
    assert all(same(b, e) for (b, _), e in zip(got, expected, strict=True))


def test_skipping_the_whole_epoch_yields_nothing_and_beyond_it_is_refused():
    ds = Augmenting(12)
    pl = positioned(DataLoader(ds, batch_size=4), seed=1)
    calls = []
    assert list(pl.epoch(0, skip=3, at_position=lambda: calls.append(1))) == [] and calls == [1] and ds.loaded == []
    with pytest.raises(ValueError, match="skip=4"):
        pl.epoch(0, skip=4)
    with pytest.raises(ValueError, match="skip=-1"):
        pl.epoch(0, skip=-1)


def test_the_main_process_seeds_nothing():
    ds = Augmenting(4)
    seeded(3)
    state = streams()
    plain = ds[2]
    put_back(state)
    assert same(SeededSamples(ds, seed=1)[(0, 2)], plain)
    put_back(state)
    assert same(SeededSamples(ds, seed=1).__getitems__([(0, 2)])[0], plain)


# -- rule 6: in workers a sample's draws depend on (seed, epoch, index) only ------------------------


def by_index(pairs) -> dict[int, torch.Tensor]:
    """Each sample's draws, by index, from ``(batch, is_last)`` pairs."""
    return {int(i): d for batch, _ in pairs for i, d in zip(batch[0], batch[1], strict=True)}


def workers(n: int, persistent: bool = False, shuffle: bool = True, batch_size: int = 3) -> DataLoader:
    return DataLoader(Augmenting(12), batch_size=batch_size, shuffle=shuffle, num_workers=n,
                      persistent_workers=persistent, timeout=WAIT)


def test_worker_count_and_persistence_do_not_change_a_sample():
    runs = []
    for n, persistent in ((2, False), (3, False), (2, True)):
        seeded()
        runs.append(list(positioned(workers(n, persistent), seed=1).epoch(4)))
    assert all(same(a, b) for run in runs[1:] for a, b in zip(runs[0], run, strict=True))


def test_a_resumed_epoch_with_persistent_workers_is_the_uninterrupted_one():
    seeded()
    pl = positioned(workers(2, persistent=True), seed=1)
    list(pl.epoch(0))
    start = streams()
    epoch1 = list(pl.epoch(1))
    put_back(start)
    fresh = list(positioned(workers(2, persistent=True), seed=1).epoch(1))
    assert all(same(a, b) for a, b in zip(epoch1, fresh, strict=True))
    # why: the plain loader keeps its workers' streams running across epochs (and draws a base
    # seed only on its first epoch), so its epoch 1 depends on whether it ran epoch 0
    seeded()
    plain = workers(2, persistent=True, shuffle=False)
    list(plain)
    start = streams()
    plain1 = list(plain)
    put_back(start)
    fresh1 = list(workers(2, persistent=True, shuffle=False))
    assert not same(plain1, fresh1)


def test_a_skipped_start_with_workers_gives_the_tail():
    seeded()
    whole = list(positioned(workers(2), seed=1).epoch(2))
    seeded()
    tail = list(positioned(workers(2), seed=1).epoch(2, skip=3))
    assert all(same(a, b) for a, b in zip(whole[3:], tail, strict=True)) and len(tail) == 1


def test_epochs_and_indices_draw_differently():
    pl = positioned(workers(2, shuffle=False, batch_size=4), seed=1)
    e0, e1 = by_index(pl.epoch(0)), by_index(pl.epoch(1))
    assert all(not torch.equal(e0[i], e1[i]) for i in e0)
    for draws in (e0, e1):
        for d in range(3):  # torch, random, numpy: distinct across the samples of an epoch
            assert len({float(v[d]) for v in draws.values()}) == len(draws)
    other = by_index(positioned(workers(2, shuffle=False, batch_size=4), seed=2).epoch(0))
    assert all(not torch.equal(e0[i], other[i]) for i in e0)



class Batched(Augmenting):
    """A dataset with its own ``__getitems__``: one draw shared by the whole batch."""

    def __getitems__(self, indices):
        shared = torch.rand(3)
        return [(torch.tensor(i), shared) for i in indices]


def test_a_datasets_getitems_is_used_in_the_main_process_and_bypassed_in_workers():
    seeded()
    expected = list(DataLoader(Batched(), batch_size=4, shuffle=True))
    seeded()
    got = list(positioned(DataLoader(Batched(), batch_size=4, shuffle=True), seed=1).epoch(0))
    assert all(same(b, e) for (b, _), e in zip(got, expected, strict=True))
    runs = []
    for n in (2, 3):
        seeded()
        loader = DataLoader(Batched(), batch_size=4, shuffle=True, num_workers=n, timeout=WAIT)
        runs.append(list(positioned(loader, seed=1).epoch(0)))
    assert all(same(a, b) for a, b in zip(*runs, strict=True))
    assert len({float(d[0]) for d in by_index(runs[0]).values()}) == 12  # a draw per sample, not per batch
