"""Data-parallel training on torchrun: scikit-learn's digits on two CPU ranks (gloo).

    torchrun --standalone --nproc_per_node=2 examples/ddp_supervised.py [--root runs] [--epochs 10]

Every rank runs this same script. The writer (rank 0) holds the run and writes it; every rank
returns the same NNRun, and each committed update equals one process training on the union of
the ranks' batches. Run without torchrun, it trains in one process (a group of one).
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
from torch.utils.data import TensorDataset

import nnx_api as nnx


def digits(seed: int = 0) -> tuple[TensorDataset, TensorDataset]:
    """Train/validation datasets over the digits set (80/20 split, inputs scaled to [0, 1])."""
    from sklearn.datasets import load_digits

    return split(*load_digits(return_X_y=True), seed=seed)


def split(x: object, y: object, seed: int = 0) -> tuple[TensorDataset, TensorDataset]:
    """``digits``' split of arrays ``x`` (pixel values 0-16) and ``y`` (labels)."""
    x = torch.tensor(x / 16.0, dtype=torch.float32)
    y = torch.tensor(y, dtype=torch.long)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))
    cut = int(0.8 * len(x))
    return TensorDataset(x[order[:cut]], y[order[:cut]]), TensorDataset(x[order[cut:]], y[order[cut:]])


def main(argv: list[str] | None = None) -> nnx.NNRun:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=None, help="runs root (default ./runs)")
    parser.add_argument("--epochs", type=int, default=10)
    args = parser.parse_args(argv)

    if "RANK" not in os.environ:  # plain `python examples/ddp_supervised.py`: a group of one
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT="29533")
    group = nnx.distributed.init_process_group()  # gloo on CPU, nccl with one GPU per rank
    train_set, val_set = digits()
    nnx.set_seed(0)  # the same initial weights on every rank (DDP also copies rank 0's at the start)
    model = nnx.NNModel(
        nnx.NNParams(input_dim=64, output_dim=10, hidden_dims=(128, 64)),
        nnx.NNModelParams(loss=nnx.Losses.CROSS_ENTROPY),
    )
    params = nnx.NNTrainParams(
        n_epochs=args.epochs,
        optim=nnx.NNOptimParams(name=nnx.Optims.ADAM, max_lr=3e-3),
        seed=0,
        # each rank takes its share of every epoch's permutation (padded to equal steps)
        train_loader=nnx.distributed.train_loader(train_set, batch_size=32, policy="pad", seed=0),
        # each validation row is scored exactly once, on one rank
        val_loader=nnx.distributed.validation_loader(val_set, batch_size=256),
        monitor=nnx.MonitorSpec(metric="accuracy", split="val"),
        resume="auto",
        progress=False,
    )
    callbacks = [nnx.EarlyStopping(patience=5)]  # distributed = "all": the same decision on every rank
    run = model.train(params, callbacks=callbacks, root=args.root, distributed=nnx.distributed.DDP())
    last = run.idps[-1]
    line = f"rank {group.rank} {run.id} records={len(run.idps)} val_accuracy={last.val_edp.accuracy:.6f}\n"
    sys.stdout.write(line)  # one write: the ranks share torchrun's stdout
    sys.stdout.flush()
    # an error above propagates without this: every rank raised the same error, torchrun reports it
    nnx.distributed.shutdown(timeout_seconds=60)
    return run

if __name__ == "__main__":
    main()
