"""Quickstart: train an MLP on scikit-learn's bundled digits (8x8 images, 10 classes, no download).

    python examples/quickstart.py [--root runs] [--epochs 30]

Prints the validation accuracy (best and last epoch), where the run lives and what to try next.
"""

from __future__ import annotations

import argparse

import torch
from sklearn.datasets import load_digits
from torch.utils.data import DataLoader, TensorDataset

import nnx_api as nnx


def digits_loaders(seed: int = 0, batch_size: int = 64) -> tuple[DataLoader, DataLoader]:
    """Train/validation loaders over the digits set (80/20 split, inputs scaled to [0, 1])."""
    x, y = load_digits(return_X_y=True)
    x = torch.tensor(x / 16.0, dtype=torch.float32)
    y = torch.tensor(y, dtype=torch.long)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))
    cut = int(0.8 * len(x))
    train, val = order[:cut], order[cut:]
    shuffle = torch.Generator().manual_seed(seed)
    train_loader = DataLoader(TensorDataset(x[train], y[train]), batch_size=batch_size, shuffle=True, generator=shuffle)
    val_loader = DataLoader(TensorDataset(x[val], y[val]), batch_size=512)
    return train_loader, val_loader


def main(argv: list[str] | None = None) -> nnx.NNRun:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=None, help="runs root (default ./runs)")
    parser.add_argument("--epochs", type=int, default=30)
    args = parser.parse_args(argv)

    nnx.set_seed(0)  # same initial weights every time: the run id then names one experiment
    train_loader, val_loader = digits_loaders()
    model = nnx.NNModel(
        nnx.NNParams(input_dim=64, output_dim=10, hidden_dims=(128, 64), dropout_prob=0.1),
        nnx.NNModelParams(loss=nnx.Losses.CROSS_ENTROPY),
    )
    params = nnx.NNTrainParams(
        n_epochs=args.epochs,
        optim=nnx.NNOptimParams(name=nnx.Optims.ADAM, max_lr=3e-3),
        seed=0,
        train_loader=train_loader,
        val_loader=val_loader,
        resume="auto",  # rerunning continues (or returns) this configuration's run
    )
    run = model.train(params, root=args.root)
    best, last = run.best(), run.idps[-1]
    print(f"\nTrained an MLP on scikit-learn's digits for {last.epoch_idx + 1} epochs "
          f"({len(train_loader.dataset)} training images, {len(val_loader.dataset)} for validation).")
    kept = ("the last epoch is also the best one" if best.epoch_idx == last.epoch_idx else
            f"{best.val_edp.accuracy:.1%} at epoch {best.epoch_idx} (numbered from 0), the best one")
    print(f"  validation accuracy: {last.val_edp.accuracy:.1%} after the last epoch; {kept} "
          "(its weights are the run's 'best' checkpoint)")
    print(f"  the run: {run.path}")
    print(f"Next: nnx runs list · nnx runs show {run.id[:8]} · nnx runs plot {run.id[:8]}")
    print("Rerunning this script returns the finished run (resume='auto'); docs/getting-started.md goes on from here.")
    return run


if __name__ == "__main__":
    main()
