"""An autoencoder trained with a custom ``train_step_fn`` (the batch's target is its input).

    python examples/autoencoder_step.py [--root runs] [--epochs 15]

A custom step owns its forward, loss, backward and ``optimizer.step()``; after each real step it
calls ``ctx.report_update()`` once, so update-clock schedules and ``on_optimizer_update``
callbacks see it (here a cosine schedule on the ``optimizer_update`` clock). Validation uses the
built-in path: batches are ``(x, x)`` and the model's task is regression (MSE).
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch import nn

import nnx_api as nnx


class AutoEncoder(nn.Module):
    """64 → 16 → 64 (digits images, pixels in [0, 1])."""

    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 16))
        self.decoder = nn.Sequential(nn.ReLU(), nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.encoder(x))


def reconstruction_step(ctx: nnx.TrainStepContext) -> nnx.EvaluationDataPoint:
    """Zero grads → forward → MSE → backward → step → report the update."""
    x, _ = ctx.batch
    ctx.optimizer.zero_grad()
    loss = F.mse_loss(ctx.model.net(x), x)
    if not torch.isfinite(loss):
        raise FloatingPointError("reconstruction loss is not finite")
    loss.backward()
    ctx.optimizer.step()
    ctx.report_update()  # exactly once per real optimizer step
    return nnx.EvaluationDataPoint(loss=float(loss.detach()))


def loaders(batch_size: int = 64) -> tuple[list, list]:
    x, _ = load_digits(return_X_y=True)
    x = torch.tensor(x / 16.0, dtype=torch.float32)
    train, val = x[:1400], x[1400:]
    return [(b, b) for b in train.split(batch_size)], [(val, val)]


def main(argv: list[str] | None = None) -> nnx.NNRun:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=None, help="runs root (default ./runs)")
    parser.add_argument("--epochs", type=int, default=15)
    args = parser.parse_args(argv)
    nnx.set_seed(0)
    model = nnx.NNModel(module=AutoEncoder(), params=nnx.NNModelParams(loss=nnx.Losses.MEAN_SQUARED_ERROR))
    train_loader, val_loader = loaders()
    params = nnx.NNTrainParams(
        n_epochs=args.epochs,
        optim=nnx.NNOptimParams(name=nnx.Optims.ADAM, max_lr=3e-3),
        scheduler=nnx.NNSchedulerParams(kind=nnx.Schedulers.COSINE_ANNEALING, clock="optimizer_update"),
        seed=0,
        train_loader=train_loader,
        val_loader=val_loader,
        resume="auto",
    )
    run = model.train(params, train_step_fn=reconstruction_step, root=args.root)
    first, last = run.epochs[0], run.idps[-1]
    print(f"validation MSE {first.val_edp.loss:.4f} (epoch 0) -> {last.val_edp.loss:.4f}; "
          f"{run.checkpoint('last').payload()['update_count']} committed updates")  # records count objective runs only
    print(f"run folder: {run.path}")
    return run


if __name__ == "__main__":
    main()
