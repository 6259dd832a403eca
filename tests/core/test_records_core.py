"""Records (``nnx_core.records``) without torch. Oracles: the docstrings' rules and hand-computed
scores (scikit-learn's definitions: per-class precision tp/(tp+fp), recall tp/(tp+fn), f1 their
harmonic mean, averaged per class for macro, by support for weighted, pooled for micro)."""

from __future__ import annotations

import pytest

from nnx_core.errors import ParamsError
from nnx_core.monitor import fallback_signal, first_finite
from nnx_core.monitor_spec import MonitorSpec
from nnx_core.records import EvaluationDataPoint, IterationDataPoint, MonitorRecord

EDP = EvaluationDataPoint
Y, Y_HAT = [0, 1, 1, 2], [0, 1, 2, 2]  # class 0: p 1 r 1; class 1: p 1 r 1/2; class 2: p 1/2 r 1


def test_unset_fields_are_left_out_of_the_state_and_default_to_none():
    """A record's own ``state()`` writes loss and error always (None while unset), as NNx does;
    every other unset field is left out, and so are loss and error of a record nested in an
    iteration's state (the saved layout of idps.csv, the journal and checkpoints)."""
    assert EDP().state() == {"loss": None, "error": None} and EDP().loss is None and EDP().kind is None
    assert EDP(loss=1.0, count=3).state() == {"loss": 1.0, "error": None, "count": 3}
    assert EDP(kind="regression").state() == {"loss": None, "error": None, "kind": "regression"}
    row = IterationDataPoint(iter_idx=0, epoch_idx=0, batch_idx=0, lr=0.1, train_edp=EDP(loss=1.0))
    assert row.state() == {"iter_idx": 0, "epoch_idx": 0, "batch_idx": 0, "lr": 0.1, "train_edp": {"loss": 1.0}}
    assert EDP.from_state(EDP(accuracy=0.5).state()) == EDP(accuracy=0.5)


def test_state_and_mean_of_write_loss_and_error_as_none_as_nnx_does():
    """NNx 0.4.1: ``NNEvaluationDataPoint.of(...).state()`` holds ``loss: None, error: None``, and
    so does the state of ``mean_of`` over records without them."""
    scored = EDP.of([0, 1, 1], [0, 1, 2])
    assert list(scored.state())[:2] == ["loss", "error"] and scored.state()["loss"] is None
    mean = EDP.mean_of([scored, EDP.of([0], [0])]).state()
    assert (mean["loss"], mean["error"], mean["accuracy"]) == (None, None, pytest.approx(5 / 6))
    assert scored.with_loss(0.5).with_error(0.25).state()["error"] == 0.25


def test_get_reads_a_field_then_a_named_metric_then_an_extra():
    edp = EDP(loss=1.0, metrics={"top5": 0.5}, extra={"auc": 0.25})
    assert (edp.get("loss"), edp.get("error"), edp.get("top5"), edp.get("auc"), edp.get("nope")) == (1.0, None, 0.5, 0.25, None)


def test_the_with_methods_copy_with_one_field_set():
    edp = EDP(loss=1.0, extra={"a": 1.0})
    assert edp.with_loss(2.0) == EDP(loss=2.0, extra={"a": 1.0})
    assert edp.with_error(0.5) == EDP(loss=1.0, error=0.5, extra={"a": 1.0})
    assert edp.with_extra("b", 2) == EDP(loss=1.0, extra={"a": 1.0, "b": 2.0})
    assert edp.with_extra("a", 3) == EDP(loss=1.0, extra={"a": 3.0})
    assert edp == EDP(loss=1.0, extra={"a": 1.0})  # the original is unchanged
    row = IterationDataPoint(iter_idx=0, epoch_idx=0, batch_idx=0, lr=0.1, train_edp=edp)
    assert row.with_val_edp(EDP(error=0.5)).val_edp == EDP(error=0.5) and row.val_edp is None


@pytest.mark.parametrize(("average", "expected"), [
    ("macro", {"accuracy": 0.75, "precision": 2.5 / 3, "recall": 2.5 / 3, "f1": (1 + 2 / 3 + 2 / 3) / 3}),
    ("micro", {"accuracy": 0.75, "precision": 0.75, "recall": 0.75, "f1": 0.75}),
    ("weighted", {"accuracy": 0.75, "precision": (1 + 2 + 0.5) / 4, "recall": 0.75, "f1": (1 + 4 / 3 + 2 / 3) / 4}),
])
def test_of_scores_labels_as_scikit_learn_does(average, expected):
    edp = EDP.of(Y, Y_HAT, average=average)
    assert {k: edp.get(k) for k in expected} == pytest.approx(expected, rel=1e-12)
    assert edp.loss is None and edp.error is None


def test_of_defaults_to_macro_and_scores_the_positive_class_for_binary():
    assert EDP.of(Y, Y_HAT) == EDP.of(Y, Y_HAT, average="macro")
    binary = EDP.of([0, 1, 1, 0], [1, 1, 0, 0], average="binary")  # positive class: tp 1, fp 1, fn 1
    assert (binary.accuracy, binary.precision, binary.recall, binary.f1) == (0.5, 0.5, 0.5, 0.5)
    assert EDP.of([1, 1], [1, 1], average="binary").f1 == 1.0  # only the positive class present


def test_of_takes_anything_with_tolist_and_calls_extra_metrics_on_the_arguments_as_given():
    class Labels:  # a tensor-like: not iterable, only tolist()
        def __init__(self, values):
            self.values = values

        def tolist(self):
            return self.values

    y, y_hat = Labels(Y), Labels(Y_HAT)
    seen = []
    edp = EDP.of(y, y_hat, extra_metrics={"calls": lambda a, b: seen.append((a, b)) or 3})
    assert edp.accuracy == 0.75 and edp.extra == {"calls": 3.0} and seen == [(y, y_hat)]


def test_of_refuses_bad_labels_naming_the_argument():
    with pytest.raises(ParamsError, match="^average: 'binary' needs 0/1 labels; use 'macro', 'micro' or 'weighted'$"):
        EDP.of([0, 2], [0, 1], average="binary")
    with pytest.raises(ParamsError, match="^Y: is empty: there is nothing to score$"):
        EDP.of([], [])

    class Scalar:
        def tolist(self):
            return 3

    for args, name in (((Scalar(), [1]), "Y"), (([1], Scalar()), "Y_hat")):
        with pytest.raises(ParamsError, match=f"^{name}: must be a 1-d sequence of labels, got a scalar$"):
            EDP.of(*args)


def test_mean_of_averages_each_field_over_the_records_that_carry_it():
    mean = EDP.mean_of([EDP(loss=1.0, error=0.5, extra={"a": 1.0}), EDP(loss=3.0, metrics={"m": 2.0}),
                        EDP(loss=5.0, extra={"a": 3.0, "b": 4.0})])
    assert mean == EDP(loss=3.0, error=0.5, extra={"a": 2.0, "b": 4.0}, metrics={"m": 2.0})
    with pytest.raises(ParamsError, match="^edps: mean_of needs at least one record$"):
        EDP.mean_of([])


def test_the_fallback_signal_is_the_first_finite_of_val_error_val_loss_train_error_train_loss():
    nan = float("nan")

    def row(train, val=None, summary=None):
        return IterationDataPoint(iter_idx=0, epoch_idx=0, batch_idx=0, lr=0.1, train_edp=train, val_edp=val,
                                  train_summary=summary)

    assert fallback_signal(None) is None
    assert fallback_signal(row(EDP(loss=4.0, error=3.0), EDP(loss=2.0, error=1.0))) == 1.0
    assert fallback_signal(row(EDP(loss=4.0, error=3.0), EDP(loss=2.0, error=nan))) == 2.0
    assert fallback_signal(row(EDP(loss=4.0, error=3.0), EDP(loss=float("inf")))) == 3.0
    assert fallback_signal(row(EDP(loss=4.0))) == 4.0
    assert fallback_signal(row(EDP(loss=4.0), summary=EDP(loss=5.0))) == 5.0  # the whole-epoch summary wins
    assert first_finite(None, nan) is None


def test_a_monitor_record_keeps_every_field_in_its_state():
    record = MonitorRecord(metric="loss", split="val", mode="min", status="ok", improved=True)
    assert record.state() == {"metric": "loss", "split": "val", "mode": "min", "value": None, "status": "ok",
                              "improved": True, "best": None}


def test_a_monitor_record_is_also_built_as_nnx_code_builds_it():
    # NNx's MonitorRecord(monitor, value, status, improved): the spec's metric, split and mode are what is kept
    spec = MonitorSpec(metric="nll", mode="min", min_delta=0.01, on_missing="error")
    record = MonitorRecord(spec, 0.7, "ok", True)
    assert record == MonitorRecord(metric="nll", split="val", mode="min", value=0.7, status="ok", improved=True)
    assert MonitorRecord.from_state(record.state()) == record and record.monitor.key == "val.nll"
    assert MonitorRecord(MonitorSpec("error"), None, "missing", False).mode == "min"  # the natural direction
    fallback = MonitorRecord(None, 2.0, "ok", False)  # no named monitor: the documented fallback signal
    assert (fallback.metric, fallback.split, fallback.mode, fallback.monitor) == ("fallback", "fallback", "min", None)
    with pytest.raises(ParamsError, match=r"MonitorRecord.monitor: give the monitor or its metric"):
        MonitorRecord(spec, 0.7, "ok", True, metric="nll")
    with pytest.raises(ParamsError, match=r"MonitorRecord.monitor: 'val.f1' has no mode"):
        MonitorRecord(MonitorSpec("f1"), 0.7, "ok", True)
    with pytest.raises(ParamsError, match=r"MonitorRecord.monitor: must be a MonitorSpec or None"):
        MonitorRecord("val.nll", 0.7, "ok", True)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="needs improved"):
        MonitorRecord(spec, 0.7, "ok")


@pytest.mark.parametrize(("fields", "why"), [
    ({"count": 3, "status": "ok"}, "need a kind"),
    ({"kind": "regression", "count": 0, "status": "ok"}, "status must be 'empty' for count=0"),
    ({"kind": "regression", "count": 3, "status": "empty"}, "status must be 'ok' for count=3"),
    ({"kind": "regression", "count": -1}, "non-negative integer"),
    ({"count": True}, "non-negative integer"),
])
def test_a_task_records_status_and_count_are_checked_as_nnx_checks_them(fields, why):
    """NNx 0.4.1's NNEvaluationDataPoint refuses these (ValueError; ParamsError is one)."""
    with pytest.raises(ParamsError, match=why):
        EvaluationDataPoint(**fields)


def test_consistent_task_records_and_records_without_a_status_are_accepted():
    assert EvaluationDataPoint(kind="regression", count=3.0, status="ok").count == 3  # a CSV's float
    assert EvaluationDataPoint(kind="regression", count=0, status="empty").state()["status"] == "empty"
    assert EvaluationDataPoint(count=4).status is None  # this implementation's records carry none
