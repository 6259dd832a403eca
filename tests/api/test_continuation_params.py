"""Parameters given with a continuation are used or refused, never silently replaced by the
source run's: a stateful ``resume_from_run_id`` restores the source's optimizer state, whose
param groups carry their own learning rate, momentum, weight decay and eps. Oracle: the learning
rate the optimizer holds when the continuation's first epoch begins."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import nnx_api as nnx

X, Y = torch.randn(64, 4, generator=torch.Generator().manual_seed(0)), torch.arange(64) % 3


class FirstLR(nnx.Callback):
    def __init__(self) -> None:
        self.lr: float | None = None

    def on_epoch_begin(self, ctx) -> None:
        if self.lr is None:
            self.lr = ctx.optimizer.param_groups[0]["lr"]


def fit(root, lr: float, **train):
    model = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3), nnx.NNModelParams())
    seen = FirstLR()
    params = nnx.NNTrainParams(n_epochs=1, seed=0, train_loader=DataLoader(TensorDataset(X, Y), batch_size=8), progress=False,
                               optim=nnx.NNOptimParams(name="sgd", max_lr=lr, momentum=0.9), **train)
    return model.train(params, root=root, callbacks=[seen]), seen.lr


@pytest.fixture
def source(tmp_path):
    run, _ = fit(tmp_path, 0.1)
    return tmp_path, run.id


def test_a_stateful_continuation_with_another_learning_rate_is_refused_before_anything_is_written(source):
    root, rid = source
    before = sorted(p.name for p in root.iterdir())
    with pytest.raises(nnx.ResumeMismatchError, match=r"optim.max_lr 0.1 → 0.01.*resume_mode='weights_only'"):
        fit(root, 0.01, resume_from_run_id=rid)
    assert sorted(p.name for p in root.iterdir()) == before


def test_weights_only_uses_the_new_learning_rate_and_the_same_one_continues_the_saved_state(source):
    root, rid = source
    fresh, lr = fit(root, 0.01, resume_from_run_id=rid, resume_mode="weights_only")
    assert lr == 0.01 and fresh.resume_status.mode == "weights_only"
    continued, lr = fit(root, 0.1, resume_from_run_id=rid)
    assert lr == 0.1 and continued.resume_status.mode == "stateful"


class StopAfter(nnx.Callback):
    def __init__(self, epoch: int) -> None:
        self.epoch = epoch

    def on_epoch_end(self, ctx) -> None:
        ctx.should_stop = ctx.epoch == self.epoch


def test_a_planned_continuation_trains_what_is_left_of_its_sources_plan(tmp_path):
    """``resume_epochs="planned"`` (NNx's): up to the source's own n_epochs, with its epochs and
    weights as one uninterrupted run; refused before anything is written for a weights-only
    resume, another plan or a finished one, and without a source."""

    def run(n_epochs, callbacks=(), salt=None, **train):
        torch.manual_seed(0)
        model = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3), nnx.NNModelParams())
        params = nnx.NNTrainParams(n_epochs=n_epochs, seed=0, train_loader=DataLoader(TensorDataset(X, Y), batch_size=8),
                                   progress=False, optim=nnx.NNOptimParams(name="sgd", max_lr=0.1, momentum=0.9), **train)
        return model.train(params, root=tmp_path, callbacks=list(callbacks), salt=salt), model

    whole, whole_model = run(4, salt="whole")
    first, _ = run(4, [StopAfter(1)], salt="first")
    assert "resume_epochs" not in first.state()["train"]  # omit-when-default: no run id moves
    resumed, model = run(4, resume_from_run_id=first.id, resume_mode="stateful", resume_epochs="planned")
    assert resumed.state()["train"]["resume_epochs"] == "planned"
    assert sorted({r.epoch_idx for r in resumed.idps}) == [2, 3]
    assert all(torch.equal(v, model.net.state_dict()[k]) for k, v in whole_model.net.state_dict().items())
    before = sorted(p.name for p in tmp_path.iterdir())
    for changes, words in (({"resume_mode": "weights_only"}, "restores the weights only"), ({"n_epochs": 6}, "planned 4 epochs")):
        with pytest.raises(nnx.ResumeMismatchError, match=words):
            run(changes.pop("n_epochs", 4), resume_from_run_id=first.id, resume_epochs="planned", **changes)
    with pytest.raises(nnx.ResumeMismatchError, match="already completed its planned 4 epochs"):
        run(4, resume_from_run_id=whole.id, resume_epochs="planned")
    with pytest.raises(nnx.ParamsError, match="set resume_from_run_id"):
        run(4, resume_epochs="planned")
    assert sorted(p.name for p in tmp_path.iterdir()) == before
