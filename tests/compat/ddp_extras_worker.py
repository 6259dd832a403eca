"""One rank of the 2-rank ``extra_metrics`` check (``test_distributed_compat.py``), and the data,
model and functions it shares with the single-process reference.

Run as ``python ddp_extras_worker.py OUT ROOT`` under torchrun's environment; saves what the rank
saw to ``OUT/rank<r>.pt``."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import TensorDataset

import nnx_api as nnx

ROWS, VAL_ROWS, BATCH, VAL_BATCH, SEED, EPOCHS, IGNORE = 22, 13, 4, 3, 5, 2, -100


def datasets() -> tuple[TensorDataset, TensorDataset]:
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(ROWS, 4, generator=g), torch.randint(0, 3, (ROWS,), generator=g)
    xv, yv = torch.randn(VAL_ROWS, 4, generator=g), torch.randint(0, 3, (VAL_ROWS,), generator=g)
    y[[3, 7, 12]] = IGNORE
    yv[[2, 9]] = IGNORE
    return TensorDataset(x, y), TensorDataset(xv, yv)


def model() -> nnx.NNModel:
    torch.manual_seed(1)
    return nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(6,)),
                       nnx.NNModelParams(task=nnx.TaskSpec.categorical(ignore_index=IGNORE)))


def order(y_true, y_pred) -> float:
    """Order-sensitive and prediction-free: tells every arrangement of the targets apart."""
    return float(np.sum(y_true * np.arange(1, len(y_true) + 1)))


FNS = {"n": lambda t, p: float(len(t)), "order": order, "hits": lambda t, p: float((t == p).sum())}


def params(train_loader, val_loader) -> nnx.NNTrainParams:
    optim = nnx.NNOptimParams(name=nnx.Optims.SGD, max_lr=0.1, momentum=0.0)
    return nnx.NNTrainParams(n_epochs=EPOCHS, optim=optim, train_loader=train_loader, val_loader=val_loader,
                             extra_metrics=FNS)


def main(out: Path, root: Path) -> None:
    pair = nnx.distributed.init_process_group()
    rank, world = pair  # NNx's (rank, world_size)
    train_set, val_set = datasets()
    loaders = nnx.distributed.train_loader(train_set, BATCH, seed=SEED), nnx.distributed.validation_loader(val_set, VAL_BATCH)
    run = model().train(params(*loaders), distributed=nnx.distributed.DDP(), root=root)
    saved = {
        "pair": (rank, world), "info": (pair.rank, pair.world_size, pair.local_rank, pair.backend),
        "train": [idp.train_edp.extra for idp in run.idps], "val": [run.epochs[e].val_edp.extra for e in sorted(run.epochs)],
    }
    torch.save(saved, out / f"rank{rank}.pt")
    nnx.distributed.shutdown()


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
