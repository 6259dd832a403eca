"""Hyperparameter search on scikit-learn's digits: an ExperimentPlan searched with Optuna.

    python examples/search_digits.py [--root runs] [--trials 12] [--epochs 15]

Every trial is its own run; pruned trials stop early on the validation NLL. Prints each trial,
the winner and where its BEST checkpoint lives (needs ``pip install "nnx[search]"``).
"""

from __future__ import annotations

import argparse

import torch
from sklearn.datasets import load_digits
from torch.utils.data import DataLoader, TensorDataset

import nnx_api as nnx
from nnx_api.experiments.plans import ExperimentPlan, PlanData
from nnx_api.experiments.search import CategoricalParam, FloatParam, SearchBudget, SearchResult, SearchSpace, search


def digits_data(seed: int = 0) -> PlanData:
    """80/20 split; the training loader is a factory so every trial shuffles the same way."""
    x, y = load_digits(return_X_y=True)
    x, y = torch.tensor(x / 16.0, dtype=torch.float32), torch.tensor(y)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))
    cut = int(0.8 * len(x))
    train, val = TensorDataset(x[order[:cut]], y[order[:cut]]), TensorDataset(x[order[cut:]], y[order[cut:]])

    def train_loader() -> DataLoader:
        return DataLoader(train, batch_size=64, shuffle=True, generator=torch.Generator().manual_seed(seed))

    return PlanData(train=train_loader, val=DataLoader(val, batch_size=512))


def main(argv: list[str] | None = None) -> SearchResult:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=None, help="runs root (default ./runs)")
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--epochs", type=int, default=15)
    args = parser.parse_args(argv)

    plan = ExperimentPlan(
        net=nnx.NNParams(input_dim=64, output_dim=10, hidden_dims=(64,)),
        train=nnx.NNTrainParams(n_epochs=args.epochs, metrics=(nnx.MetricSpec(id="nll"),)),
        data=digits_data(),
        seed=0,
        root=args.root,
    )
    space = SearchSpace(
        FloatParam("train.optim.max_lr", 1e-4, 3e-2, log=True),
        FloatParam("train.optim.weight_decay", 1e-6, 1e-2, log=True),
        CategoricalParam("net.hidden_dims", [(32,), (64,), (128, 64)]),
        FloatParam("net.dropout_prob", 0.0, 0.3),
    )
    result = search(plan, space, budget=SearchBudget(trials=args.trials), monitor=nnx.MonitorSpec(metric="nll"))
    for o in result.outcomes:
        value = "-" if o.value is None else f"{o.value:.4f}"
        print(f"trial {o.number:>2}  {o.state:<8}  val.nll@BEST {value}  epochs {o.epochs:>2}  {dict(o.params)}")
    best = result.best
    print(f"stopped: {result.stop_reason}; {result.counts()}")
    if best is not None:
        print(f"best: trial {best.number}, val.nll {best.value:.4f} at epoch {best.best_epoch}, run {best.run_id}")
    return result


if __name__ == "__main__":
    main()
