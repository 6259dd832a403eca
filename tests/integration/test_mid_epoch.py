"""Exact resume from commits inside an epoch, against the uninterrupted run (the oracle: the same
script never interrupted), in Composer's deep-compare pattern: the run is interrupted at every
update of a short run, rerun with ``resume="auto"``, and its final weights, optimizer state,
records and RNG streams are compared with the uninterrupted run's, bit for bit.

The dataset augments in ``__getitem__`` with torch, ``random`` and NumPy randomness; the model
draws dropout. With worker processes each sample's randomness is a function of (seed, epoch,
index), so a resume in the middle of an epoch sees what the uninterrupted run saw; in process
the commit point's RNG streams are put back once the consumed batches are skipped (by index:
the dataset counts what it loads).
"""

from __future__ import annotations

import json
import random
import signal
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset
from torchdata.stateful_dataloader import StatefulDataLoader

from nnx_core.commit import RunFiles
from nnx_core.journal_format import epoch_summary
from nnx_adapters.storage.fs import FileStorage
import nnx_api as nnx
from nnx_api.runs.run import NNRun

pytestmark = pytest.mark.timeout(600)
EPOCHS, ROWS, BATCH = 2, 40, 8  # 5 batches an epoch, 10 updates


class Augmenting(Dataset):
    """Rows plus noise drawn from all three generators; counts the rows it loads (in process)."""

    loads = 0

    def __init__(self) -> None:
        g = torch.Generator().manual_seed(0)
        self.x, self.y = torch.randn(ROWS, 4, generator=g), torch.randint(0, 3, (ROWS,), generator=g)

    def __len__(self) -> int:
        return ROWS

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        Augmenting.loads += 1
        noise = 0.1 * torch.randn(4) + random.random() * 0.01 + float(np.random.rand()) * 0.01
        return self.x[i] + noise, self.y[i]


class CrashAt(nnx.Callback):
    """The process dies right after committed update ``at`` is announced (before any commit of it)."""

    def __init__(self, at: int) -> None:
        self.at = at

    def on_optimizer_update(self, ctx: Any, event: Any) -> None:
        if ctx.update_count == self.at:
            raise RuntimeError(f"crashed at update {self.at}")


def train(root: Path, *, workers: int = 0, persistent: bool = False, every: Any = 1, crash: int | None = None,
          epochs: int = EPOCHS, journal: bool = False, stateful: bool = False) -> dict[str, Any]:
    torch.manual_seed(1)
    module = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 3))
    model = nnx.NNModel(module=module, params=nnx.NNModelParams())
    loader = (StatefulDataLoader if stateful else DataLoader)(  # torchdata's: positioned by its own state_dict()
        Augmenting(), batch_size=BATCH, shuffle=True, num_workers=workers, persistent_workers=persistent,
        timeout=60 if workers else 0)
    params = nnx.NNTrainParams(n_epochs=epochs, seed=3, resume="auto", train_loader=loader, progress=False,
                               commit_every=every, metrics=(nnx.MetricSpec("accuracy"),),
                               optim=nnx.NNOptimParams(name="adam", max_lr=0.01))
    history = nnx.HistoryJournal(retention=3, chunk_size=2) if journal else None  # a window smaller than an epoch
    run = model.train(params, root=root, callbacks=[CrashAt(crash)] if crash is not None else [], history=history)
    return {
        "weights": {k: v.clone() for k, v in model.net.state_dict().items()},
        "records": [r.state() for r in run.committed_records()],
        "rng": torch.get_rng_state(),
        "python": random.getstate(),
        "numpy": np.random.get_state()[1].copy(),
        "run": run,
    }


def same(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a["weights"].keys() == b["weights"].keys()
    for k in a["weights"]:
        assert torch.equal(a["weights"][k], b["weights"][k]), k
    assert a["records"] == b["records"]
    assert torch.equal(a["rng"], b["rng"]) and a["python"] == b["python"] and np.array_equal(a["numpy"], b["numpy"])


def interrupted(root: Path, at: int, **kw: Any) -> dict[str, Any]:
    with pytest.raises(RuntimeError, match="crashed"):
        train(root, crash=at, **kw)
    return train(root, **kw)


@pytest.fixture(scope="module")
def straight(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return train(tmp_path_factory.mktemp("straight"))


def test_commits_inside_the_epoch_change_nothing_of_the_run(straight: dict[str, Any], tmp_path: Path) -> None:
    """commit_every unset and commit_every=1 train the same run (records, weights, streams)."""
    same(train(tmp_path, every=None), straight)


@pytest.mark.parametrize("at", range(1, EPOCHS * ROWS // BATCH))
def test_every_commit_point_resumes_bit_identically(straight: dict[str, Any], tmp_path: Path, at: int) -> None:
    same(interrupted(tmp_path, at), straight)


@pytest.fixture(scope="module")
def straight_journal(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return train(tmp_path_factory.mktemp("straight_journal"), journal=True)


def _journal_files(run: NNRun) -> dict[str, bytes]:
    folder = run.path / "history"
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


@pytest.mark.parametrize("at", [1, 3, 4, 6, 8, 9])
def test_a_journal_run_resumes_from_commit_points_bit_identically(
    straight: dict[str, Any], straight_journal: dict[str, Any], tmp_path: Path, at: int
) -> None:
    """With a HistoryJournal whose window (3 records) is smaller than an epoch (5): the same
    records as the eager history's, and the journal's files byte for byte the uninterrupted run's."""
    resumed = interrupted(tmp_path, at, journal=True)
    same(resumed, straight_journal)
    assert straight_journal["records"] == straight["records"]
    assert _journal_files(resumed["run"]) == _journal_files(straight_journal["run"])
    eager = list(straight["run"].committed_records())  # each epoch's summary row: from all of its records
    rows = [json.loads(line) for line in _journal_files(resumed["run"])["epochs.jsonl"].splitlines()]
    assert rows == [json.loads(json.dumps(epoch_summary([r for r in eager if r.epoch_idx == e]))) for e in range(EPOCHS)]


@pytest.fixture(scope="module")
def straight_stateful(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return train(tmp_path_factory.mktemp("straight_stateful"), stateful=True)


@pytest.mark.parametrize("at", range(1, EPOCHS * ROWS // BATCH))
def test_a_stateful_dataloader_resumes_from_every_commit_point_bit_identically(
    straight_stateful: dict[str, Any], tmp_path: Path, at: int
) -> None:
    """torchdata's StatefulDataLoader: its state_dict() at each commit, handed back at the resume."""
    resumed = interrupted(tmp_path, at, stateful=True)
    same(resumed, straight_stateful)
    assert resumed["run"].id == straight_stateful["run"].id


def test_a_crash_redoes_at_most_commit_every_updates(tmp_path: Path) -> None:
    """commit_every=3 counts from the last commit (epoch 0 ends at update 5): update 8 commits in
    epoch 1 after 3 batches; crashed at update 10, LAST holds update 8 (2 updates to redo)."""
    with pytest.raises(RuntimeError, match="crashed"):
        train(tmp_path, every=3, crash=10)
    last = NNRun.load(_only_run(tmp_path), tmp_path).files().read_tag("last")
    assert last.epoch == 1 and last.meta["update_count"] == 8 and last.meta["position"]["batches"] == 3


def _only_run(root: Path) -> str:
    runs = [p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")]
    assert len(runs) == 1
    return runs[0]


def loads_of_resume(root: Path, crash: int, every: Any, stateful: bool) -> int:
    with pytest.raises(RuntimeError, match="crashed"):
        train(root, crash=crash, every=every, stateful=stateful)
    Augmenting.loads = 0
    train(root, every=every, stateful=stateful)
    return Augmenting.loads


@pytest.mark.parametrize("stateful", [False, True])
def test_skipped_batches_are_never_loaded(tmp_path: Path, stateful: bool) -> None:
    """A resume after 3 batches of epoch 1 loads 3 batches fewer than a resume at its start."""
    at_start = loads_of_resume(tmp_path / "start", crash=7, every=None, stateful=stateful)  # LAST: epoch 0's end
    mid_epoch = loads_of_resume(tmp_path / "mid", crash=9, every=1, stateful=stateful)  # LAST: update 8, epoch 1 batch 3
    assert at_start - mid_epoch == 3 * BATCH


@pytest.mark.parametrize("persistent", [False, True])
def test_workers_resume_mid_epoch_bit_identically(tmp_path: Path, persistent: bool) -> None:
    kw = {"workers": 2, "persistent": persistent, "every": 2}
    straight = train(tmp_path / "straight", **kw)
    same(interrupted(tmp_path / "resumed", 7, **kw), straight)


def test_a_stateful_dataloader_with_workers_is_warned_of_at_a_resume_inside_an_epoch(tmp_path: Path) -> None:
    """Its workers restart at the position with the epoch's first streams: said, naming the loader."""
    with pytest.raises(RuntimeError, match="crashed"):
        train(tmp_path, crash=7, every=1, workers=2, stateful=True)
    with pytest.warns(RuntimeWarning, match=r"StatefulDataLoader\) resumes inside an epoch .* num_workers=0"):
        train(tmp_path, every=1, workers=2, stateful=True)


def test_a_time_budget_commits_at_update_boundaries(tmp_path: Path) -> None:
    """commit_every=timedelta(0 < t): a commit at every update once the time has passed."""
    done = train(tmp_path, every=timedelta(microseconds=1))
    assert done["run"].idps[-1].epoch_idx == EPOCHS - 1


class SignalAt(nnx.Callback):
    """The process receives ``sig`` (a real signal) while committed update ``at`` is announced."""

    def __init__(self, at: int, sig: int = signal.SIGTERM) -> None:
        self.at, self.sig = at, sig

    def on_optimizer_update(self, ctx: Any, event: Any) -> None:
        if ctx.update_count == self.at:
            signal.raise_signal(self.sig)


def preempted(root: Path, at: int, **kw: Any) -> nnx.TrainingPreempted:
    torch.manual_seed(1)
    module = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 3))
    model = nnx.NNModel(module=module, params=nnx.NNModelParams())
    loader = DataLoader(Augmenting(), batch_size=BATCH, shuffle=True, num_workers=kw.get("workers", 0),
                        persistent_workers=kw.get("persistent", False), timeout=60 if kw.get("workers") else 0)
    params = nnx.NNTrainParams(n_epochs=EPOCHS, seed=3, resume="auto", train_loader=loader, progress=False,
                               commit_every=kw.get("every", 1), metrics=(nnx.MetricSpec("accuracy"),),
                               optim=nnx.NNOptimParams(name="adam", max_lr=0.01),
                               preempt_signals=kw.get("signals", (signal.SIGTERM,)))
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(nnx.TrainingPreempted) as caught:
        model.train(params, root=root, callbacks=[SignalAt(at, kw.get("sig", signal.SIGTERM))])
    assert signal.getsignal(signal.SIGTERM) is before  # the previous handler is back
    return caught.value


@pytest.mark.parametrize("at", [3, 5, 7])  # mid-epoch 0, epoch 0's last update, mid-epoch 1
def test_sigterm_commits_at_the_next_update_and_resumes_bit_identically(tmp_path: Path, at: int) -> None:
    """With workers and commit_every unset: the signal's update is committed (nothing redone) and
    the rerun ends as the uninterrupted run."""
    kw = {"workers": 2, "every": None}
    straight = train(tmp_path / "straight", **kw)
    error = preempted(tmp_path / "resumed", at, **kw)
    assert error.committed and error.update == at and error.signal_name == "SIGTERM"
    assert "resume='auto'" in str(error)
    last = RunFiles(FileStorage(tmp_path / "resumed"), error.run_id).read_tag("last")
    assert last.meta["update_count"] == at
    same(train(tmp_path / "resumed", **kw), straight)


def test_a_listed_signal_preempts_and_an_unlisted_one_keeps_its_handler(tmp_path: Path) -> None:
    error = preempted(tmp_path, 2, sig=signal.SIGUSR1, signals=(signal.SIGTERM, signal.SIGUSR1), every=None)
    assert error.signal_name == "SIGUSR1" and error.update == 2


class StopAt(nnx.Callback):
    def __init__(self, at: int) -> None:
        self.at = at

    def on_optimizer_update(self, ctx: Any, event: Any) -> None:
        if ctx.update_count == self.at:
            ctx.stop_at_update = True


@pytest.mark.parametrize(("every", "kept"), [(3, 7), (None, 5)])
def test_stop_at_update_commits_its_update_only_with_commit_every(
    straight: dict[str, Any], tmp_path: Path, every: Any, kept: int
) -> None:
    """With commit_every the stop's update is committed and train() returns the run as NNRun.load
    reads it (the epoch in progress apart, in ``partial``); unset, LAST stays at the last epoch."""
    torch.manual_seed(1)
    module = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 3))
    model = nnx.NNModel(module=module, params=nnx.NNModelParams())
    loader = DataLoader(Augmenting(), batch_size=BATCH, shuffle=True)
    params = nnx.NNTrainParams(n_epochs=EPOCHS, seed=3, resume="auto", train_loader=loader, progress=False,
                               commit_every=every, metrics=(nnx.MetricSpec("accuracy"),),
                               optim=nnx.NNOptimParams(name="adam", max_lr=0.01))
    run = model.train(params, root=tmp_path, callbacks=[StopAt(7)])
    loaded = NNRun.load(run.id, tmp_path)
    assert loaded.idps == run.idps and len(run.idps) == 5
    assert RunFiles(FileStorage(tmp_path), run.id).read_tag("last").meta["update_count"] == kept
    if every is not None:
        assert run.partial is not None and run.partial.epoch == 1 and len(run.partial.records) == 2
        assert loaded.partial == run.partial
        same(train(tmp_path, every=every), straight)  # and the rerun continues from the stop's update


class SignalAtEnd(nnx.Callback):
    def on_train_end(self, ctx: Any) -> None:
        signal.raise_signal(signal.SIGUSR1)


def test_a_signal_after_the_last_commit_point_reaches_the_previous_handler(tmp_path: Path) -> None:
    """A listed signal that arrives after the last update boundary (on_train_end, the final
    refresh) is not lost: once train() has finished, the handler that was there answers it."""
    seen: list[int] = []
    previous = signal.signal(signal.SIGUSR1, lambda sig, frame: seen.append(sig))
    try:
        model = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(8,)), nnx.NNModelParams())
        params = nnx.NNTrainParams(n_epochs=1, train_loader=DataLoader(Augmenting(), batch_size=BATCH), progress=False,
                                   preempt_signals=(signal.SIGUSR1,))
        run = model.train(params, root=tmp_path, callbacks=[SignalAtEnd()])
        assert seen == [signal.SIGUSR1] and len(run.idps) == ROWS // BATCH
    finally:
        signal.signal(signal.SIGUSR1, previous)
