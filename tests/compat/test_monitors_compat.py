"""Named monitors as NNx 0.4.1 user code meets them (the wheel's observed behaviour is the oracle):
``MonitorSpec`` fills in loss/error's direction and resolves a declared metric's, the
``MonitorTracker`` of ``nnx.monitors``, refusals before anything is written, a step function's
epoch summary weighted by batch size, and the one warning for a monitor nothing feeds."""

from __future__ import annotations

import math

import pytest
import torch

import nnx_api as nnx
from nnx_api.monitors import MetricSpec, MonitorSpec, MonitorTracker


def model() -> nnx.NNModel:
    torch.manual_seed(0)
    return nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=2, hidden_dims=[6]), nnx.NNModelParams(loss=nnx.Losses.CROSS_ENTROPY))


def data(sizes: list[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(n, 4, generator=g), torch.randint(0, 2, (n,), generator=g)) for n in sizes]


def test_loss_and_error_have_their_direction_at_once_and_state_keeps_its_old_form():
    assert MonitorSpec().mode == "min" and MonitorSpec(metric="error").mode == "min"
    assert MonitorSpec(metric="nll").mode is None
    assert "mode" not in MonitorSpec().state()  # the filled-in direction changes no run id
    assert MonitorSpec.from_state(MonitorSpec().state()) == MonitorSpec() == MonitorSpec(mode="min")
    assert MonitorSpec(metric="loss", mode="max").state()["mode"] == "max"


def test_resolve_fills_a_declared_metrics_direction_and_refuses_an_undeclared_one():
    assert MonitorSpec(metric="nll").resolve([MetricSpec("nll")]).mode == "min"
    assert MonitorSpec(metric="accuracy").resolve([MetricSpec("accuracy")]).mode == "max"
    assert MonitorSpec(metric="f1", mode="min").resolve([]).mode == "min"  # an explicit mode is kept
    with pytest.raises(ValueError, match="undeclared metric; declared: loss, error"):
        MonitorSpec(metric="nll").resolve([])
    for bad in (dict(metric="val nll"), dict(min_delta=True), dict(min_delta=math.nan)):
        with pytest.raises(ValueError):
            MonitorSpec(**bad)


def test_improved_is_the_shared_rule_and_needs_a_direction():
    spec = MonitorSpec(metric="accuracy", mode="max", min_delta=0.05)
    assert spec.improved(0.5, None) and spec.improved(0.56, 0.5) and not spec.improved(0.55, 0.5)
    assert not MonitorSpec().improved(math.nan, None) and not MonitorSpec().improved(math.inf, 1.0)
    with pytest.raises(ValueError, match="direction"):
        MonitorSpec(metric="nll").improved(0.1, None)


def test_the_tracker_decides_value_by_value_as_nnx_does():
    tracker = MonitorTracker(MonitorSpec(metric="nll", mode="min", min_delta=0.01))
    records = [tracker.observe(v, epoch=i) for i, v in enumerate([0.8, 0.7, 0.695, None, math.nan, 0.5])]
    assert [(r.status, r.improved) for r in records] == [
        ("ok", True), ("ok", True), ("ok", False), ("missing", False), ("nonfinite", False), ("ok", True),
    ]
    assert (tracker.best, tracker.best_epoch) == (0.5, 5)
    with pytest.raises(ValueError, match="direction"):
        MonitorTracker(MonitorSpec(metric="nll"))
    strict = MonitorTracker(MonitorSpec(on_missing="error", on_nonfinite="error"))
    with pytest.raises(nnx.MonitorUnavailableError, match="has no value"):
        strict.observe(None, epoch=3)
    with pytest.raises(nnx.MonitorUnavailableError, match="non-finite"):
        strict.observe(math.inf, epoch=3)


def test_an_undeclared_monitor_is_refused_by_the_params():
    with pytest.raises(ValueError, match="undeclared metric; declared: loss, error"):
        nnx.NNTrainParams(n_epochs=1, monitor=MonitorSpec(metric="nll"))
    with pytest.raises(ValueError, match="undeclared metric"):
        nnx.NNTrainerParams(n_epochs=1, optims={"main": nnx.NNOptimParams()}, monitor=MonitorSpec(metric="nll"))
    assert nnx.NNTrainParams(n_epochs=1, metrics=[MetricSpec("nll")], monitor=MonitorSpec(metric="nll")).monitor.metric == "nll"


def test_a_step_function_cannot_feed_a_declared_metric_on_the_train_split(tmp_path):
    params = nnx.NNTrainParams(
        n_epochs=1, train_loader=data([5]), metrics=[MetricSpec("nll")], monitor=MonitorSpec(metric="nll", split="train"),
    )
    with pytest.raises(ValueError, match="only the default training step records"):
        model().train(params, train_step_fn=lambda ctx: nnx.EvaluationDataPoint(loss=1.0), root=tmp_path)
    assert not any(tmp_path.iterdir())


def test_a_step_functions_summary_weighs_each_record_by_its_batch(tmp_path):
    losses = iter([1.0, 1.0, 4.0])
    run = model().train(
        nnx.NNTrainParams(n_epochs=1, train_loader=data([2, 2, 1]), monitor=MonitorSpec(split="train"), progress=False),
        train_step_fn=lambda ctx: nnx.EvaluationDataPoint(loss=next(losses)),
        root=tmp_path,
    )
    assert run.idps[-1].train_summary.loss == pytest.approx(1.6)  # (2·1 + 2·1 + 1·4) / 5, not 2.0
    assert run.idps[-1].selection.value == pytest.approx(1.6)


def test_a_monitor_nothing_feeds_is_refused_before_the_first_epoch_commits(tmp_path):
    """NNx 0.4.1 skips such epochs silently (BEST never chosen, the plateau never stepped); here the
    run's first epoch is refused before it commits, naming the value (docs/nnx-compat.md)."""
    with pytest.raises(nnx.MonitorUnavailableError, match=r"epoch 0's records lack val\.nll"):
        model().train(
            nnx.NNTrainParams(
                n_epochs=3, train_loader=data([5]), val_loader=data([5]), metrics=[MetricSpec("nll")],
                monitor=MonitorSpec(metric="nll"), progress=False,
            ),
            eval_step_fn=lambda ctx: nnx.EvaluationDataPoint(loss=1.0),
            root=tmp_path,
        )
