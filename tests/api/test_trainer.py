"""Trainer: named optimizers, exact resume, refusals (the commit order of their events and clocks:
``tests/api/training/test_epoch.py``)."""

from __future__ import annotations

import dataclasses
import runpy
import sys
from pathlib import Path

import pytest
import torch

import nnx_api as nnx

from tests.api.tiny import batches, tiny_data, two_part_model

ROOT = Path(__file__).resolve().parents[2]
GAN = runpy.run_path(str(ROOT / "examples" / "gan_trainer.py"), run_name="gan_example")


def sgd(pattern=None, lr=0.4):
    groups = [nnx.NNParamGroupSpec(name_pattern=pattern)] if pattern else None
    return nnx.NNOptimParams(name=nnx.Optims.SGD, max_lr=lr, momentum=0.0, param_groups=groups)


def split_optims():
    return {"encoder": sgd("encoder.*"), "head": sgd("head.*")}


def test_trainer_objective_with_one_optimizer_matches_nnmodel(runs):
    x, y = tiny_data(n=30)
    a, b = two_part_model(), two_part_model()
    loader = batches(x, y, 7)
    a.train(nnx.NNTrainParams(n_epochs=2, optim=sgd(), train_loader=loader), objective=nnx.supervised_objective(), root=runs)
    nnx.Trainer(b).train(nnx.NNTrainerParams(n_epochs=2, optims={"all": sgd()}, train_loader=loader),
                         objective=nnx.supervised_objective(), root=runs)
    assert all(torch.equal(p, q) for p, q in zip(a.net.parameters(), b.net.parameters(), strict=True))


class CrashAtEpoch(nnx.Callback):
    def __init__(self, epoch):
        self.epoch = epoch

    def on_epoch_begin(self, ctx):
        if ctx.epoch == self.epoch:
            raise RuntimeError("injected crash")


def test_gan_resumes_statefully_mid_run_to_bit_identical_weights(runs):
    trainer, params = GAN["build"](4)
    reference = trainer.train(params, trainer_step_fn=GAN["gan_step"], root=runs / "reference")
    want = {k: v.clone() for k, v in trainer.model.net.state_dict().items()}

    trainer, params = GAN["build"](4)
    with pytest.raises(RuntimeError, match="injected crash"):
        trainer.train(params, trainer_step_fn=GAN["gan_step"], callbacks=[CrashAtEpoch(2)], root=runs)
    crashed = nnx.NNRun.load(reference.id, runs)
    assert crashed.checkpoint("last").epoch == 1

    trainer, params = GAN["build"](4)
    resumed = trainer.train(params, trainer_step_fn=GAN["gan_step"], root=runs)
    assert resumed.id == reference.id and resumed.resume_status["source_epoch"] == 1
    got = trainer.model.net.state_dict()
    assert {k.split(".")[0] for k in got} == {"gen", "disc"}
    assert all(torch.equal(want[k], got[k]) for k in want)  # both networks, bit for bit
    assert resumed.idps == reference.idps
    payload = resumed.checkpoint("last").payload()
    assert payload["kind"] == "trainer" and payload["update_counts"] == {"disc": 32, "gen": 32}
    assert set(payload["optimizers"]) == {"disc", "gen"} and set(payload["schedules"]) == {"disc", "gen"}


def test_run_identity_has_a_trainer_section_and_params_round_trip(runs):
    x, y = tiny_data()
    params = nnx.NNTrainerParams(
        n_epochs=1, optims=split_optims(), schedulers={"head": nnx.NNSchedulerParams(kind=nnx.Schedulers.STEP)},
        seed=2, train_loader=batches(x, y, 16),
    )
    state = params.state()
    assert list(state["optims"]) == ["encoder", "head"] and list(state["schedulers"]) == ["head"]
    assert nnx.NNTrainerParams.from_state(state) == dataclasses.replace(params, train_loader=None)
    assert "schedulers" not in nnx.NNTrainerParams(n_epochs=1, optims={"a": sgd()}).state()
    run = nnx.Trainer(two_part_model()).train(params, objective=nnx.supervised_objective(), root=runs)
    assert run.config["trainer"] == state and run.config["train"]["optim"] == state["optims"]["encoder"]
    with pytest.raises(nnx.ParamsError, match="name no optimizer"):
        nnx.NNTrainerParams(n_epochs=1, optims={"a": sgd()}, schedulers={"b": nnx.NNSchedulerParams()})


def test_checkpoints_resume_only_through_their_own_entry_point(runs):
    x, y = tiny_data()
    loader = batches(x, y, 16)
    nn_run = two_part_model().train(nnx.NNTrainParams(n_epochs=1, optim=sgd(), train_loader=loader), root=runs)
    with pytest.raises(nnx.ComponentRestoreError, match="not a Trainer"):
        nnx.Trainer(two_part_model()).train(
            nnx.NNTrainerParams(n_epochs=1, optims={"all": sgd()}, train_loader=loader, resume_from_run_id=nn_run.id),
            objective=nnx.supervised_objective(), root=runs,
        )
    tr_run = nnx.Trainer(two_part_model()).train(
        nnx.NNTrainerParams(n_epochs=1, optims=split_optims(), train_loader=loader),
        objective=nnx.supervised_objective(), root=runs,
    )
    with pytest.raises(nnx.ComponentRestoreError, match="'trainer'"):
        two_part_model().train(nnx.NNTrainParams(n_epochs=1, optim=sgd(), train_loader=loader,
                                                 resume_from_run_id=tr_run.id), root=runs)
    weights = nnx.Trainer(two_part_model()).train(
        nnx.NNTrainerParams(n_epochs=1, optims={"all": sgd()}, train_loader=loader, resume_from_run_id=nn_run.id,
                            resume_mode="weights_only"),
        objective=nnx.supervised_objective(), root=runs,
    )
    assert weights.resume_status["mode"] == "weights_only"
    assert {r.id for r in nnx.NNRun.all(runs)} == {nn_run.id, tr_run.id, weights.id}  # refused runs left nothing


def test_refusals_before_anything_is_written(runs):
    x, y = tiny_data()
    loader = batches(x, y, 16)
    trainer = nnx.Trainer(two_part_model())
    step = GAN["gan_step"]
    with pytest.raises(nnx.UpdateOwnerError, match="no default trainer step"):
        trainer.train(nnx.NNTrainerParams(n_epochs=1, optims={"all": sgd()}, train_loader=loader), root=runs)
    with pytest.raises(nnx.UpdateOwnerError, match="not both"):
        trainer.train(nnx.NNTrainerParams(n_epochs=1, optims={"all": sgd()}, train_loader=loader),
                      trainer_step_fn=step, objective=nnx.supervised_objective(), root=runs)
    with pytest.raises(nnx.ParamsError, match="'encoder.0.weight' is already owned by optimizer 'a'"):
        trainer.train(nnx.NNTrainerParams(n_epochs=1, optims={"a": sgd("encoder.*"), "b": sgd("*")}, train_loader=loader),
                      trainer_step_fn=step, root=runs)
    with pytest.raises(nnx.ParamsError, match="must declare param_groups"):
        trainer.train(nnx.NNTrainerParams(n_epochs=1, optims={"a": sgd("encoder.*"), "b": sgd()}, train_loader=loader),
                      trainer_step_fn=step, root=runs)
    with pytest.raises(nnx.ParamsError, match="matches no trainable parameter"):
        trainer.train(nnx.NNTrainerParams(n_epochs=1, optims={"a": sgd("decoder.*")}, train_loader=loader),
                      trainer_step_fn=step, root=runs)
    with pytest.raises(nnx.ParamsError, match="optims"):
        nnx.NNTrainerParams(n_epochs=1, optims={})
    assert not runs.exists()


def test_gan_example_runs(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["gan_trainer.py"])
    run = GAN["main"](["--root", str(tmp_path), "--epochs", "2"])
    assert run.checkpoint("last").epoch == 1 and "g_loss" in run.idps[-1].train_edp.extra


def test_a_trainer_with_builtin_validation_checks_the_validation_loaders_first_batch_before_writing(runs):
    """Built-in validation consumes val_loader whichever entry point trains: a Trainer run's
    val_loader gets the same first-batch check as an NNModel's, before anything is written."""
    x, y = tiny_data(n=24)
    numpy_val = [(x[:8].numpy(), y[:8].numpy())]  # the mistake the check names
    for entry in ("nnmodel", "trainer"):
        model = two_part_model()
        with pytest.raises(nnx.TrainingInputError, match="val_loader's first batch holds NumPy arrays"):
            if entry == "nnmodel":
                model.train(nnx.NNTrainParams(n_epochs=1, optim=sgd(), train_loader=batches(x, y, 8), val_loader=numpy_val),
                            objective=nnx.supervised_objective(), root=runs)
            else:
                nnx.Trainer(model).train(
                    nnx.NNTrainerParams(n_epochs=1, optims=split_optims(), train_loader=batches(x, y, 8), val_loader=numpy_val),
                    objective=nnx.supervised_objective(), root=runs,
                )
        assert not runs.exists() or not any(runs.iterdir()), entry  # refused before anything is written


