"""A resume with loader worker processes, against the uninterrupted run (the oracle: the same
script never interrupted).

The dataset augments in ``__getitem__`` with torch, ``random`` and NumPy randomness, read by a
shuffling ``DataLoader`` with two worker processes. A run interrupted after epoch 1 and rerun with
``resume="auto"`` ends bit-identical to the uninterrupted run, and says nothing about workers:
NNx seeds each sample in its worker from (seed, epoch, index).
With ``persistent_workers=True`` too: NNx seeds each sample in its worker from (seed, epoch,
index). A validation loader is iterated as it is, so its persistent workers are still said to
break exactness.
"""

from __future__ import annotations

import random
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

import nnx_api as nnx

pytestmark = pytest.mark.timeout(240)
EPOCHS, STOP = 3, 2


class Augmenting(Dataset):
    """Rows plus noise drawn from all three generators in the worker that reads them."""

    def __init__(self) -> None:
        g = torch.Generator().manual_seed(0)
        self.x, self.y = torch.randn(48, 4, generator=g), torch.randint(0, 3, (48,), generator=g)

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        noise = 0.1 * torch.randn(4) + random.random() * 0.01 + float(np.random.rand()) * 0.01
        return self.x[i] + noise, self.y[i]


class StopAt(nnx.Callback):
    """The process is interrupted as epoch ``epoch`` begins (the epochs before it are committed)."""

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch

    def on_epoch_begin(self, ctx: Any) -> None:
        if ctx.epoch == self.epoch:
            raise RuntimeError(f"interrupted at epoch {self.epoch}")


def train(root: Path, persistent: bool, stop: int | None = None) -> dict[str, torch.Tensor]:
    torch.manual_seed(1)
    model = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(8,)), nnx.NNModelParams())
    loader = DataLoader(Augmenting(), batch_size=8, shuffle=True, num_workers=2, persistent_workers=persistent,
                        generator=torch.Generator().manual_seed(7))
    params = nnx.NNTrainParams(n_epochs=EPOCHS, seed=3, resume="auto", train_loader=loader, progress=False,
                               optim=nnx.NNOptimParams(name="sgd", max_lr=0.1))
    model.train(params, root=root, callbacks=[StopAt(stop)] if stop is not None else [])
    return {k: v.clone() for k, v in model.net.state_dict().items()}


def resumed(root: Path, persistent: bool) -> tuple[dict[str, torch.Tensor], list[str]]:
    with pytest.raises(RuntimeError, match="interrupted"):
        train(root, persistent, stop=STOP)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        weights = train(root, persistent)
    return weights, [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]


def test_workers_resume_bit_identically_and_quietly(tmp_path: Path) -> None:
    straight = train(tmp_path / "straight", persistent=False)
    weights, said = resumed(tmp_path / "resumed", persistent=False)
    assert weights.keys() == straight.keys() and all(torch.equal(weights[k], straight[k]) for k in weights)
    assert [m for m in said if "worker" in m] == []


def test_persistent_workers_resume_bit_identically_and_quietly(tmp_path: Path) -> None:
    """Each sample's randomness is seeded in the worker from (seed, epoch, index): new workers after
    a resume draw what the persistent ones would have."""
    straight = train(tmp_path / "straight", persistent=True)
    weights, said = resumed(tmp_path / "resumed", persistent=True)
    assert all(torch.equal(weights[k], straight[k]) for k in weights)
    assert [m for m in said if "worker" in m] == []


def test_a_validation_loader_with_persistent_workers_is_said_to_break_exactness(tmp_path: Path) -> None:
    """NNx positions the train loader only: a validation loader's persistent workers keep their
    streams, and a resume says so (its augmentations, if any, differ from here on)."""
    def run(stop: int | None) -> None:
        torch.manual_seed(1)
        model = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(8,)), nnx.NNModelParams())
        val = DataLoader(Augmenting(), batch_size=8, num_workers=1, persistent_workers=True)
        params = nnx.NNTrainParams(n_epochs=EPOCHS, seed=3, resume="auto", progress=False, val_loader=val,
                                   train_loader=DataLoader(Augmenting(), batch_size=8),
                                   optim=nnx.NNOptimParams(name="sgd", max_lr=0.1))
        model.train(params, root=tmp_path, callbacks=[StopAt(stop)] if stop is not None else [])

    with pytest.raises(RuntimeError, match="interrupted"):
        run(STOP)
    with pytest.warns(RuntimeWarning, match="^val_loader keeps persistent_workers=True"):
        run(None)
