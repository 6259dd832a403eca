"""A model that is not one supervised net is not handed supervised defaults silently: a run of
several named optimizers (a GAN's pair) that leaves BEST or a schedule to the defaults is told
which defaults it takes and what to declare; declaring them is quiet. A module NNx cannot read an
output width from trains without a TaskSpec when nothing needs one."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import nnx_api as nnx

REAL = [(torch.randn(8, 4, generator=torch.Generator().manual_seed(i)),) for i in range(4)]


class Pair(nn.Module):
    """A generator and a discriminator of convolutions only (no Linear layer); no forward."""

    def __init__(self) -> None:
        super().__init__()
        self.gen = nn.Sequential(nn.Unflatten(1, (1, 2)), nn.ConvTranspose1d(1, 1, 3), nn.Flatten())
        self.disc = nn.Sequential(nn.Unflatten(1, (1, 4)), nn.Conv1d(1, 1, 4), nn.Flatten())


def step(ctx):
    (real,) = ctx.batch
    net, opt = ctx.model.net, ctx.optimizers
    fake = net.gen(torch.randn(len(real), 2))
    opt["disc"].zero_grad()
    d_loss = F.softplus(-net.disc(real)).mean() + F.softplus(net.disc(fake.detach())).mean()
    d_loss.backward()
    opt["disc"].step()
    ctx.report_update("disc")
    opt["gen"].zero_grad()
    g_loss = F.softplus(-net.disc(fake)).mean()
    g_loss.backward()
    opt["gen"].step()
    ctx.report_update("gen")
    return nnx.EvaluationDataPoint(loss=float(d_loss.detach() + g_loss.detach()), count=len(real))


def fit(root, **declared):
    torch.manual_seed(0)
    group = {name: nnx.NNOptimParams(max_lr=1e-3, param_groups=[nnx.NNParamGroupSpec(name_pattern=f"{name}.*")])
             for name in ("disc", "gen")}
    params = nnx.NNTrainerParams(n_epochs=2, seed=0, train_loader=REAL, optims=group, progress=False, **declared)
    return nnx.Trainer(nnx.NNModel(module=Pair())).train(params, trainer_step_fn=step, root=root)


def test_a_pair_of_optimizers_left_to_the_defaults_is_told_what_to_declare(tmp_path):
    with pytest.warns(UserWarning, match=r"2 optimizers \('disc', 'gen'\).*BEST and EarlyStopping follow the loss.*"
                                         r"'disc', 'gen' follow the default reduce-on-plateau.*schedulers=.*monitor="):
        fit(tmp_path / "defaults")
    with pytest.warns(UserWarning, match=r"'gen' follows the default reduce-on-plateau") as caught:
        fit(tmp_path / "one", schedulers={"disc": nnx.NNSchedulerParams(factor=1.0)}, monitor=nnx.MonitorSpec("loss", split="train"))
    assert "BEST and EarlyStopping follow" not in str(caught[0].message)


def test_declared_schedules_and_monitor_are_quiet_and_no_task_is_needed(tmp_path):
    constant = nnx.NNSchedulerParams(factor=1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        run = fit(tmp_path, schedulers={"disc": constant, "gen": constant}, monitor=nnx.MonitorSpec("loss", split="train"))
    assert sorted(run.epochs) == [0, 1] and all(r.train_edp.loss == r.train_edp.loss for r in run.idps)


def test_built_in_validation_of_a_net_without_forward_names_eval_step_fn(tmp_path):
    constant = nnx.NNSchedulerParams(factor=1.0)
    with pytest.raises(nnx.TrainingInputError, match=r"forward failed on val_loader's first batch.*give eval_step_fn=.*"
                                                     r"or leave val_loader out"):
        fit(tmp_path, schedulers={"disc": constant, "gen": constant}, monitor=nnx.MonitorSpec("loss", split="train"),
            val_loader=[(x, torch.zeros(8)) for (x,) in REAL])
    assert not tmp_path.exists() or not any(tmp_path.iterdir())


class AutoEncoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.enc, self.dec = nn.Linear(4, 2), nn.Linear(2, 4)

    def forward(self, x):
        return self.dec(self.enc(x))


def test_an_early_stopping_monitor_a_regression_never_computes_is_refused_as_such(tmp_path):
    rows = [(x, x) for (x,) in REAL]
    model = nnx.NNModel(params=nnx.NNModelParams(loss=nnx.Losses.MEAN_SQUARED_ERROR), module=AutoEncoder())
    stop = nnx.EarlyStopping(monitor=nnx.MonitorSpec("accuracy", mode="max"), patience=2)
    with pytest.raises(nnx.ParamsError, match=r"EarlyStopping.monitor.*accuracy is computed for a classification run only"):
        model.train(nnx.NNTrainParams(n_epochs=2, train_loader=rows, val_loader=rows, progress=False), callbacks=[stop], root=tmp_path)
    assert not tmp_path.exists() or not any(tmp_path.iterdir())
