"""``nnx.optimizers``: building the optimizer an ``NNOptimParams`` describes."""

from __future__ import annotations

import torch
from torch import nn

from nnx_core.errors import ParamsError
from nnx_api.config.params import NNOptimParams


def build_optimizer(net: nn.Module, params: NNOptimParams, *, strict_param_groups: bool = False) -> torch.optim.Optimizer:
    """The torch optimizer ``params`` describes over ``net`` (``params.name(...)``): its
    ``param_groups`` give matching parameters their own lr / decay; unmatched trainable ones join
    a default group, or with ``strict_param_groups=True`` (a ``Trainer``) are left out."""
    if not isinstance(params, NNOptimParams):
        raise ParamsError("build_optimizer.params", f"must be NNOptimParams, got {type(params).__name__}")
    return params.name(
        net, lr_start=params.max_lr, weight_decay=params.weight_decay, momentum=params.momentum,
        param_groups=params.param_groups, strict_param_groups=strict_param_groups, eps=params.eps,
    )


__all__ = ["build_optimizer"]
