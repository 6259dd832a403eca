"""``nnx.optimizers``: building the optimizer an ``NNOptimParams`` (or a registered
``NNOptimFactoryParams``) describes, and registering optimizer factories.

An optimizer this project does not ship is registered once per process under ``(id, version)``
and named by a spec that holds no code, so the run's configuration (and id) records which
optimizer it is and reloads without it::

    >>> import torch, nnx_api as nnx
    >>> nnx.register_optimizer_factory(
    ...     "demo.rmsprop", 1, lambda groups, config: torch.optim.RMSprop(groups, alpha=config["alpha"]))
    >>> optim = nnx.NNOptimFactoryParams(factory=nnx.OptimizerFactorySpec("demo.rmsprop", 1, {"alpha": 0.9}),
    ...                                  max_lr=1e-3)
    >>> nnx.NNTrainParams(n_epochs=1, optim=optim).state()["optim"]["factory"]
    {'id': 'demo.rmsprop', 'version': 1, 'config': {'alpha': 0.9}}
    >>> type(nnx.build_optimizer(torch.nn.Linear(4, 2), optim)).__name__
    'RMSprop'
    >>> nnx.unregister_optimizer_factory("demo.rmsprop", 1)
    True
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from nnx_core.errors import ParamsError
from nnx_adapters.pytorch.optim_factories import (
    MissingOptimizerFactoryError,
    OptimizerFactory,
    register_optimizer_factory,
    registered_optimizer_factories,
    unregister_optimizer_factory,
)
from nnx_api.config.optim_params import NNOptimFactoryParams, NNOptimParams, OptimizerFactorySpec
from nnx_api.training.optimizers import param_groups, torch_optimizer


def build_optimizer(
    net: nn.Module, params: NNOptimParams | NNOptimFactoryParams, *, strict_param_groups: bool = False,
) -> torch.optim.Optimizer:
    """The torch optimizer ``params`` describes over ``net`` (``params.name(...)``, or the
    registered factory of an ``NNOptimFactoryParams``): its ``param_groups`` give matching
    parameters their own lr / decay; unmatched trainable ones join a default group, or with
    ``strict_param_groups=True`` (a ``Trainer``) are left out."""
    if isinstance(params, NNOptimFactoryParams):
        groups, _ = param_groups(net, "default", params, strict=strict_param_groups, required=False)
        return torch_optimizer(params, groups, {id(p): name for name, p in net.named_parameters()})
    if not isinstance(params, NNOptimParams):
        raise ParamsError(
            "build_optimizer.params", f"must be NNOptimParams or NNOptimFactoryParams, got {type(params).__name__}"
        )
    return params.name(
        net, lr_start=params.max_lr, weight_decay=params.weight_decay, momentum=params.momentum,
        param_groups=params.param_groups, strict_param_groups=strict_param_groups, eps=params.eps,
    )


def optim_params_from_state(state: Mapping[str, Any]) -> NNOptimParams | NNOptimFactoryParams:
    """The optimizer params a saved ``state()`` describes: an ``NNOptimFactoryParams`` when it has
    a ``factory`` entry, else a built-in ``NNOptimParams``. Reading never looks a factory up."""
    if not isinstance(state, Mapping):
        raise ParamsError("optim_params_from_state.state", f"must be a mapping (a params state()), got {type(state).__name__}")
    return (NNOptimFactoryParams if "factory" in state else NNOptimParams).from_state(state)


__all__ = [
    "MissingOptimizerFactoryError", "NNOptimFactoryParams", "OptimizerFactory", "OptimizerFactorySpec", "build_optimizer",
    "optim_params_from_state", "register_optimizer_factory", "registered_optimizer_factories",
    "unregister_optimizer_factory",
]
