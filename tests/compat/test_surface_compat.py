"""Public surface, optimizer params, records and masked regression targets, as NNx 0.4.1 behaves
(oracle: the wheel's observed behaviour; masked regression: plain torch on the valid elements)."""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F

import nnx_api as nnx
from nnx_api import MetricSpec, NNOptimParams, NNParamGroupSpec, Optims, TaskSpec

# --- records -------------------------------------------------------------------------------------


def _flat_row(val: bool | None) -> dict:
    row = {"lr": 1e-3, "iter_idx": 3, "epoch_idx": 0, "batch_idx": 3, "train_edp.loss": 0.5, "train_edp.error": 0.25,
           "train_edp.metrics.mae": 0.1}
    if val is not None:
        row.update({"val_edp.loss": 0.6 if val else None, "val_edp.error": float("nan")})
    return row


def test_iteration_data_point_reads_a_flat_csv_row():
    idp = nnx.IterationDataPoint.from_state(_flat_row(True))
    assert idp.train_edp.loss == 0.5 and idp.train_edp.metrics == {"mae": 0.1}
    assert idp.val_edp is not None and idp.val_edp.loss == 0.6 and idp.val_edp.error is None
    assert nnx.IterationDataPoint.from_state(_flat_row(None)).val_edp is None
    assert nnx.IterationDataPoint.from_state(_flat_row(False)).val_edp is None  # every cell empty: no record


def test_monitor_record_names_its_monitor():
    record = nnx.MonitorRecord(metric="nll", split="val", mode="min", value=0.3, status="ok", improved=True)
    assert record.monitor.key == "val.nll" and record.monitor.mode == "min"


# --- optimizer params ----------------------------------------------------------------------------


def test_momentum_of_the_other_shape_is_built_but_invalid_and_training_refuses_it():
    bad = NNOptimParams(name=Optims.ADAMW, max_lr=1e-3, momentum=0.9, weight_decay=0.0)
    assert not bad.is_valid()
    assert not NNOptimParams(name=Optims.SGD, max_lr=1e-3, momentum=(0.9, 0.99)).is_valid()
    assert NNOptimParams(name=Optims.ADAMW, max_lr=1e-3, momentum=(0.9, 0.999)).is_valid()
    with pytest.raises(ValueError):  # a malformed value is still refused at construction
        NNOptimParams(name=Optims.ADAM, momentum=(0.9, 1.5))
    model = nnx.NNModel(
        net_params=nnx.NNParams(input_dim=3, output_dim=2, hidden_dims=[4], dropout_prob=0.0, activation=nnx.Activations.RELU),
        params=nnx.NNModelParams(net=nnx.Nets.FEED_FWD, device=nnx.Devices.CPU, loss=nnx.Losses.CROSS_ENTROPY),
    )
    batches = [(torch.randn(4, 3), torch.tensor([0, 1, 0, 1]))]
    with pytest.raises(nnx.ParamsError, match="invalid config") as caught:
        model.train(params=nnx.NNTrainParams(n_epochs=1, optim=bad, train_loader=batches))
    assert isinstance(caught.value, ValueError)


def test_param_groups_compare_as_a_list_and_refuse_plain_dicts():
    group = NNParamGroupSpec("encoder.*", lr=1e-4)
    optim = NNOptimParams.builder().adam(max_lr=1e-3).param_groups([group]).build()
    assert optim.param_groups == [group] and optim.param_groups == (group,)
    assert NNOptimParams.from_state(optim.state()) == optim and hash(optim) == hash(NNOptimParams.from_state(optim.state()))
    with pytest.raises(TypeError, match="NNParamGroupSpec"):
        NNOptimParams(name=Optims.ADAM, max_lr=1e-3, param_groups=[{"name_pattern": "encoder.*", "lr": 1e-5}])


# --- masked regression targets -------------------------------------------------------------------


def _regressor() -> nnx.NNModel:
    nnx.set_seed(0)
    return nnx.NNModel(
        net_params=nnx.NNParams(input_dim=3, output_dim=2, hidden_dims=[4], dropout_prob=0.0, activation=nnx.Activations.RELU),
        params=nnx.NNModelParams(net=nnx.Nets.FEED_FWD, device=nnx.Devices.CPU, loss=nnx.Losses.MEAN_SQUARED_ERROR,
                                 task=TaskSpec.regression(2)),
    )


def _masked_data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(6, 3, generator=g), torch.randn(6, 2, generator=g)
    y[0, 1] = y[2, 0] = math.nan
    y[3, :] = math.nan
    return x, y


def test_nan_regression_targets_weigh_zero_in_evaluation():
    x, y = _masked_data()
    model = _regressor()
    record = model.evaluate([(x[:2], y[:2]), (x[2:4], y[2:4]), (x[4:], y[4:])])
    with torch.no_grad():
        out = model.net(x)
    valid = ~torch.isnan(y)
    assert record.count == int(valid.sum()) == 8
    assert record.loss == pytest.approx(F.mse_loss(out[valid], y[valid]).item(), rel=1e-6)
    assert record.metrics["mse"] == pytest.approx(F.mse_loss(out[valid], y[valid]).item(), rel=1e-6)
    assert record.metrics["mae"] == pytest.approx(F.l1_loss(out[valid], y[valid]).item(), rel=1e-6)


def test_nan_regression_targets_weigh_zero_in_training(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    x, y = _masked_data()
    reference = copy.deepcopy(_regressor().net)
    opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    batches = [(x[:2], y[:2]), (x[3:4], y[3:4]), (x[2:4], y[2:4])]  # the middle batch is all masked
    for bx, by in batches:
        valid = ~torch.isnan(by)
        if not valid.any():
            continue  # nothing to learn from: NNx takes no step
        opt.zero_grad()
        F.mse_loss(reference(bx)[valid], by[valid]).backward()
        opt.step()
    model = _regressor()
    run = model.train(params=nnx.NNTrainParams(
        n_epochs=1, optim=NNOptimParams(name=Optims.SGD, max_lr=0.1, momentum=0.0), train_loader=batches, seed=0,
    ))
    counts = [idp.train_edp.count for idp in run.idps]
    assert counts == [3, 0, 1]
    assert run.idps[1].train_edp.loss is None and not run.idps[1].train_edp.metrics
    for mine, theirs in zip(model.net.state_dict().values(), reference.state_dict().values(), strict=True):
        torch.testing.assert_close(mine, theirs)


def test_infinite_regression_targets_are_refused():
    model = _regressor()
    with pytest.raises(nnx.TaskValidationError, match="finite"):
        model.evaluate([(torch.randn(2, 3), torch.tensor([[math.inf, 0.0], [0.0, 0.0]]))])


# --- public surface ------------------------------------------------------------------------------


def test_nnx_public_names_are_listed_and_resolve():
    for name in ("Utils", "VisUtils", "lr_finder", "StreamingMetrics", "task_adapter", "FitResult", "plans",
                 "data_splits", "preprocessing", "paradigms", "viz", "widen", "FeedFwdMoENN", "peft"):
        assert name in nnx.__all__ and getattr(nnx, name) is not None
    from nnx_api import plans

    assert "PlanData" not in plans.__all__ and plans.ATTEMPT_SALT_PREFIX == "plan-attempt:"
    assert nnx.FitResult is plans.FitResult
    with pytest.raises(nnx.OutOfScopeError):
        nnx.widen()
    with pytest.raises(nnx.OutOfScopeError):
        nnx.data_splits.plan_split()
    assert nnx.paradigms.kd_train_step_factory is nnx.kd_train_step_factory


def test_lr_finder_sweeps_and_restores_the_model():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3)).eval()
    before = copy.deepcopy(net.state_dict())
    loader = [(torch.randn(8, 4), torch.randint(0, 3, (8,))) for _ in range(4)]
    result = nnx.lr_finder(net, loader, loss_fn=F.cross_entropy, start_lr=1e-6, end_lr=1.0, num_iter=20)
    assert len(result.lrs) == len(result.losses) == 20 and result.suggested_lr > 0
    assert result.lrs[0] == pytest.approx(1e-6) and result.lrs[-1] == pytest.approx(1.0)
    assert not net.training and all(torch.equal(v, before[k]) for k, v in net.state_dict().items())


def test_streaming_metrics_merge_equals_one_pass():
    task = TaskSpec.categorical(3)
    specs = [MetricSpec("nll"), MetricSpec("brier"), MetricSpec("accuracy")]
    g = torch.Generator().manual_seed(0)
    probs = torch.softmax(torch.randn(7, 3, generator=g), -1)
    target = torch.tensor([0, 1, 2, 1, 0, 2, 2])
    halves = [nnx.StreamingMetrics.for_task(specs, task) for _ in range(2)]
    one = nnx.StreamingMetrics.for_task(specs, task)
    for i in range(0, 7, 2):
        halves[(i // 2) % 2].update(target[i:i + 2], probabilities=probs[i:i + 2])
        one.update(target[i:i + 2], probabilities=probs[i:i + 2])
    merged = halves[0].merge(halves[1]).finalize()
    assert merged.count == one.finalize().count == 7
    nll = -torch.log(probs[torch.arange(7), target]).mean().item()
    assert merged.values["nll"] == pytest.approx(nll) == one.finalize().values["nll"]
    assert halves[1].merge(halves[0]).finalize().values == pytest.approx(dict(merged.values))


def test_task_adapter_scores_a_multilabel_batch():
    adapter = nnx.task_adapter(TaskSpec.multilabel(2, threshold=0.5))
    record = adapter.record(torch.tensor([[4.0, -4.0], [4.0, -4.0]]), torch.tensor([[1.0, 0.0], [1.0, 1.0]]), loss=0.0)
    assert record.metrics["subset_accuracy"] == 0.5 and record.metrics["element_accuracy"] == 0.75
    assert record.accuracy == 0.5 and record.kind == "multilabel"


def test_nnx_small_public_helpers_exist_here_too():
    """``Devices.X.torch_device()``, ``Devices.get_torch_device()``, ``nnx.__version__``,
    ``nnx.seeding.env_snapshot()`` (its keys, JSON-safe) and a one-argument metric factory."""
    import json

    from nnx_api.seeding import env_snapshot

    assert nnx.Devices.CPU.torch_device() == torch.device("cpu")
    assert nnx.Devices.get_torch_device() == nnx.Devices.get()()
    assert isinstance(nnx.__version__, str) and nnx.__version__
    snap = env_snapshot()
    assert {"nnx", "python", "torch", "numpy", "platform", "cuda_available", "git_commit", "git_dirty"} <= set(snap)
    assert snap["nnx"] == nnx.__version__ and json.loads(json.dumps(snap)) == snap

    class Count:
        def __init__(self, config):
            self.n = 0

        def update(self, target, prediction):
            self.n += len(target)

        def result(self):
            return float(self.n)

    nnx.register_metric("tests.count1", 1, Count, input="labels", mode="max", replace=True)
    x, y = torch.randn(6, 4), torch.randint(0, 3, (6,))
    model = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(4,)))
    assert model.evaluate([(x, y)], metrics=[MetricSpec("tests.count1")]).metrics["tests.count1"] == 6.0
