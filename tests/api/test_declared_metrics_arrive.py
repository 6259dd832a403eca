"""A declared or monitored value that the user's steps never produce is refused before the first
epoch is committed; a metric declared ``optional=True`` is excepted, and later epochs without
the monitored value follow the monitor's ``on_missing``. Oracle for the arriving value:
scikit-learn's macro F1 on the same predictions."""

from __future__ import annotations

import pytest
import sklearn.metrics as skm
import torch
from torch.utils.data import DataLoader, TensorDataset

import nnx_api as nnx

X, Y = torch.randn(48, 4, generator=torch.Generator().manual_seed(0)), torch.arange(48) % 3
LOADER = DataLoader(TensorDataset(X, Y), batch_size=16)


def eval_step(with_f1: bool):
    """A user's validation over the whole loader: the loss, and macro F1 when ``with_f1``."""

    def step(ctx):
        outs = torch.cat([ctx.model.net(x) for x, _ in ctx.val_loader])
        ys = torch.cat([y for _, y in ctx.val_loader])
        metrics = {"f1": skm.f1_score(ys, outs.argmax(1), average="macro")} if with_f1 else {}
        return nnx.EvaluationDataPoint(loss=float(ctx.model.loss_fn(outs, ys)), count=len(ys), metrics=metrics)

    return step


F1 = (nnx.MetricSpec("f1", config={"average": "macro"}),)


def fit(root, step, metrics=F1, monitor=None, **train):
    model = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3), nnx.NNModelParams())
    params = nnx.NNTrainParams(n_epochs=2, seed=0, train_loader=LOADER, val_loader=LOADER, metrics=metrics,
                               monitor=monitor, progress=False, **train)
    return model.train(params, root=root, eval_step_fn=step)


def test_a_declared_metric_no_step_produces_is_refused_before_the_first_epoch_commits(tmp_path):
    with pytest.raises(nnx.MonitorUnavailableError, match=r"epoch 0's records lack val\.f1.*optional=True"):
        fit(tmp_path, eval_step(with_f1=False), resume="auto")
    # nothing of epoch 0 was committed: the same run, now fed, validates from epoch 0 on
    seen = []
    fed = eval_step(with_f1=True)
    run = fit(tmp_path, lambda ctx: seen.append(ctx.epoch_idx) or fed(ctx), resume="auto")
    assert seen == [0, 1] and sorted(run.epochs) == [0, 1]


def test_a_monitored_built_in_value_no_step_produces_is_refused(tmp_path):
    monitor = nnx.MonitorSpec("accuracy", "val", mode="max")
    with pytest.raises(nnx.MonitorUnavailableError, match=r"lack val\.accuracy"):
        fit(tmp_path, eval_step(with_f1=True), monitor=monitor)


def test_an_optional_metric_may_be_absent_and_an_arriving_one_is_recorded(tmp_path):
    optional = (nnx.MetricSpec("f1", config={"average": "macro"}, optional=True),)
    run = fit(tmp_path / "optional", eval_step(with_f1=False), metrics=optional)
    assert all("f1" not in e.val_edp.metrics for e in run.epochs.values())
    fed = fit(tmp_path / "fed", eval_step(with_f1=True), monitor=nnx.MonitorSpec("f1", "val", mode="max"))
    assert set(fed.epochs[1].val_edp.metrics) == {"f1"}


def test_optional_enters_the_configuration_only_when_set():
    assert "optional" not in nnx.MetricSpec("f1").state()
    assert nnx.MetricSpec("f1", optional=True).state()["optional"] is True
    with pytest.raises(nnx.ParamsError, match=r"MetricSpec.optional.*True or False"):
        nnx.MetricSpec("f1", optional="yes")


def test_a_monitored_value_missing_after_the_first_epoch_follows_on_missing(tmp_path):
    calls = []

    def sometimes(ctx):
        calls.append(ctx.epoch_idx)
        record = eval_step(with_f1=True)(ctx)
        return record if ctx.epoch_idx == 0 else nnx.EvaluationDataPoint(loss=record.loss, count=record.count)

    model = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3), nnx.NNModelParams())
    params = nnx.NNTrainParams(n_epochs=3, seed=0, train_loader=LOADER, val_loader=LOADER, progress=False,
                               metrics=(nnx.MetricSpec("f1", config={"average": "macro"}, optional=True),),
                               monitor=nnx.MonitorSpec("f1", "val", mode="max"))
    run = model.train(params, root=tmp_path, eval_step_fn=sometimes)
    assert calls == [0, 1, 2] and [e.selection.status for e in run.epochs.values()] == ["ok", "missing", "missing"]
