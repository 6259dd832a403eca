"""Shared set-up of the NNx benchmarks: the job, its data, loaders and initial weights.

The job (issue 7): a small MLP (32 inputs, 64 hidden, 2 classes), Adam, validation accuracy every
epoch, one thread. ``Job`` builds the data once; ``loaders`` builds fresh, identically seeded
loaders for each arm, and ``initial_state`` is the one initialisation every arm starts from.
Not a benchmark itself: ``make bench`` runs it as a script, which does nothing.
"""

from __future__ import annotations

import copy
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from sklearn.datasets import load_digits
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


def fsync_latency(folder: str | None = None, samples: int = 30) -> str:
    """Median latency of fsyncing a fresh 20 kB file and its folder, as a short string."""
    files, folders = [], []
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        fd = os.open(tmp, os.O_RDONLY)
        try:
            for i in range(samples):
                with open(os.path.join(tmp, f"f{i}"), "wb") as f:
                    f.write(b"x" * 20_000)
                    f.flush()
                    start = time.perf_counter()
                    os.fsync(f.fileno())
                    files.append(time.perf_counter() - start)
                start = time.perf_counter()
                os.fsync(fd)
                folders.append(time.perf_counter() - start)
        finally:
            os.close(fd)
    return f"file {statistics.median(files) * 1e3:.2f} ms, folder {statistics.median(folders) * 1e3:.2f} ms"


def atomic_durable_save(obj: Any, path: str) -> None:
    """The honest minimum of a crash-safe checkpoint: ``torch.save`` into a temporary beside
    ``path``, fsync it, rename it onto ``path``, fsync the folder (the baseline of issue 18)."""
    tmp = f"{path}.tmp"
    with open(tmp, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def plain_epoch(net: nn.Module, opt: torch.optim.Optimizer, loss_fn: nn.Module, train_loader: Any, val_loader: Any) -> float:
    """One epoch of the plain PyTorch loop every bench compares against: train, then the
    validation accuracy (read to the host, as a user's loop prints it)."""
    plain_train(net, opt, loss_fn, train_loader)
    return plain_accuracy(net, val_loader)


def plain_train(net: nn.Module, opt: torch.optim.Optimizer, loss_fn: nn.Module, train_loader: Any) -> None:
    """The plain loop's training batches."""
    net.train()
    for x, y in train_loader:
        opt.zero_grad(set_to_none=True)
        loss_fn(net(x), y).backward()
        opt.step()


def plain_accuracy(net: nn.Module, val_loader: Any) -> float:
    """The plain loop's validation accuracy."""
    net.eval()
    correct = total = 0
    with torch.inference_mode():
        for x, y in val_loader:
            correct += int((net(x).argmax(-1) == y).sum())
            total += len(y)
    return correct / total


def mlp(hidden: Sequence[int]) -> nn.Sequential:
    """The same layer stack NNx's built-in feed-forward net builds (Linear → ReLU ..., Linear)."""
    dims = [INPUTS, *hidden, CLASSES]
    layers: list[nn.Module] = []
    for i in range(len(dims) - 2):
        layers += [nn.Linear(dims[i], dims[i + 1]), nn.ReLU()]
    layers.append(nn.Linear(dims[-2], dims[-1]))
    return nn.Sequential(*layers)


def interleaved(arms: Mapping[str, Callable[[], dict[str, float]]], reps: int) -> dict[str, dict[str, list[float]]]:
    """Run every arm once per repetition, the order rotating each time, after one untimed
    warm-up round; each arm's samples by key, in repetition order (so arms pair up by index)."""
    samples: dict[str, dict[str, list[float]]] = {name: {} for name in arms}
    names = list(arms)
    for rep in range(-1, reps):
        shift = rep % len(names) if rep >= 0 else 0
        for name in names[shift:] + names[:shift]:
            sample = arms[name]()
            if rep >= 0:
                for key, value in sample.items():
                    samples[name].setdefault(key, []).append(value)
    return samples


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

    def nnx_job(self, epochs: int) -> tuple[Any, Any]:
        """The NNx arm: an ``NNModel`` holding the shared initial weights and its train params
        (Adam 1e-2, fresh loaders, progress off)."""
        import nnx_api as nnx

        train_loader, val_loader = self.loaders(0)
        model = nnx.NNModel(
            nnx.NNParams(input_dim=INPUTS, output_dim=CLASSES, hidden_dims=self.hidden),
            nnx.NNModelParams(loss=nnx.Losses.CROSS_ENTROPY),
        )
        model.net.load_state_dict(self.initial_state)
        params = nnx.NNTrainParams(
            n_epochs=epochs,
            optim=nnx.NNOptimParams(name=nnx.Optims.ADAM, max_lr=1e-2),
            train_loader=train_loader,
            val_loader=val_loader,
            progress=False,
        )
        return model, params

    def net(self) -> nn.Sequential:
        """A fresh net holding the shared initial weights."""
        net = mlp(self.hidden)
        net.load_state_dict(self.initial_state)
        return net


class DigitsCNN(nn.Module):
    """Conv 1→16 → ReLU → Conv 16→32 → ReLU → 2×2 max-pool → Linear 512 → 10, on 8×8 digits."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2)
        )
        self.head = nn.Linear(32 * 4 * 4, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).flatten(1))


class DigitsJob(Job):
    """scikit-learn's bundled digits (80/20 split, pixels scaled to [0, 1], images 1×8×8) and one
    initialisation of ``DigitsCNN``; ``loaders`` and ``rows`` as ``Job``'s."""

    def __init__(self, *, batch: int, seed: int = 0) -> None:
        x, y = load_digits(return_X_y=True)
        x = torch.tensor(x / 16.0, dtype=torch.float32).reshape(-1, 1, 8, 8)
        y = torch.tensor(y, dtype=torch.long)
        order = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))
        cut = int(0.8 * len(x))
        self.batch, self.hidden = batch, ()
        self.train = TensorDataset(x[order[:cut]], y[order[:cut]])
        self.val = TensorDataset(x[order[cut:]], y[order[cut:]])
        torch.manual_seed(seed)
        self.initial_state = copy.deepcopy(DigitsCNN().state_dict())

    def net(self) -> nn.Module:
        net = DigitsCNN()
        net.load_state_dict(self.initial_state)
        return net
