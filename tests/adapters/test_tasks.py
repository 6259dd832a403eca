"""The task adapters keep the model's precision: half-precision outputs (autocast) are scored in
float32, float32 and float64 outputs in their own dtype — a float64 model's loss is not rounded to
float32 on the way."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from nnx_adapters.pytorch.tasks import TaskAdapter


@pytest.mark.parametrize(
    ("dtype", "scored_in"),
    [(torch.float16, torch.float32), (torch.bfloat16, torch.float32), (torch.float32, torch.float32), (torch.float64, torch.float64)],
)
def test_categorical_loss_is_computed_in_the_outputs_precision_or_float32_for_half(dtype, scored_in):
    logits = torch.tensor([[0.1, 2.0, -1.0], [1.0, 0.0, 0.3]], dtype=dtype)
    target = torch.tensor([1, 2])
    total, n = TaskAdapter("categorical", "cross_entropy").sum_terms(logits, target)
    assert total.dtype == scored_in and n == 2
    assert total.item() == F.cross_entropy(logits.to(scored_in), target, reduction="sum").item()
    assert TaskAdapter("categorical", "cross_entropy").probabilities(logits).dtype == scored_in


def test_a_float64_regression_keeps_float64_digits():
    out = torch.tensor([1.0 + 1e-12, 2.0], dtype=torch.float64)
    target = torch.tensor([1.0, 2.0], dtype=torch.float64)
    total, _ = TaskAdapter("regression", "mse").sum_terms(out, target)
    assert total.dtype == torch.float64 and total.item() == pytest.approx(1e-24, rel=1e-3)  # float32 would give 0


@pytest.mark.parametrize("kind,loss", [("regression", "mse"), ("multilabel", "binary_cross_entropy")])
def test_float_targets_of_another_precision_follow_the_output(kind, loss):
    out = torch.tensor([[0.5, -0.5]], requires_grad=True)
    total, _ = TaskAdapter(kind, loss).sum_terms(out, torch.tensor([[1.0, 0.0]], dtype=torch.float64))
    total.backward()  # no dtype mismatch in backward
    assert total.dtype == torch.float32 and out.grad is not None
