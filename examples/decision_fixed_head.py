"""Typed decisions: train a digits classifier, then ask it "Which digit?" with ten options.

    python examples/decision_fixed_head.py [--root DIR] [--epochs 20]

Trains an MLP on scikit-learn's bundled digits (no download), reloads the best checkpoint and
asks a typed question of held-out images with ``FixedHeadProvider``. The answers are validated
distributions keyed by option id, in the question's order, instead of positional logits.
"""

from __future__ import annotations

import argparse
import tempfile

import torch
from sklearn.datasets import load_digits
from torch.utils.data import DataLoader, TensorDataset

import nnx_api as nnx
from nnx_api.decisions import Choice, FixedHeadProvider

NAMES = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
CLASSES = tuple(str(digit) for digit in range(10))  # the model's labels, in class order


def digits(seed: int = 0) -> tuple[DataLoader, DataLoader, torch.Tensor, torch.Tensor]:
    """Train/validation loaders (80/20, inputs scaled to [0, 1]) and the validation tensors."""
    x, y = load_digits(return_X_y=True)
    x = torch.tensor(x / 16.0, dtype=torch.float32)
    y = torch.tensor(y, dtype=torch.long)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))
    cut = int(0.8 * len(x))
    train, val = order[:cut], order[cut:]
    train_loader = DataLoader(TensorDataset(x[train], y[train]), batch_size=64, shuffle=True,
                              generator=torch.Generator().manual_seed(seed))
    val_loader = DataLoader(TensorDataset(x[val], y[val]), batch_size=512)
    return train_loader, val_loader, x[val], y[val]


def ask(root: str, epochs: int) -> None:
    nnx.set_seed(0)
    train_loader, val_loader, x_val, y_val = digits()
    model = nnx.NNModel(
        nnx.NNParams(input_dim=64, output_dim=10, hidden_dims=(64,), dropout_prob=0.0),
        nnx.NNModelParams(task=nnx.TaskSpec.categorical(10, labels=CLASSES)),
    )
    run = model.train(
        nnx.NNTrainParams(n_epochs=epochs, optim=nnx.NNOptimParams(name=nnx.Optims.ADAM, max_lr=1e-2),
                          train_loader=train_loader, val_loader=val_loader, seed=0),
        root=root,
    )
    best = nnx.NNModel.from_checkpoint(run.id, "best", root=root)

    # Option ids are ours ("zero" … "nine"); option_map ties them to the model's labels. The
    # question lists them in its own order (odd digits first) and every answer follows it.
    provider = FixedHeadProvider(best, option_map=dict(zip(NAMES, CLASSES, strict=True)))
    order = [1, 3, 5, 7, 9, 0, 2, 4, 6, 8]
    question = Choice("Which digit?", [(NAMES[d], f"the handwritten digit {d}") for d in order])

    results = provider.decide(question, x_val[:3])
    print(f"{question.prompt} ({provider.model_calls} model call, "
          f"question digest {question.digest()[:12]}…)")
    for result, truth in zip(results, y_val[:3].tolist(), strict=True):
        top3 = sorted(result.distribution, key=lambda pair: pair[1], reverse=True)[:3]
        shown = ", ".join(f"{option_id} {p:.3f}" for option_id, p in top3)
        print(f"  true {NAMES[truth]:<5} → answer {result.top:<5} ({shown})")

    answers = provider.decide(question, x_val)
    correct = sum(result.top == NAMES[truth] for result, truth in zip(answers, y_val.tolist(), strict=True))
    print(f"  {correct}/{len(answers)} validation images answered correctly")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=None, help="runs root (default: a temporary folder)")
    parser.add_argument("--epochs", type=int, default=20)
    args = parser.parse_args(argv)
    if args.root is not None:
        ask(args.root, args.epochs)
        return
    with tempfile.TemporaryDirectory() as root:
        ask(root, args.epochs)


if __name__ == "__main__":
    main()
