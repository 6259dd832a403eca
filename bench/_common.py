"""Shared set-up of the NNx benchmarks: the job, its data and loaders, the plain PyTorch loop.

The job (issue 7): a small MLP (32 inputs, 64 hidden, 2 classes), Adam, validation accuracy every
epoch, one thread. ``Job`` builds the data once; ``loaders`` builds fresh, identically seeded
loaders for each arm, and ``initial_state`` is the one initialisation both arms start from.
"""

from __future__ import annotations

import copy
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

INPUTS, CLASSES = 32, 2


def setup_threads() -> None:
    """One intra-op and one inter-op thread (the measurements are about Python overhead)."""
    torch.set_num_threads(1)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # already set in this process
        pass


def machine() -> str:
    """One line describing where the numbers come from."""
    return (
        f"{os.cpu_count()} cores, Python {platform.python_version()}, torch {torch.__version__}, "
        f"threads={torch.get_num_threads()}, {platform.machine()} {platform.system()}"
    )


def mlp(hidden: Sequence[int]) -> nn.Sequential:
    """The same layer stack NNx's built-in feed-forward net builds (Linear → ReLU ..., Linear)."""
    dims = [INPUTS, *hidden, CLASSES]
    layers: list[nn.Module] = []
    for i in range(len(dims) - 2):
        layers += [nn.Linear(dims[i], dims[i + 1]), nn.ReLU()]
    layers.append(nn.Linear(dims[-2], dims[-1]))
    return nn.Sequential(*layers)


def n_params(net: nn.Module) -> int:
    return sum(p.numel() for p in net.parameters())


class Job:
    """Data for one benchmark row: ``batches`` training batches of ``batch`` rows per epoch and a
    validation set a quarter that size, from a fixed random linear-ish problem."""

    def __init__(self, *, batch: int, hidden: Sequence[int] = (64,), batches: int = 64, seed: int = 0) -> None:
        self.batch, self.hidden, self.batches = batch, tuple(hidden), batches
        gen = torch.Generator().manual_seed(seed)
        n_train, n_val = batch * batches, max(batch, batch * batches // 4)
        x = torch.randn(n_train + n_val, INPUTS, generator=gen)
        w = torch.randn(INPUTS, generator=gen)
        y = ((x @ w + 0.5 * torch.randn(n_train + n_val, generator=gen)) > 0).long()
        self.train = TensorDataset(x[:n_train], y[:n_train])
        self.val = TensorDataset(x[n_train:], y[n_train:])
        torch.manual_seed(seed)
        self.initial_state = copy.deepcopy(mlp(self.hidden).state_dict())

    @property
    def rows(self) -> int:
        return len(self.train)

    def loaders(self, seed: int = 0) -> tuple[DataLoader, DataLoader]:
        """Fresh train (shuffled by its own seeded generator) and validation loaders."""
        shuffle = torch.Generator().manual_seed(seed)
        train = DataLoader(self.train, batch_size=self.batch, shuffle=True, generator=shuffle)
        val = DataLoader(self.val, batch_size=self.batch)
        return train, val

    def net(self) -> nn.Sequential:
        """A fresh net holding the shared initial weights."""
        net = mlp(self.hidden)
        net.load_state_dict(self.initial_state)
        return net


def plain_loop(
    job: Job, epochs: int, path: str, *, fsync: bool = True, lr: float = 1e-2, seed: int = 0
) -> dict[str, Any]:
    """The plain PyTorch loop NNx is measured against: train, validation accuracy, then a
    ``torch.save`` of model + optimizer state to ``path`` every epoch (fsynced when ``fsync``).
    Returns the wall time and the last epoch's validation accuracy."""
    train_loader, val_loader = job.loaders(seed)
    net = job.net()
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    loss_fn = nn.CrossEntropyLoss()
    start = time.perf_counter()
    for epoch in range(epochs):
        net.train()
        for x, y in train_loader:
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(net(x), y)
            loss.backward()
            opt.step()
        net.eval()
        correct = total = 0
        with torch.inference_mode():
            for x, y in val_loader:
                correct += int((net(x).argmax(-1) == y).sum())
                total += len(y)
        accuracy = correct / total
        with open(path, "wb") as f:
            torch.save({"epoch": epoch, "model": net.state_dict(), "optimizer": opt.state_dict()}, f)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
    return {"seconds": time.perf_counter() - start, "val_accuracy": accuracy}


def interleave(arms: dict[str, Callable[[int], float]], repeats: int, *, warmup: int = 1) -> dict[str, list[float]]:
    """Run every arm once per repetition, rotating the order, and collect each arm's seconds.
    ``warmup`` untimed rounds come first."""
    names = list(arms)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for rep in range(-warmup, repeats):
        order = names[rep % len(names):] + names[: rep % len(names)] if rep >= 0 else names
        for name in order:
            seconds = arms[name](rep)
            if rep >= 0:
                samples[name].append(seconds)
    return samples


def median(samples: Sequence[float]) -> float:
    return statistics.median(samples)


def spread(samples: Sequence[float]) -> str:
    """``min–max`` as a short string, for the tables."""
    return f"{min(samples) * 1e3:.1f}–{max(samples) * 1e3:.1f}"


def note(*lines: str) -> None:
    for line in lines:
        print(line, file=sys.stdout)
