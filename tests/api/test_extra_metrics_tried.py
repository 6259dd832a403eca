"""``extra_metrics`` functions are tried once on the first batch's real outputs before anything
is written: one that raises is an ``ExtraMetricError`` naming the metric, the library's own error
kept as the cause. A ``ValueError`` on a first batch of one class only is left to the whole pass
(ROC AUC is undefined there, not wrong). Oracle: scikit-learn on the same predictions."""

from __future__ import annotations

import pytest
import sklearn.metrics as skm
import torch
from torch.utils.data import DataLoader, TensorDataset

import nnx_api as nnx

X, Y = torch.randn(48, 4, generator=torch.Generator().manual_seed(0)), torch.arange(48) % 3
SHUFFLED = DataLoader(TensorDataset(X, Y), batch_size=16)
SORTED = DataLoader(TensorDataset(X, Y.sort().values), batch_size=16)  # each batch holds one class


def fit(root, fns, val=SHUFFLED):
    model = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3), nnx.NNModelParams())
    params = nnx.NNTrainParams(n_epochs=1, seed=0, train_loader=SHUFFLED, val_loader=val, extra_metrics=fns, progress=False)
    return model, model.train(params, root=root)


@pytest.mark.parametrize(
    ("fns", "cause", "said"),
    [
        ({"f1": skm.f1_score}, ValueError, r"extra_metrics\['f1'\] raised ValueError: Target is multiclass but average='binary'"),
        ({"acc": lambda y_true: 1.0}, TypeError, r"extra_metrics\['acc'\] raised TypeError: .*positional argument"),
        ({"mean": lambda t, p: p.mean(axis=1)}, Exception, r"extra_metrics\['mean'\] raised AxisError"),
    ],
    ids=["library-refuses-the-data", "wrong-arity", "raises-in-the-function"],
)
def test_a_function_that_raises_on_the_first_batch_is_refused_before_anything_is_written(tmp_path, fns, cause, said):
    with pytest.raises(nnx.ExtraMetricError, match=said + r".*y_true int64 of shape \[16\].*before training") as caught:
        fit(tmp_path, fns)
    assert isinstance(caught.value.__cause__, cause)
    assert not tmp_path.exists() or not any(tmp_path.iterdir())


def strict_auc(y_true, y_pred):
    """ROC AUC of class 0 that raises on one class, as scikit-learn did before 1.6."""
    if len(set(y_true.tolist())) < 2:
        raise ValueError("Only one class present in y_true. ROC AUC score is not defined in that case.")
    return skm.roc_auc_score(y_true == 0, y_pred == 0)


def test_a_first_batch_of_one_class_leaves_a_value_error_to_the_whole_pass(tmp_path):
    model, run = fit(tmp_path, {"auc": strict_auc}, val=SORTED)
    with torch.no_grad():
        predicted = model.net(X).argmax(1)
    assert run.epochs[0].val_edp.extra["auc"] == pytest.approx(skm.roc_auc_score(Y.sort().values == 0, predicted == 0))


def test_a_function_that_raises_only_on_the_whole_pass_is_named_with_its_cause(tmp_path):
    def only_small(t, p):
        if len(t) > 16:
            raise ValueError("too many rows")
        return 0.0

    with pytest.raises(nnx.ExtraMetricError, match=r"extra_metrics\['small'\] raised ValueError: too many rows") as caught:
        fit(tmp_path, {"small": only_small})
    assert str(caught.value.__cause__) == "too many rows"
