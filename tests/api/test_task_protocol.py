"""A task adapter's public per-batch protocol, as NNx 0.4.1 offers it: ``prepare(output, target)``
gives ``(output, target, valid)``, ``loss_terms(loss_fn, output, target, valid)`` gives ``(display
loss, additive numerator, normalisation weight)`` over the valid targets only, and
``record(..., extra_metrics=)`` scores the valid targets only; an objective run's records carry
the declared task's kind, as the default step's do.

Oracles: plain torch (the loss module on the valid rows, or its ``reduction="none"`` form with
the masked elements dropped by hand), hand-picked valid targets, and the default step's records.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from nnx_core.records import EvaluationDataPoint
from nnx_adapters.collective.local import LocalCollective
from nnx_adapters.pytorch.scaling import ScaledLoss
import nnx_api as nnx
from nnx_api.distributed.steps import joined_record

NAN = math.nan


def test_prepare_flattens_class_rows_and_masks_ignored_targets():
    adapter = nnx.task_adapter(nnx.TaskSpec.categorical(3))
    logits = torch.randn(2, 2, 3)
    target = torch.tensor([[0, -100], [2, 1]])
    rows, flat, valid = adapter.prepare(logits, target)
    assert torch.equal(rows, logits.reshape(4, 3)) and torch.equal(flat, torch.tensor([0, -100, 2, 1]))
    assert valid.tolist() == [True, False, True, True]
    with pytest.raises(nnx.TaskValidationError, match=r"in \[0, 3\)"):
        adapter.prepare(logits, torch.tensor([[0, 3], [2, 1]]))


def test_prepare_casts_integer_labels_and_keeps_a_regression_targets_dtype():
    labels = nnx.task_adapter(nnx.TaskSpec.multilabel(2))
    _, target, valid = labels.prepare(torch.zeros(2, 2, dtype=torch.float64), torch.tensor([[1, 0], [0, 1]]))
    assert target.dtype == torch.float64 and bool(valid.all())
    regression = nnx.task_adapter(nnx.TaskSpec.regression(1))
    _, target, _ = regression.prepare(torch.zeros(2, 1, dtype=torch.bfloat16), torch.tensor([[1000.1], [2.0]]))
    assert target.dtype == torch.float32 and target[0, 0].item() == pytest.approx(1000.1, rel=1e-7)
    with pytest.raises(nnx.TaskValidationError, match="finite"):
        regression.prepare(torch.zeros(2, 1), torch.tensor([[math.inf], [2.0]]))


def test_masked_class_rows_are_left_out_of_a_weighted_cross_entropy():
    adapter = nnx.task_adapter(nnx.TaskSpec.categorical(3))
    loss_fn = torch.nn.CrossEntropyLoss(weight=torch.tensor([1.0, 2.0, 0.5]))
    logits = torch.randn(5, 3)
    target = torch.tensor([0, -100, 2, 1, -100])
    display, numerator, weight = adapter.loss_terms(loss_fn, *adapter.prepare(logits, target))
    keep = target != -100
    expected = F.cross_entropy(logits[keep], target[keep], weight=loss_fn.weight)
    assert weight == pytest.approx(1.0 + 0.5 + 2.0)
    assert float(display) == pytest.approx(float(expected))
    assert float(numerator) == pytest.approx(float(expected) * 3.5)


def test_masked_labels_keep_pos_weight_and_get_no_gradient():
    adapter = nnx.task_adapter(nnx.TaskSpec.multilabel(3))
    loss_fn = torch.nn.BCEWithLogitsLoss(pos_weight=torch.tensor([1.0, 3.0, 0.5]))
    logits = torch.randn(3, 3, requires_grad=True)
    target = torch.tensor([[1.0, NAN, 0.0], [0.0, 1.0, 1.0], [NAN, 1.0, NAN]])
    display, numerator, weight = adapter.loss_terms(loss_fn, *adapter.prepare(logits, target))
    valid = ~torch.isnan(target)
    per_label = F.binary_cross_entropy_with_logits(
        logits.detach(), torch.nan_to_num(target), pos_weight=loss_fn.pos_weight, reduction="none"
    )
    assert weight == 6.0
    assert float(numerator.detach()) == pytest.approx(float(per_label[valid].sum()))
    assert float(display.detach()) == pytest.approx(float(per_label[valid].mean()))
    numerator.backward()
    assert torch.all(logits.grad[~valid] == 0) and torch.all(logits.grad[valid] != 0)
    assert loss_fn.reduction == "mean"  # the user's module is left as it was


def test_a_summed_regression_loss_has_no_weight_and_a_plain_loss_cannot_be_masked():
    adapter = nnx.task_adapter(nnx.TaskSpec.regression(2))
    output = torch.tensor([[1.0, 3.0], [5.0, 7.0]])
    target = torch.tensor([[0.0, NAN], [4.0, 5.0]])
    display, numerator, weight = adapter.loss_terms(torch.nn.MSELoss(reduction="sum"), *adapter.prepare(output, target))
    assert weight is None and float(display) == float(numerator) == 1.0 + 1.0 + 4.0
    with pytest.raises(nnx.TaskValidationError, match="cannot be masked"):
        adapter.loss_terms(lambda o, t: (o - t).abs().max(), *adapter.prepare(output, target))
    complete = torch.tensor([[0.0, 1.0], [4.0, 5.0]])
    display, numerator, weight = adapter.loss_terms(lambda o, t: (o - t).abs().max(), *adapter.prepare(output, complete))
    assert float(display) == 2.0 and weight == 2.0 and float(numerator) == 4.0  # a plain function's mean is per row


def test_a_fully_masked_batch_shows_nan_and_adds_a_zero_that_back_propagates():
    adapter = nnx.task_adapter(nnx.TaskSpec.regression(1))
    output = torch.randn(2, 1, requires_grad=True)
    display, numerator, weight = adapter.loss_terms(torch.nn.MSELoss(), *adapter.prepare(output, torch.full((2, 1), NAN)))
    assert math.isnan(float(display.detach())) and float(numerator.detach()) == 0.0 and weight == 0.0
    numerator.backward()
    assert torch.equal(output.grad, torch.zeros(2, 1))


def test_extra_metrics_get_the_valid_targets_of_a_categorical_batch_only():
    seen = []

    def spy(y_true, y_pred):
        seen.append((y_true.tolist(), y_pred.tolist()))
        return 0.25

    adapter = nnx.task_adapter(nnx.TaskSpec.categorical(3))
    logits = torch.tensor([[5.0, 0.0, 0.0], [0.0, 5.0, 0.0], [0.0, 0.0, 5.0]])
    record = adapter.record(logits, torch.tensor([0, -100, 1]), loss=0.5, extra_metrics={"spy": spy})
    assert seen == [([0, 1], [0, 2])]
    assert record.extra == {"spy": 0.25} and record.count == 2 and record.accuracy == 0.5


def _train(tmp_path, task, objective):
    torch.manual_seed(0)
    model = nnx.NNModel(nnx.NNParams(input_dim=3, output_dim=2, hidden_dims=(4,)),
                        nnx.NNModelParams(loss=nnx.Losses.MEAN_SQUARED_ERROR, task=task))
    batches = [(torch.randn(4, 3), torch.randn(4, 2)) for _ in range(2)]
    params = nnx.NNTrainParams(n_epochs=1, train_loader=batches, progress=False)
    return model.train(params, objective=nnx.supervised_objective() if objective else None, root=tmp_path)


@pytest.mark.parametrize("objective", [False, True], ids=["default-step", "objective"])
def test_an_objective_runs_records_carry_the_declared_kind_as_the_default_steps_do(tmp_path, objective):
    assert _train(tmp_path / "task", nnx.TaskSpec.regression(2), objective).idps[0].train_edp.kind == "regression"
    assert _train(tmp_path / "none", None, objective).idps[0].train_edp.kind is None


def test_a_group_record_keeps_the_kind_of_its_ranks_records():
    record = EvaluationDataPoint(loss=0.5, accuracy=0.75, count=4, kind="categorical")
    joined = joined_record(LocalCollective(), record, None, "a batch")
    assert (joined.kind, joined.count, joined.loss, joined.accuracy) == ("categorical", 4, 0.5, 0.75)
    assert np.isclose(joined.error, 0.25)


def test_the_loss_scaler_still_scales_the_training_terms_beside_the_public_protocol():
    """fp16's ``ScaledLoss`` wraps the training loop's terms (``sum_terms``): their gradient is
    the unscaled one (2 (o - t) per element) times the scale; the public ``loss_terms`` is the
    task's own."""
    task = nnx.task_adapter(nnx.TaskSpec.regression(1))
    output = torch.zeros(2, 1, requires_grad=True)
    total, count = ScaledLoss(task, torch.amp.GradScaler("cpu", init_scale=8.0)).sum_terms(output, torch.ones(2, 1))
    total.backward()
    assert count == 2 and torch.equal(output.grad, torch.full((2, 1), -2.0 * 8.0))
