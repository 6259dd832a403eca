"""Scheduler clocks and components as NNx 0.4.1 user code meets them (the wheel's observed
behaviour is the oracle): ``nnx.components``, a resume past a one-cycle budget refused as a
``ComponentRestoreError``, one ``UserWarning`` naming every silent optimizer,
``GradientAccumulationState`` under ``nnx.nn.nn_model`` and ``NNRun(train=, model=, net=)``."""

from __future__ import annotations

import warnings

import pytest
import torch

import nnx_api as nnx
from nnx_api.components import COMPONENT_STATE_VERSION, ComponentRegistry, ComponentRestoreError, ResumeStatus, StatefulComponent


def model(seed: int = 0) -> nnx.NNModel:
    torch.manual_seed(seed)
    return nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=2, hidden_dims=[8]), nnx.NNModelParams(loss=nnx.Losses.CROSS_ENTROPY))


def data(n: int = 5) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(4, 4, generator=g), torch.randint(0, 2, (4,), generator=g)) for _ in range(n)]


def one_cycle() -> nnx.NNSchedulerParams:
    return nnx.NNSchedulerParams(kind=nnx.Schedulers.ONE_CYCLE, clock="optimizer_update", max_lr=0.5, total_steps=12,
                                 min_lr=0.0, factor=0.5, patience=0, cooldown=0, threshold=0.0)


def params(epochs: int, **extra) -> nnx.NNTrainParams:
    optim = nnx.NNOptimParams(name=nnx.Optims.SGD, max_lr=0.1, momentum=0.0, weight_decay=0.0, accumulate_grad_batches=2)
    return nnx.NNTrainParams(n_epochs=epochs, train_loader=data(), optim=optim, scheduler=one_cycle(),
                             save_phase_checkpoints=False, progress=False, **extra)


def test_the_components_module_names_nnxs_public_parts():
    assert issubclass(ComponentRestoreError, ValueError) and ComponentRestoreError is nnx.ComponentRestoreError
    assert ResumeStatus is nnx.ResumeStatus and COMPONENT_STATE_VERSION == 1
    assert isinstance(nnx.EarlyStopping(), StatefulComponent)


def test_a_duplicate_name_in_discovery_names_what_the_user_wrote():
    # NNx's wheel refuses two EarlyStopping(name="es") with "duplicate component name 'es'"; here the component is
    # checkpointed as early_stopping.es, and the refusal says both
    with pytest.raises(ValueError, match=r"duplicate component name 'es' \(checkpointed as 'early_stopping.es'\)"):
        ComponentRegistry.discover([nnx.EarlyStopping(name="es"), nnx.EarlyStopping(name="es")])


def test_a_resume_past_the_one_cycle_budget_is_a_component_restore_error(tmp_path):
    parent = model().train(params(1), root=tmp_path)  # 3 committed updates of 12
    with pytest.raises(ComponentRestoreError, match="at least 15") as info:
        model().train(params(4, resume_from_run_id=parent.id), root=tmp_path)
    assert isinstance(info.value, nnx.ScheduleBudgetError) and "3 already made" in str(info.value)
    with pytest.raises(nnx.ScheduleBudgetError) as fresh:  # a fresh run over its budget is no restore problem
        model().train(params(5), root=tmp_path)
    assert not isinstance(fresh.value, ComponentRestoreError)


def _two_optimizers() -> nnx.NNTrainerParams:
    def optim(pattern: str) -> nnx.NNOptimParams:
        return nnx.NNOptimParams(name=nnx.Optims.SGD, max_lr=0.1, momentum=0.0, weight_decay=0.0,
                                 param_groups=[nnx.NNParamGroupSpec(name_pattern=pattern, lr=0.1)])

    step = nnx.NNSchedulerParams(kind=nnx.Schedulers.STEP, clock="optimizer_update", step_size=1, min_lr=0.0,
                                 factor=0.5, patience=0, cooldown=0, threshold=0.0)
    return nnx.NNTrainerParams(n_epochs=1, train_loader=data(2), optims={"a": optim("layers.0.*"), "b": optim("layers.1.*")},
                               schedulers={"a": step, "b": step}, save_phase_checkpoints=False, progress=False)


def test_a_silent_step_is_one_user_warning_naming_every_optimizer(tmp_path):
    def silent(ctx):
        x, y = ctx.batch
        return nnx.EvaluationDataPoint(loss=float(ctx.model.loss_fn(ctx.model.net(x), y).detach()))

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        nnx.Trainer(model()).train(_two_optimizers(), trainer_step_fn=silent, root=tmp_path)
    said = [w for w in caught if "reported no update" in str(w.message)]
    assert len(said) == 1 and issubclass(said[0].category, UserWarning)
    assert "['a', 'b']" in str(said[0].message)


def test_nn_model_module_and_nnrun_from_params():
    from nnx_api.nn.nn_model import GradientAccumulationState, NNRun

    assert GradientAccumulationState is nnx.GradientAccumulationState
    m = model()
    p = nnx.NNTrainParams(n_epochs=1)
    assert NNRun(train=p, model=m.params, net=m.net_params).id == NNRun(config=m.run_config(p, None), root="runs").id
    salted = NNRun(train=p, model=m.params, net=m.net_params, salt="x").id
    assert salted == NNRun(config=m.run_config(p, "x"), root="runs").id != NNRun(train=p, model=m.params, net=m.net_params).id
    with pytest.raises(ValueError):
        NNRun(config={}, train=p)
