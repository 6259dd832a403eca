"""Small digits runs and doc-snippet execution shared by the tracker, plot, plan/search and export tests."""

from __future__ import annotations

import functools
import re
from pathlib import Path

import torch

import nnx_api as nnx

ROOT = Path(__file__).resolve().parents[2]


@functools.lru_cache(maxsize=1)
def digits_tensors() -> tuple[torch.Tensor, torch.Tensor]:
    """scikit-learn's bundled digits (1797 8x8 images, 10 classes), inputs scaled to [0, 1]."""
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    return torch.tensor(x / 16.0, dtype=torch.float32), torch.tensor(y, dtype=torch.long)


def digits_loaders(n_train: int = 600, n_val: int = 300, batch: int = 100):
    """Re-iterable lists of (x, y) batches: a training slice and a validation slice."""
    x, y = digits_tensors()
    train = [(x[i : i + batch], y[i : i + batch]) for i in range(0, n_train, batch)]
    val = [(x[n_train : n_train + n_val], y[n_train : n_train + n_val])]
    return train, val


def digits_model(hidden=(32,), seed: int = 0) -> nnx.NNModel:
    nnx.set_seed(seed)
    return nnx.NNModel(nnx.NNParams(input_dim=64, output_dim=10, hidden_dims=hidden), nnx.NNModelParams())


def train_digits(root, *, epochs: int = 3, callbacks=(), monitor=None, metrics=(), lr: float = 1e-2, salt=None,
                 hidden=(32,)) -> tuple[nnx.NNModel, nnx.NNRun]:
    """A short digits run under ``root``."""
    train, val = digits_loaders()
    model = digits_model(hidden)
    params = nnx.NNTrainParams(
        n_epochs=epochs, optim=nnx.NNOptimParams(max_lr=lr), seed=0, train_loader=train, val_loader=val,
        metrics=metrics, monitor=monitor,
    )
    return model, model.train(params, callbacks=list(callbacks), root=root, salt=salt)


def python_snippets(doc: str) -> list[str]:
    """The ```python blocks of a docs page, in order."""
    return re.findall(r"```python\n(.*?)```", (ROOT / "docs" / doc).read_text(), flags=re.S)


def run_doc(doc: str, workdir: Path, monkeypatch) -> dict:
    """Run every python block of ``docs/<doc>`` in one namespace, in ``workdir``; return it."""
    monkeypatch.chdir(workdir)
    namespace: dict = {"__name__": "docs"}
    snippets = python_snippets(doc)
    assert snippets, f"docs/{doc} has no python snippet"
    for snippet in snippets:
        exec(compile(snippet, f"docs/{doc}", "exec"), namespace)
    return namespace
