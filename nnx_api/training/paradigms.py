"""The shared tail of built-in paradigm steps (distillation variants, mixup, GAN halves, ...).

``finalize_step(loss, ctx, paradigm=...)`` is what such a step calls after computing its loss:

    refuse accumulation (the step updates every batch) and reduced precision (no loss scaling)
    → finite check of the loss, BEFORE backward (a diverged loss never reaches the parameters)
    → backward → clip by the optimizer's grad_clip_norm → optimizer.step() → ctx.report_update()

The caller zeroes the gradients before its forward. An update reported here is reported once:
never call ``ctx.report_update()`` again for it. With a ``Trainer`` step, name the optimizer:
``finalize_step(loss, ctx, paradigm="gan", optimizer="disc")``.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from nnx_core.errors import NonFiniteLossError, ParamsError, PrecisionUnsupportedError


def finalize_step(loss: torch.Tensor, ctx: Any, *, paradigm: str, optimizer: str | None = None) -> float:
    """Check, back-propagate, clip, step and report one update; return the loss as a float."""
    if not isinstance(paradigm, str) or not paradigm.strip():
        raise ParamsError("finalize_step.paradigm", "name the paradigm (used in error messages), e.g. 'mixup'")
    if hasattr(ctx, "optimizers"):  # a Trainer step: one named optimizer
        if optimizer is None or optimizer not in ctx.optimizers:
            raise ParamsError(
                f"{paradigm}: finalize_step.optimizer",
                f"a Trainer step must name one of its optimizers {sorted(ctx.optimizers)}, got {optimizer!r}",
            )
        opt = ctx.optimizers[optimizer]
        clip = ctx.grad_clip_norms[optimizer]
        accumulate = ctx.accumulate_grad_batches[optimizer]

        def report() -> None:
            ctx.report_update(optimizer)
    else:
        if optimizer is not None:
            raise ParamsError(f"{paradigm}: finalize_step.optimizer", "an NNModel step has one optimizer; leave it out")
        opt, clip, accumulate, report = ctx.optimizer, ctx.grad_clip_norm, ctx.accumulate_grad_batches, ctx.report_update
    if accumulate != 1:
        raise ParamsError(
            f"{paradigm}: accumulate_grad_batches",
            f"finalize_step updates on every batch and cannot accumulate gradients (got {accumulate}); "
            "set accumulate_grad_batches=1, or express the loss as an objective, which accumulates exactly",
        )
    precision = getattr(ctx, "precision", None)
    if precision not in (None, "fp32"):
        raise PrecisionUnsupportedError(
            f"{paradigm} steps are full-precision only (finalize_step does no loss scaling), but the run resolves to "
            f"{precision}; use PrecisionPolicy('fp32') or an objective"
        )
    value = float(loss.detach())
    if not math.isfinite(value):
        raise NonFiniteLossError(
            f"{paradigm}: the loss is {value}; no parameter was updated. Lower the learning rate or check the inputs"
        )
    loss.backward()
    if clip is not None:
        params = [p for group in opt.param_groups for p in group["params"] if p.grad is not None]
        torch.nn.utils.clip_grad_norm_(params, clip)
    opt.step()
    report()
    return value


__all__ = ["finalize_step"]
