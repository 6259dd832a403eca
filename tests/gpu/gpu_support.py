"""What the GPU tests share: the skip rule, small seeded jobs, and a float32 error bound.

Every test module under ``tests/gpu`` sets ``pytestmark = GPU``: marked ``gpu`` (``make test-gpu``
selects them) and skipped with the one reason ``REASON`` where torch sees no CUDA device. The
jobs use only the public API (``import nnx_api as nnx``) and loaders of CPU tensors (NNx moves
every batch to the model's device).
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import nnx_api as nnx

CUDA = torch.cuda.is_available()
REASON = "needs CUDA: no GPU on this machine"
GPU = [pytest.mark.gpu, pytest.mark.skipif(not CUDA, reason=REASON)]
DEVICE = torch.device("cuda")


def data(n: int = 96, d: int = 16, classes: int = 4, seed: int = 1234) -> tuple[torch.Tensor, torch.Tensor]:
    """A small deterministic classification set (CPU tensors)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    y = torch.randint(0, classes, (n,), generator=g)
    return x, y


def mlp_job(n_epochs: int, *, device: nnx.Devices = nnx.Devices.CUDA, precision: Any = None,
            dropout: float = 0.2, **train_kw: Any) -> tuple[nnx.NNModel, nnx.NNTrainParams]:
    """Seed, the built-in MLP (dropout draws from the device's RNG), a shuffling loader with its own
    seeded generator, a validation loader — built the same way every time it is called."""
    x, y = data()
    nnx.set_seed(0)
    model = nnx.NNModel(
        nnx.NNParams(input_dim=x.shape[1], output_dim=4, hidden_dims=(32,), dropout_prob=dropout),
        nnx.NNModelParams(device=device, precision=precision),
    )
    train_loader = DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True, generator=torch.Generator().manual_seed(7))
    val_loader = DataLoader(TensorDataset(x[:48], y[:48]), batch_size=24)
    params = nnx.NNTrainParams(
        n_epochs=n_epochs, seed=0, train_loader=train_loader, val_loader=val_loader, progress=False, **train_kw
    )
    return model, params


class CrashAtEpoch(nnx.Callback):
    """Raises at the start of epoch ``epoch``: the epochs before it are committed, it is not."""

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch

    def on_epoch_begin(self, ctx: Any) -> None:
        if ctx.epoch == self.epoch:
            raise RuntimeError(f"simulated crash at the start of epoch {self.epoch}")


def as_new_process() -> None:
    """Move every RNG stream away from where the crashed run left it, as a new process would be."""
    torch.manual_seed(12345)
    torch.cuda.manual_seed_all(12345)
    torch.randn(1000, device=DEVICE)


def same_state(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    """Bit-identical state dicts (same keys, ``torch.equal`` on the CPU)."""
    return a.keys() == b.keys() and all(torch.equal(a[k].cpu(), b[k].cpu()) for k in a)


class GradGain(torch.autograd.Function):
    """Identity forward; the backward multiplies the incoming gradient by ``gain`` in the
    gradient's own dtype. A gain of 1e30 is finite in float32 but overflows float16 to inf."""

    @staticmethod
    def forward(ctx: Any, y: torch.Tensor, gain: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(gain)
        return y.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        (gain,) = ctx.saved_tensors
        return grad * gain.to(grad.dtype), None


POISON = 1e30  # the gain of a batch whose fp16 gradients overflow


class GainNet(nn.Module):
    """An MLP over ``x[:, 1:]`` whose gradient is multiplied by the batch's first column (1 for an
    ordinary batch, ``POISON`` for one whose fp16 backward overflows). It keeps a copy of its
    parameters at every training forward, so a test can see whether an update changed them."""

    def __init__(self, d: int = 8, classes: int = 3) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(d, 16), nn.ReLU(), nn.Linear(16, classes))
        self.seen: list[torch.Tensor] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            self.seen.append(torch.cat([p.detach().flatten() for p in self.body.parameters()]).clone())
        return GradGain.apply(self.body(x[:, 1:]), x[:, :1])


def gain_batches(poisoned: int, *, batches: int = 6, rows: int = 8, d: int = 8, classes: int = 3,
                 drop: bool = False) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Fixed batches (the same order every epoch); batch ``poisoned`` overflows in fp16, or is left
    out with ``drop=True`` (the reference run without it)."""
    g = torch.Generator().manual_seed(99)
    out = []
    for i in range(batches):
        x = torch.randn(rows, d + 1, generator=g)
        x[:, 0] = POISON if i == poisoned else 1.0
        y = torch.randint(0, classes, (rows,), generator=g)
        if not (drop and i == poisoned):
            out.append((x, y))
    return out


def gain_model(precision: str, seed: int = 0) -> nnx.NNModel:
    """A ``GainNet`` on CUDA under ``precision``, initialised from ``seed``."""
    torch.manual_seed(seed)
    params = nnx.NNModelParams(device=nnx.Devices.CUDA, precision=nnx.PrecisionPolicy(mode=precision),
                               task=nnx.TaskSpec.categorical(3))
    return nnx.NNModel(module=GainNet(), params=params)


# ------------------------------------------------------------------------ float32 error bound
def gamma(n: int, dtype: torch.dtype = torch.float32) -> float:
    """Higham's γ_n = n·u / (1 − n·u), u the unit roundoff (eps / 2): the relative error bound of a
    sum or dot product of n terms, in any order of summation, with or without FMA."""
    u = torch.finfo(dtype).eps / 2
    return n * u / (1 - n * u)


def mlp_logits_and_bound(net: nn.Sequential, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact logits (float64) of a Linear/ReLU stack and a bound on |float32 result − exact|.

    Layer by layer: a Linear of fan-in K rounds with at most γ_{K+1}·(|W|·|h| + |b|) and carries
    its input's error through |W|; ReLU is 1-Lipschitz; dropout is the identity in eval mode.
    """
    h = x.double()
    err = torch.zeros_like(h)
    for layer in net:
        if isinstance(layer, nn.Linear):
            w, b = layer.weight.detach().double().cpu(), layer.bias.detach().double().cpu()
            err = err @ w.abs().T + gamma(w.shape[1] + 1) * (h.abs() @ w.abs().T + b.abs())
            h = h @ w.T + b
        elif isinstance(layer, nn.ReLU):
            h = h.clamp_min(0)
        elif not isinstance(layer, nn.Dropout):
            raise TypeError(f"no error bound for {type(layer).__name__}")
    return h, err


def probability_tolerance(net: nn.Sequential, x: torch.Tensor) -> float:
    """How far the softmax probabilities of two float32 evaluations (CPU, CUDA) may be apart.

    Each side's logits are within the bound of ``mlp_logits_and_bound`` of the exact ones, and
    its softmax rounds ``z − max z`` (error ≤ u·|z − max z|). Softmax moves every probability by
    at most half the largest change of its input (its Jacobian diag(p) − ppᵀ has ∞-norm ≤ 1/2).
    Then each side's exp (≤ 2 ulp on CUDA), C-term sum and division add ≤ (C + 5)·u relative to
    a probability ≤ 1.
    """
    exact, err = mlp_logits_and_bound(net, x)
    u = torch.finfo(torch.float32).eps / 2
    shift = u * (exact.max(dim=-1, keepdim=True).values - exact).abs()
    per_side = 0.5 * (err + shift).max() + (exact.shape[-1] + 5) * u
    return float(2 * per_side)


def finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)
