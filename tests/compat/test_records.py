"""NNx's record names and helpers (REFERENCE §8.1, §8.2, §4; §12.3 on ``mean_of``).

``NNEvaluationDataPoint.of(Y, Y_hat, average)`` scores labels as scikit-learn does
(accuracy_score; f1/precision/recall with ``zero_division=0``); the oracle here is scikit-learn
itself. ``mean_of`` is the documented unweighted mean. The names are the records training
produces (one class), and the step type aliases are exported.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from nnx_adapters.pytorch.metrics import Confusion
import nnx_api as nnx
from nnx_api.nn.params.nn_evaluation_data_point import NNEvaluationDataPoint
from nnx_api.nn.params.nn_iteration_data_point import NNIterationDataPoint

from tests.sklearn_oracle import sklearn_scores

EXAMPLES = 300 if os.environ.get("NNX_DEEP") == "1" else 40

labels = st.integers(min_value=1, max_value=60).flatmap(
    lambda n: st.tuples(
        st.lists(st.integers(0, 4), min_size=n, max_size=n), st.lists(st.integers(0, 4), min_size=n, max_size=n)
    )
)




@settings(max_examples=EXAMPLES, deadline=None)
@given(labels, st.sampled_from(["macro", "micro", "weighted"]))
def test_of_scores_labels_as_scikit_learn_does(pair, average):
    y, y_hat = pair
    edp = NNEvaluationDataPoint.of(np.array(y), np.array(y_hat), average=average)
    expected = sklearn_scores(y, y_hat, average)
    for name, value in expected.items():
        assert getattr(edp, name) == pytest.approx(value, abs=1e-12), name
    assert edp.loss is None and edp.error is None  # set by the caller (with_loss / with_error)


@settings(max_examples=EXAMPLES, deadline=None)
@given(labels)
def test_binary_average_scores_the_positive_class(pair):
    y, y_hat = ([v % 2 for v in part] for part in pair)
    edp = NNEvaluationDataPoint.of(torch.tensor(y), torch.tensor(y_hat), average="binary")
    for name, value in sklearn_scores(y, y_hat, "binary").items():
        assert getattr(edp, name) == pytest.approx(value, abs=1e-12), name


@settings(max_examples=EXAMPLES, deadline=None)
@given(labels, st.sampled_from(["macro", "micro", "weighted"]))
def test_the_epoch_confusion_matrix_reads_through_the_same_rule(pair, average):
    """The device-side Confusion of the training loop and ``of`` are one implementation."""
    y, y_hat = pair
    confusion = Confusion(5)
    confusion.update(torch.tensor(y), torch.tensor(y_hat))
    scores = confusion.scores(average)
    for name, value in sklearn_scores(y, y_hat, average).items():
        assert scores[name] == pytest.approx(value, abs=1e-12), name


def test_of_calls_extra_metrics_with_truth_first_on_the_arrays_given():
    seen = []

    def metric(y_true, y_pred):
        seen.append((type(y_true), list(y_true), list(y_pred)))
        return 0.5

    edp = NNEvaluationDataPoint.of(np.array([1, 0]), np.array([1, 1]), extra_metrics={"m": metric})
    assert edp.extra == {"m": 0.5}
    assert seen == [(np.ndarray, [1, 0], [1, 1])]


def test_of_refuses_what_it_cannot_score():
    with pytest.raises(nnx.ParamsError, match="binary"):
        NNEvaluationDataPoint.of([0, 1, 2], [0, 1, 2], average="binary")
    with pytest.raises(nnx.ParamsError, match="average"):
        NNEvaluationDataPoint.of([0, 1], [0, 1], average="samples")
    with pytest.raises(nnx.ParamsError):
        NNEvaluationDataPoint.of([0, 1], [0])
    with pytest.raises(nnx.ParamsError, match="empty"):
        NNEvaluationDataPoint.of([], [])


def test_with_helpers_return_new_records():
    edp = NNEvaluationDataPoint.of([0, 1], [0, 1])
    marked = edp.with_loss(0.25).with_error(0.0).with_extra("mae", 1).with_extra("mae", 2)
    assert (marked.loss, marked.error, marked.extra) == (0.25, 0.0, {"mae": 2.0})
    assert edp.loss is None and edp.extra == {}


def test_mean_of_is_the_unweighted_mean_per_field_and_extra_key():
    a = NNEvaluationDataPoint(accuracy=1.0, f1=1.0, precision=1.0, recall=1.0, loss=0.5, extra={"x": 1.0})
    b = NNEvaluationDataPoint(accuracy=0.0, f1=0.5, precision=0.0, recall=0.0, error=1.0, extra={"x": 3.0, "y": 2.0})
    mean = NNEvaluationDataPoint.mean_of([a, b])
    assert (mean.accuracy, mean.f1, mean.precision, mean.recall) == (0.5, 0.75, 0.5, 0.5)
    assert mean.loss == 0.5 and mean.error == 1.0  # over the records that carry them
    assert mean.extra == {"x": 2.0, "y": 2.0}  # a key missing on some records: over the others
    with pytest.raises(nnx.ParamsError):
        NNEvaluationDataPoint.mean_of([])


def test_iteration_records_helpers():
    train = NNEvaluationDataPoint(loss=1.0)
    summary = NNEvaluationDataPoint(loss=0.8)
    idp = NNIterationDataPoint(iter_idx=0, epoch_idx=0, batch_idx=0, lr=0.1, train_edp=train)
    assert idp.monitored_train_edp() is train
    with_val = idp.with_val_edp(NNEvaluationDataPoint(loss=0.5))
    assert with_val.val_edp.loss == 0.5 and idp.val_edp is None
    assert NNIterationDataPoint(iter_idx=0, epoch_idx=0, batch_idx=0, lr=0.1, train_edp=train,
                                train_summary=summary).monitored_train_edp() is summary


def test_training_produces_the_records_by_their_nnx_names(runs):
    x = torch.randn(24, 4, generator=torch.Generator().manual_seed(0))
    y = torch.randint(0, 3, (24,), generator=torch.Generator().manual_seed(1))
    model = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(5,)))
    run = model.train(
        nnx.NNTrainParams(n_epochs=1, train_loader=[(x[:12], y[:12]), (x[12:], y[12:])], val_loader=[(x, y)],
                          progress=False),
        root=runs,
    )
    last = run.idps[-1]
    assert isinstance(last, NNIterationDataPoint) and isinstance(last.train_edp, NNEvaluationDataPoint)
    assert isinstance(last.val_edp, nnx.NNEvaluationDataPoint)
    assert isinstance(nnx.NNRun.load(run.id, runs).idps[-1], NNIterationDataPoint)
    assert isinstance(model.evaluate([(x, y)]), NNEvaluationDataPoint)


def _regression_model(seed=0):
    torch.manual_seed(seed)
    return nnx.NNModel(
        nnx.NNParams(input_dim=4, output_dim=2, hidden_dims=(8,), dropout_prob=0.0),
        nnx.NNModelParams(loss=nnx.Losses.MEAN_SQUARED_ERROR, task=nnx.TaskSpec.regression(2)),
    )


def test_records_carry_the_task_kind_and_a_regression_s_mse_and_mae(runs):
    """REFERENCE §8.1 / §8.3 (NNx 0.4.1, s17): a record's ``kind`` is the declared task's kind;
    regression records hold ``metrics.mse`` / ``metrics.mae`` with the classification fields and
    ``error`` None; ``count`` is the elements scored. The oracle is NumPy on ``predict``'s outputs."""
    g = torch.Generator().manual_seed(5)
    x, y = torch.randn(8, 4, generator=g), torch.randn(8, 2, generator=g)
    model = _regression_model()
    before = model.predict(x).logits  # the weights the first batch's record is computed with
    run = model.train(nnx.NNTrainParams(n_epochs=1, optim=nnx.NNOptimParams(name=nnx.Optims.SGD, max_lr=0.1, momentum=0.0),
                                        train_loader=[(x[:4], y[:4]), (x[4:], y[4:])], val_loader=[(x, y)],
                                        progress=False), root=runs)
    first, last = run.idps[0].train_edp, run.idps[-1]
    diff = before[:4].astype(np.float64) - y[:4].numpy()
    assert first.kind == "regression" and first.count == 8 and first.error is None and first.accuracy is None
    assert first.metrics["mse"] == pytest.approx(float(np.mean(diff**2)), rel=1e-5)
    assert first.metrics["mae"] == pytest.approx(float(np.mean(np.abs(diff))), rel=1e-5)
    assert first.metrics["mse"] == pytest.approx(first.loss, rel=1e-5)  # the MSE loss is the mse
    after = model.predict(x).logits.astype(np.float64) - y.numpy()
    val = last.val_edp
    assert (val.kind, val.count, val.error) == ("regression", 16, None)
    assert val.metrics["mse"] == pytest.approx(float(np.mean(after**2)), rel=1e-5)
    assert val.metrics["mae"] == pytest.approx(float(np.mean(np.abs(after))), rel=1e-5)
    scored = model.evaluate([(x[:3], y[:3]), (x[3:], y[3:])])
    assert scored.kind == "regression" and scored.count == 16 and scored.metrics == pytest.approx(dict(val.metrics))
    loaded = nnx.NNRun.load(run.id, runs)  # the kind and the metrics survive idps.csv
    assert loaded.idps == run.idps and loaded.idps[-1].val_edp.kind == "regression"


def test_without_a_task_spec_kind_is_none_and_evaluate_leaves_count_none(runs):
    """NNx 0.4.1 (s14): records of a model without a TaskSpec have ``kind`` None, and
    ``evaluate()`` leaves ``count`` None; with a TaskSpec both are set."""
    x = torch.randn(10, 4, generator=torch.Generator().manual_seed(0))
    y = torch.randint(0, 3, (10,), generator=torch.Generator().manual_seed(1))
    plain = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(5,)))
    scored = plain.evaluate([(x[:8], y[:8]), (x[8:], y[8:])])
    assert (scored.kind, scored.count) == (None, None) and scored.accuracy is not None
    run = plain.train(nnx.NNTrainParams(n_epochs=1, train_loader=[(x, y)], val_loader=[(x, y)], progress=False),
                      root=runs)
    assert run.idps[-1].train_edp.kind is None and run.idps[-1].val_edp.kind is None
    tasked = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(5,)),
                         nnx.NNModelParams(task=nnx.TaskSpec.categorical(3)))
    scored = tasked.evaluate([(x, y)])
    assert (scored.kind, scored.count) == ("categorical", 10) and scored.metrics == {}
    run = tasked.train(nnx.NNTrainParams(n_epochs=1, train_loader=[(x, y)], val_loader=[(x, y)], progress=False),
                       root=runs)
    assert run.idps[-1].train_edp.kind == run.idps[-1].val_edp.kind == "categorical"
    assert nnx.NNRun.load(run.id, runs).idps == run.idps


def test_step_function_type_aliases_are_exported():
    from nnx_api.nn.nn_model import EvalStepFn, TrainStepFn

    assert TrainStepFn is nnx.TrainStepFn and EvalStepFn is nnx.EvalStepFn
    assert nnx.TrainerStepFn.__args__[-1] is nnx.NNEvaluationDataPoint  # Callable[[ctx], record]
