"""A fresh run started beside an interrupted run whose configuration differs in a few fields
says so (resume='auto' continues the same configuration only), naming the fields and
``resume_from_run_id``; beside a finished run, or one that differs in many fields, it says nothing."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import nnx_api as nnx

X, Y = torch.randn(32, 4, generator=torch.Generator().manual_seed(0)), torch.arange(32) % 3


class CtrlC(nnx.Callback):
    def on_epoch_begin(self, ctx):
        if ctx.epoch == 1:
            raise KeyboardInterrupt


def fit(root, lr=0.01, callbacks=(), seed=0, **train):
    model = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3), nnx.NNModelParams())
    params = nnx.NNTrainParams(n_epochs=3, seed=seed, train_loader=DataLoader(TensorDataset(X, Y), batch_size=8),
                               optim=nnx.NNOptimParams(max_lr=lr), resume="auto", progress=False, **train)
    return model.train(params, root=root, callbacks=list(callbacks))


def interrupted(root) -> str:
    with pytest.raises(KeyboardInterrupt) as caught:
        fit(root, callbacks=[CtrlC()])
    return caught.value.nnx_run_id


def test_a_fresh_run_beside_an_interrupted_near_twin_names_it_and_the_way_on(tmp_path):
    old = interrupted(tmp_path)
    with pytest.warns(UserWarning, match=rf"run {old} in this root is interrupted \(epoch 0 committed\).*"
                                         r"train\.optim\.max_lr 0\.01 → 0\.005.*resume_from_run_id='" + old):
        fit(tmp_path, lr=0.005)


def test_nothing_is_said_beside_a_finished_run_or_a_distant_one(tmp_path):
    fit(tmp_path / "finished")
    interrupted(tmp_path / "distant")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fit(tmp_path / "finished", lr=0.005)
        fit(tmp_path / "distant", lr=0.005, seed=1, data_id="other", save_phase_checkpoints=False)
