"""Knowledge distillation with ``kd_objective``: a small student learns from a trained teacher.

    python examples/distillation_kd.py [--root runs] [--epochs 15]

The teacher is an ordinary NNModel run. The student trains with
``objective=nnx.kd_objective(teacher, alpha=0.7, temperature=4.0)``: two loss terms per batch —
``"distillation"`` (the temperature-softened KL to the teacher, summed over rows, per row) and
``"supervised"`` (the task loss per valid target) — weighted 0.7 / 0.3. The shared update engine
owns the update, so gradient accumulation (here 2 batches per update) stays exact. Each
committed update's term values reach ``on_optimizer_update`` callbacks.
"""

from __future__ import annotations

import argparse

import torch
from sklearn.datasets import load_digits

import nnx_api as nnx


def loaders(batch_size: int = 64) -> tuple[list, list]:
    x, y = load_digits(return_X_y=True)
    x = torch.tensor(x / 16.0, dtype=torch.float32)
    y = torch.tensor(y, dtype=torch.long)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))
    train, val = order[:1400], order[1400:]
    return [(x[i], y[i]) for i in train.split(batch_size)], [(x[val], y[val])]


class TermLog(nnx.Callback):
    """Keeps each committed update's window values of the loss terms."""

    def __init__(self) -> None:
        self.events: list[nnx.UpdateEvent] = []

    def on_optimizer_update(self, ctx, event) -> None:
        self.events.append(event)


def main(argv: list[str] | None = None) -> nnx.NNRun:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=None, help="runs root (default ./runs)")
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--teacher-epochs", type=int, default=None)
    args = parser.parse_args(argv)
    train_loader, val_loader = loaders()

    nnx.set_seed(0)
    teacher = nnx.NNModel(nnx.NNParams(input_dim=64, output_dim=10, hidden_dims=(128, 64)), nnx.NNModelParams())
    teacher_run = teacher.train(
        nnx.NNTrainParams(n_epochs=args.teacher_epochs or args.epochs, optim=nnx.NNOptimParams(max_lr=3e-3), seed=0,
                          train_loader=train_loader, val_loader=val_loader, resume="auto"),
        root=args.root,
    )

    nnx.set_seed(1)
    student = nnx.NNModel(nnx.NNParams(input_dim=64, output_dim=10, hidden_dims=(16,)), nnx.NNModelParams())
    log = TermLog()
    run = student.train(
        nnx.NNTrainParams(n_epochs=args.epochs, optim=nnx.NNOptimParams(max_lr=1e-2, accumulate_grad_batches=2),
                          seed=1, data_id="digits-kd", train_loader=train_loader, val_loader=val_loader, resume="auto"),
        objective=nnx.kd_objective(teacher, alpha=0.7, temperature=4.0),
        callbacks=[log],
        root=args.root,
    )
    print(f"teacher validation accuracy {teacher_run.idps[-1].val_edp.accuracy:.3f}; "
          f"student {run.idps[-1].val_edp.accuracy:.3f}")
    if log.events:
        last = log.events[-1]
        print(f"last update {last.update_idx}: " + ", ".join(f"{k} {v:.4f}" for k, v in sorted(last.losses.items())))
    print(f"run folder: {run.path}")
    return run


if __name__ == "__main__":
    main()
