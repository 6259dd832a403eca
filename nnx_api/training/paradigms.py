"""Built-in paradigm step factories: ``TrainStepFn``s for ``NNModel.train(train_step_fn=...)``.

``kd_train_step_factory(teacher, alpha=0.5, temperature=4.0)`` is knowledge distillation as a
step function (the objective form, with exact accumulation and reduced precision, is
``kd_objective``)::

    loss = α · KL(softmax(t/T) ‖ softmax(s/T)) · T²  (mean over rows)  +  (1 − α) · task loss

The teacher is frozen (``requires_grad=False``) and put in eval mode when the factory is called.
The step goes through ``finalize_step``: full precision only, no gradient accumulation, the loss
checked finite before backward, clipped, stepped and reported as one update.
"""

from __future__ import annotations

from typing import Any

import torch

from nnx_core.errors import ParamsError
from nnx_core.records import EvaluationDataPoint
from nnx_adapters.pytorch.batches import forward, split_batch, to_device
from nnx_adapters.pytorch.extras import ExtraMetrics
from nnx_api.training.objectives import KDObjective, full_precision_only, softened_kl
from nnx_api.training.steps import TrainStepContext, TrainStepFn, finalize_step


def kd_train_step_factory(teacher: Any, *, alpha: float = 0.5, temperature: float = 4.0) -> TrainStepFn:
    """A distillation ``train_step_fn`` (module docstring). ``teacher``: an ``NNModel`` (or module)
    whose logits have the student's shape; ``alpha`` ∈ [0, 1] weighs the soft term (``1.0``: pure
    distillation, ``0.0``: plain supervised training); ``temperature`` > 0 softens both sides.
    The returned record holds the batch's loss, accuracy and error, and ``extra_metrics``."""
    kd = KDObjective(teacher, alpha, temperature)  # checks alpha and temperature; freezes the teacher
    net = kd.teacher
    device = next(net.parameters()).device

    def step(ctx: TrainStepContext) -> EvaluationDataPoint:
        model = ctx.model
        task = model.task_adapter
        if not task.categorical:
            raise ParamsError("kd_train_step_factory", f"distillation needs a categorical task, not {task.kind!r}")
        model.net.train()
        model.net.zero_grad()
        inputs, target = split_batch(ctx.batch)
        inputs, target = to_device(inputs, model.device), to_device(target, model.device)
        with torch.no_grad():
            soft = forward(net, to_device(inputs, device)).to(model.device)
        output = forward(model.net, inputs)
        task.check(output, target)
        rows = output.numel() // output.shape[-1]
        supervised, count = task.sum_terms(output, target)
        soft_term = softened_kl(output, soft, kd.temperature) / rows
        loss = kd.alpha * soft_term + (1.0 - kd.alpha) * supervised / max(count, 1)
        value = finalize_step(loss, ctx, paradigm="distillation")
        correct, _ = task.correct(output.detach(), target)
        accuracy = float(correct) / count if count else None
        extra: dict[str, float] = {}
        if ctx.extra_metrics:
            extras = ExtraMetrics(task, ctx.extra_metrics)
            extras.add(output, target)
            extra = extras.values(extras.whole())
        return EvaluationDataPoint(
            loss=value, accuracy=accuracy, error=None if accuracy is None else 1.0 - accuracy, count=count, extra=extra
        )

    return full_precision_only(step)


__all__ = ["kd_train_step_factory"]
