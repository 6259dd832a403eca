"""A custom ``eval_step_fn``: validation that reports top-2 accuracy beside the usual loss.

    python examples/custom_eval_step.py [--root runs] [--epochs 10]

``eval_step_fn(ctx)`` runs once per epoch under ``torch.no_grad()`` and owns the whole
validation loader (``ctx.val_loader``); it returns the epoch's validation record. Custom values
go in ``extra``. Here the monitor selects BEST by the loss this step computes (summed over every
validation row, then divided once — never a mean of batch means).
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits

import nnx_api as nnx


def top2_eval_step(ctx: nnx.EvalStepContext) -> nnx.EvaluationDataPoint:
    """Loss, accuracy and top-2 accuracy over the whole validation loader."""
    net = ctx.model.net
    was_training = net.training
    net.eval()
    loss_sum, rows, top1, top2 = 0.0, 0, 0, 0
    try:
        for x, y in ctx.val_loader:
            logits = net(x)
            loss_sum += float(F.cross_entropy(logits, y, reduction="sum"))
            best2 = logits.topk(2, dim=-1).indices
            top1 += int((best2[:, 0] == y).sum())
            top2 += int((best2 == y[:, None]).any(-1).sum())
            rows += len(y)
    finally:
        net.train(was_training)
    accuracy = top1 / rows
    return nnx.EvaluationDataPoint(
        loss=loss_sum / rows, accuracy=accuracy, error=1.0 - accuracy, count=rows, extra={"top2_accuracy": top2 / rows}
    )


def loaders(batch_size: int = 64) -> tuple[list, list]:
    x, y = load_digits(return_X_y=True)
    x = torch.tensor(x / 16.0, dtype=torch.float32)
    y = torch.tensor(y, dtype=torch.long)
    train = [(x[i : i + batch_size], y[i : i + batch_size]) for i in range(0, 1400, batch_size)]
    val = [(x[i : i + 100], y[i : i + 100]) for i in range(1400, len(x), 100)]
    return train, val


def main(argv: list[str] | None = None) -> nnx.NNRun:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=None, help="runs root (default ./runs)")
    parser.add_argument("--epochs", type=int, default=10)
    args = parser.parse_args(argv)
    nnx.set_seed(0)
    model = nnx.NNModel(nnx.NNParams(input_dim=64, output_dim=10, hidden_dims=(32,)), nnx.NNModelParams())
    train_loader, val_loader = loaders()
    params = nnx.NNTrainParams(
        n_epochs=args.epochs,
        optim=nnx.NNOptimParams(max_lr=3e-3),
        monitor=nnx.MonitorSpec(metric="loss", split="val"),
        seed=0,
        train_loader=train_loader,
        val_loader=val_loader,
        resume="auto",
    )
    run = model.train(params, eval_step_fn=top2_eval_step, root=args.root)
    val = run.idps[-1].val_edp
    print(f"validation accuracy {val.accuracy:.3f}, top-2 {val.extra['top2_accuracy']:.3f}, loss {val.loss:.4f}")
    print(f"best epoch {run.best().epoch_idx}; run folder: {run.path}")
    return run


if __name__ == "__main__":
    main()
