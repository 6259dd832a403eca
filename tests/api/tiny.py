"""Tiny deterministic training jobs for the API tests: data, batches, a two-part module (for
Trainers with one optimizer per part), and how far two float32 evaluations of one SGD update
over the same rows may be apart; a callback noting the learning rate each committed update used."""

from __future__ import annotations

import copy

import torch
from torch import nn

import nnx_api as nnx

from tests.numerics import across_orders


def tiny_data(n: int = 48, d: int = 4, classes: int = 3, seed: int = 0):
    """A small deterministic classification set."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    y = torch.randint(0, classes, (n,), generator=g)
    return x, y


def batches(x, y, size):
    """A list of (x, y) batches (a re-iterable loader)."""
    return [(x[i : i + size], y[i : i + size]) for i in range(0, len(x), size)]


class TwoPart(nn.Module):
    """An encoder and a head: parameter names ``encoder.*`` and ``head.*``."""

    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(4, 8), nn.Tanh())
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        return self.head(self.encoder(x))


def committed_run(root, n_epochs: int = 2) -> str:
    """The id of a committed run of the tiny MLP on ``tiny_data`` (seeded), trained into ``root``."""
    x, y = tiny_data()
    nnx.set_seed(0)
    model = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(8,)), nnx.NNModelParams())
    params = nnx.NNTrainParams(n_epochs=n_epochs, seed=0, train_loader=batches(x, y, 16), val_loader=batches(x, y, 24),
                               progress=False)
    return model.train(params, root=root).id


def two_part_model(seed: int = 0, ignore_index: int | None = None) -> nnx.NNModel:
    """An NNModel over a seeded ``TwoPart``."""
    torch.manual_seed(seed)
    task = nnx.TaskSpec.categorical(ignore_index=ignore_index) if ignore_index is not None else None
    return nnx.NNModel(module=TwoPart(), params=nnx.NNModelParams(task=task))


class UsedLR(nnx.Callback):
    """The LR each committed update used (on_optimizer_update runs before update-clock ticks)."""

    def __init__(self) -> None:
        self.used: list[float] = []

    def on_optimizer_update(self, ctx, event) -> None:
        self.used.append(ctx.optimizer.param_groups[0]["lr"])


def sgd_step_tolerance(net: torch.nn.Module, share, x, lr: float) -> float:
    """The largest difference rounding allows between two float32 evaluations of one plain SGD
    step ``w - lr * Σ_i ∇c_i`` over the rows of ``x`` that differ only in batching (so in the
    order of their sums): ``across_orders(k, lr * Σ_i |∇c_i|)``, with ``k`` the rows plus the
    longest chain of a forward and a backward pass (the layer widths, twice).

    ``share(net, i)`` is row ``i``'s share ``c_i`` of the window's loss (its term over the
    window's count); the per-row gradients are taken in float64 on a copy of ``net`` (the
    weights before the step).
    """
    probe = copy.deepcopy(net).double()
    total = [torch.zeros_like(p) for p in probe.parameters()]
    for i in range(len(x)):
        probe.zero_grad()
        share(probe, i).backward()
        for acc, p in zip(total, probe.parameters(), strict=True):
            acc += p.grad.abs()
    widths = sum(p.shape[0] + p.shape[1] for p in probe.parameters() if p.dim() == 2)
    return across_orders(len(x) + 2 * widths, lr * max(float(t.max()) for t in total))
