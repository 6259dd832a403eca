"""Per-batch training records of the default step, as NNx fills them (REFERENCE §3.5).

Each batch's ``train_edp`` of a categorical task carries accuracy, error = 1 − accuracy and
macro F1 / precision / recall (scikit-learn, ``average="macro"``, ``zero_division=0``) of the
batch's decoded predictions — the argmax of the logits the step's forward produced, before that
batch's update — with ignored targets removed. The oracle is scikit-learn on predictions recorded
from the net's own forward passes.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from sklearn.metrics import accuracy_score, f1_score, precision_score, recall_score
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import nnx_api as nnx


class Recording(nn.Module):
    """A small net that records the argmax of every training forward."""

    def __init__(self, classes: int) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, classes))
        self.predictions: list[torch.Tensor] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.body(x)
        if self.training:
            self.predictions.append(out.detach().argmax(-1).clone())
        return out


def train(root: Any, classes: int, ignore_index: int | None = None) -> tuple[Recording, Any, list[torch.Tensor]]:
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(83, 4, generator=gen)  # a short last batch
    y = torch.randint(0, classes, (83,), generator=gen)
    if ignore_index is not None:
        y[::4] = ignore_index
        y[16:32] = ignore_index  # one batch with every target ignored
    net = Recording(classes)
    task = {"task": nnx.TaskSpec.categorical(ignore_index=ignore_index)} if ignore_index is not None else {}
    model = nnx.NNModel(module=net, params=nnx.NNModelParams(loss=nnx.Losses.CROSS_ENTROPY, **task))
    params = nnx.NNTrainParams(
        n_epochs=1, seed=0, train_loader=DataLoader(TensorDataset(x, y), batch_size=16), progress=False,
        optim=nnx.NNOptimParams(name=nnx.Optims.ADAM, max_lr=1e-2),
    )
    return net, model.train(params, root=str(root)), list(y.split(16))


def oracle(target: torch.Tensor, pred: torch.Tensor, ignore_index: int | None) -> dict[str, float] | None:
    keep = target != ignore_index if ignore_index is not None else torch.ones_like(target, dtype=torch.bool)
    t, p = target[keep].numpy(), pred[keep].numpy()
    if len(t) == 0:
        return None
    return {
        "accuracy": accuracy_score(t, p),
        "f1": f1_score(t, p, average="macro", zero_division=0),
        "precision": precision_score(t, p, average="macro", zero_division=0),
        "recall": recall_score(t, p, average="macro", zero_division=0),
    }


@pytest.mark.parametrize(("classes", "ignore_index"), [(2, None), (5, None), (4, 4)])
def test_each_batch_record_has_sklearn_macro_scores(tmp_path: Any, classes: int, ignore_index: int | None) -> None:
    net, run, targets = train(tmp_path, classes, ignore_index)
    idps = list(run.idps)
    assert len(idps) == len(targets) == len(net.predictions) == 6
    for idp, target, pred in zip(idps, targets, net.predictions, strict=True):
        edp, want = idp.train_edp, oracle(target, pred, ignore_index)
        if want is None:  # every target ignored: nothing scored
            assert (edp.count, edp.accuracy, edp.f1, edp.precision, edp.recall, edp.error) == (0, None, None, None, None, None)
            continue
        for name, value in want.items():
            assert getattr(edp, name) == pytest.approx(value, rel=1e-12, abs=1e-12), name
        assert edp.error == pytest.approx(1.0 - want["accuracy"], abs=1e-12)
        valid = len(target) if ignore_index is None else int((target != ignore_index).sum())
        assert edp.count == valid


def test_the_batch_scores_are_in_idps_csv(tmp_path: Any) -> None:
    """What the run's history file holds, read back from disk, is what training recorded."""
    _net, run, _ = train(tmp_path, 3)
    loaded = nnx.NNRun.load(run.id, root=str(tmp_path))
    assert [i.train_edp for i in loaded.idps] == [i.train_edp for i in run.idps]
    assert all(i.train_edp.f1 is not None and i.train_edp.recall is not None for i in loaded.idps)
