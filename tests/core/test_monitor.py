"""The monitor rule, torch-free, from REFERENCE §8.4 / §7.3's words.

``improved(current, best)``: the first finite value improves; a later one must beat the best by
more than ``min_delta`` in the monitor's direction; ties never improve; a non-finite value never
improves; the "error" policies raise ``MonitorUnavailableError``. Without a named monitor the
signal is the first finite of val error, val loss, train error, train loss. The best value is the
checkpointed component ``nnx.monitor``: a resume with another monitor is refused.
"""

from __future__ import annotations

import math

import pytest

from nnx_core.errors import MonitorUnavailableError, ParamsError
from nnx_core.monitor import Monitor
from nnx_core.monitor_spec import MonitorSpec, improves
from nnx_core.records import EvaluationDataPoint, IterationDataPoint

NAN, INF = math.nan, math.inf


def idp(epoch: int = 0, *, val: EvaluationDataPoint | None = None, train: EvaluationDataPoint | None = None,
        summary: EvaluationDataPoint | None = None) -> IterationDataPoint:
    return IterationDataPoint(
        iter_idx=epoch, epoch_idx=epoch, batch_idx=0, lr=0.1,
        train_edp=train if train is not None else EvaluationDataPoint(loss=9.0, error=0.9),
        val_edp=val, train_summary=summary,
    )


def decisions(monitor: Monitor, values: list[float | None], split: str = "val") -> list[bool]:
    out = []
    for epoch, value in enumerate(values):
        edp = EvaluationDataPoint(metrics={"nll": value}) if value is not None else EvaluationDataPoint()
        rec = idp(epoch, val=edp) if split == "val" else idp(epoch, summary=edp)
        out.append(monitor.decide(epoch, rec).improved)
    return out


def test_the_reference_example_improves_at_epochs_0_and_1_only():
    monitor = Monitor(MonitorSpec("nll", min_delta=0.01))
    assert decisions(monitor, [0.8, 0.7, 0.695, 0.71]) == [True, True, False, False]
    assert (monitor.best, monitor.best_epoch) == (0.7, 1)


@pytest.mark.parametrize("mode, values, expected", [
    ("min", [1.0, 1.0, 0.9, 0.9], [True, False, True, False]),  # ties never improve
    ("max", [1.0, 1.0, 1.1, 0.5], [True, False, True, False]),
    ("min", [NAN, INF, 2.0, -INF, 1.0], [False, False, True, False, True]),  # non-finite never improves, nor becomes best
    ("max", [-INF, 0.5, INF, 0.4, 0.6], [False, True, False, False, True]),
])
def test_direction_ties_and_non_finite_values(mode, values, expected):
    monitor = Monitor(MonitorSpec("nll", mode=mode))
    assert decisions(monitor, values) == expected
    assert monitor.best is not None and math.isfinite(monitor.best)


def test_min_delta_is_strict_in_both_directions():
    assert not improves(0.9, 1.0, "min", 0.1) and improves(0.89, 1.0, "min", 0.1)
    assert not improves(1.1, 1.0, "max", 0.1) and improves(1.11, 1.0, "max", 0.1)
    assert improves(123.0, None, "min", 5.0) and improves(-123.0, None, "max", 5.0)  # the first finite value
    assert not improves(NAN, None, "min", 0.0)


def test_a_named_metric_reads_its_split_and_a_missing_value_skips_the_epoch():
    monitor = Monitor(MonitorSpec("nll", split="train"))
    decided = monitor.decide(0, idp(0, val=EvaluationDataPoint(metrics={"nll": 0.1}), summary=EvaluationDataPoint(metrics={"nll": 2.0})))
    assert (decided.value, decided.status, decided.improved) == (2.0, "ok", True)  # the training summary, not val
    missing = monitor.decide(1, idp(1, val=EvaluationDataPoint(metrics={"nll": 0.1})))  # no summary: the last batch, no nll
    assert (missing.value, missing.status, missing.improved, missing.best) == (None, "missing", False, 2.0)
    nonfinite = monitor.decide(2, idp(2, summary=EvaluationDataPoint(metrics={"nll": NAN})))
    assert nonfinite.status == "nonfinite" and not nonfinite.improved and monitor.best == 2.0
    assert Monitor(MonitorSpec("loss")).decide(0, idp(0)).status == "missing"  # no val_edp at all


def test_the_error_policies_raise():
    with pytest.raises(MonitorUnavailableError, match="on_missing"):
        Monitor(MonitorSpec("nll", on_missing="error")).decide(0, idp(0, val=EvaluationDataPoint()))
    with pytest.raises(MonitorUnavailableError, match="inf"):
        Monitor(MonitorSpec("nll", on_nonfinite="error")).decide(0, idp(0, val=EvaluationDataPoint(metrics={"nll": INF})))
    # "skip" (the default) raises for neither
    assert Monitor(MonitorSpec("nll")).decide(0, idp(0, val=EvaluationDataPoint(metrics={"nll": NAN}))).status == "nonfinite"


@pytest.mark.parametrize("val, train, expected", [
    (EvaluationDataPoint(loss=0.5, error=0.2), None, 0.2),  # val error first
    (EvaluationDataPoint(loss=0.5, error=NAN), None, 0.5),  # then val loss
    (EvaluationDataPoint(loss=NAN), EvaluationDataPoint(loss=3.0, error=0.7), 0.7),  # then train error
    (None, EvaluationDataPoint(loss=3.0, error=INF), 3.0),  # then train loss
    (None, EvaluationDataPoint(loss=NAN, error=NAN), None),
])
def test_without_a_named_monitor_the_signal_is_the_first_finite_fallback(val, train, expected):
    monitor = Monitor(None)
    decided = monitor.decide(0, idp(0, val=val, train=train))
    assert decided.value == expected and monitor.label == "fallback" and monitor.mode == "min"
    assert decided.improved is (expected is not None) and decided.epoch == 0


def test_the_fallback_monitor_has_no_min_delta():
    monitor = Monitor(None)
    assert [monitor.decide(e, idp(e, val=EvaluationDataPoint(error=v))).improved for e, v in enumerate([0.5, 0.45, 0.45])] == [
        True, True, False]
    assert monitor.component_state()["min_delta"] == 0.0


def test_the_fallback_prefers_the_whole_epoch_summary_to_the_last_batch():
    rec = idp(0, train=EvaluationDataPoint(loss=9.0, error=0.9), summary=EvaluationDataPoint(loss=1.0, error=0.1))
    assert Monitor(None).read(rec) == 0.1


def test_a_declared_metric_wins_over_a_built_in_field_of_the_same_name():
    edp = EvaluationDataPoint(accuracy=0.5, metrics={"accuracy": 0.75})
    assert Monitor(MonitorSpec("accuracy", mode="max")).read(idp(0, val=edp)) == 0.75
    assert Monitor(MonitorSpec("accuracy", mode="max")).read(idp(0, val=EvaluationDataPoint(accuracy=0.5))) == 0.5


def test_the_default_direction_comes_from_the_metric_unless_the_spec_sets_one():
    assert Monitor(MonitorSpec("f1"), mode="max").mode == "max"
    assert Monitor(MonitorSpec("f1", mode="min"), mode="max").mode == "min"
    assert Monitor(None, mode="max").mode == "min"  # the fallback signal is an error or a loss


def test_the_record_names_the_monitor_and_the_decision():
    monitor = Monitor(MonitorSpec("nll", split="train", min_delta=0.5))
    record = monitor.record(monitor.decide(0, idp(0, summary=EvaluationDataPoint(metrics={"nll": 1.5}))))
    assert (record.metric, record.split, record.mode, record.value, record.status, record.improved, record.best) == (
        "nll", "train", "min", 1.5, "ok", True, 1.5)
    fallback = Monitor(None)
    assert fallback.record(fallback.decide(0, idp(0))).metric == "fallback"


def test_the_best_value_survives_a_stateful_resume_as_component_nnx_monitor():
    values = [0.8, 0.7, 0.695, 0.71, 0.6, 0.65]
    whole = decisions(Monitor(MonitorSpec("nll", min_delta=0.01)), values)
    first = Monitor(MonitorSpec("nll", min_delta=0.01))
    assert first.component_state() == {"label": "val.nll", "mode": "min", "min_delta": 0.01, "best": None, "best_epoch": None}
    head = decisions(first, values[:3])
    assert first.component_spec() == ("nnx.monitor", 1)
    resumed = Monitor(MonitorSpec("nll", min_delta=0.01))
    assert resumed.check_component_state(first.component_state()) == []
    resumed.load_component_state(first.component_state())
    assert (resumed.best, resumed.best_epoch) == (0.7, 1)
    tail = [resumed.decide(e, idp(e, val=EvaluationDataPoint(metrics={"nll": v}))).improved for e, v in enumerate(values) if e >= 3]
    assert head + tail == whole == [True, True, False, False, True, False]
    assert (resumed.best, resumed.best_epoch) == (0.6, 4)


@pytest.mark.parametrize("other", [
    MonitorSpec("loss", min_delta=0.01),  # another metric
    MonitorSpec("nll", split="train", min_delta=0.01),  # another split
    MonitorSpec("nll", mode="max", min_delta=0.01),  # another direction
    MonitorSpec("nll", min_delta=0.02),  # another min_delta
])
def test_a_resume_with_another_monitor_is_refused_with_the_way_out(other):
    saved = Monitor(MonitorSpec("nll", min_delta=0.01))
    decisions(saved, [0.5])
    problems = Monitor(other).check_component_state(saved.component_state())
    assert len(problems) == 1 and "nnx.monitor" in problems[0] and "weights_only" in problems[0]
    assert "monitor is val.nll (min, min_delta=0.01)" in problems[0]  # what the checkpoint was monitoring


def test_a_saved_state_without_min_delta_is_read_as_this_runs_min_delta():
    """A state from before ``min_delta`` was recorded restores into a monitor of the same metric."""
    state = Monitor(MonitorSpec("nll", min_delta=0.01)).component_state()
    del state["min_delta"]
    assert Monitor(MonitorSpec("nll", min_delta=0.01)).check_component_state(state) == []


@pytest.mark.parametrize("kwargs", [
    {"split": "test"}, {"mode": "up"}, {"min_delta": -0.1}, {"on_missing": "ignore"}, {"on_nonfinite": "warn"}, {"metric": ""},
])
def test_a_bad_spec_is_refused_naming_the_field(kwargs):
    with pytest.raises(ParamsError) as info:
        MonitorSpec(**kwargs)
    assert info.value.path == f"MonitorSpec.{next(iter(kwargs))}"


def test_the_fallback_monitor_says_which_non_finite_values_it_passes_over():
    monitor = Monitor(None)
    with pytest.warns(RuntimeWarning, match=r"epoch 0: ignoring non-finite metric\(s\) val_edp.error=nan .*using val_edp.loss=1.0"):
        decided = monitor.decide(0, idp(0, val=EvaluationDataPoint(loss=1.0, error=math.nan)))
    assert decided.value == 1.0 and decided.improved
