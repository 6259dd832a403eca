"""Named optimizers and their schedules, built from the params (after the run is seeded).

``NNModel`` has one optimizer, ``"default"``, over every trainable parameter (``param_groups``
give matching parameters their own lr / decay; the rest form a default group). A ``Trainer``
has named optimizers with *strict* groups: each trainable parameter goes to the first spec that
matches it, unmatched parameters are not that optimizer's, a pattern matching nothing is refused,
and with several optimizers every one must declare its groups and no parameter may belong to two.
An ``NNOptimFactoryParams`` optimizer is built by its registered factory
(``nnx_adapters.pytorch.optim_factories``) over the same groups. Each optimizer has one schedule
(a ``PlateauRule`` for reduce-on-plateau, else a ``TorchClock``) whose horizon is the run's length
on its clock (``nnx_core.schedules.horizon``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from nnx_core.errors import ParamsError
from nnx_core.schedules import Budget, PlateauRule, check_budgets, horizon, ticks_per_epoch
from nnx_adapters.pytorch.optim import TorchOptimizer, build_optimizer, build_scheduler, named_params, param_groups
from nnx_adapters.pytorch.optim_factories import build_registered_optimizer


def build_optimizers(net: torch.nn.Module, optims: Mapping[str, Any], *, strict: bool) -> dict[str, TorchOptimizer]:
    """One ``TorchOptimizer`` per name; under ``strict`` a parameter claimed twice is refused."""
    several = len(optims) > 1
    owner: dict[str, str] = {}
    names = named_params(net)
    out = {}
    for name, optim in optims.items():
        groups, taken = param_groups(net, name, optim, strict=strict, required=strict and several)
        for pname in taken if strict else ():
            if pname in owner:
                raise ParamsError(
                    f"NNTrainerParams.optims[{name!r}].param_groups",
                    f"parameter {pname!r} is already owned by optimizer {owner[pname]!r}; each parameter belongs "
                    "to one optimizer (make the patterns disjoint)",
                )
            owner[pname] = name
        spec = getattr(optim, "factory", None)
        out[name] = TorchOptimizer(torch_optimizer(optim, groups, names), names, None if spec is None else spec.state())
    return out


def torch_optimizer(optim: Any, groups: list[dict], names: Mapping[int, str] | None = None) -> torch.optim.Optimizer:
    """The torch optimizer ``optim`` describes over ``groups``: a built-in ``NNOptimParams``, or
    an ``NNOptimFactoryParams`` whose registered factory gets every group with its ``lr`` and
    ``weight_decay`` filled in (``names``, ``id(param) → name``, names parameters in its refusals)."""
    spec = getattr(optim, "factory", None)
    if spec is None:
        return build_optimizer(
            optim.name.value, groups, lr=optim.max_lr, momentum=optim.momentum, weight_decay=optim.weight_decay,
            eps=optim.eps,
        )
    filled = [{"lr": optim.max_lr, "weight_decay": optim.weight_decay, **g} for g in groups]
    return build_registered_optimizer(spec.id, spec.version, spec.config, filled, names)


def loader_length(loader: Any) -> int | None:
    """``len(loader)``, None when the loader has no length."""
    try:
        return len(loader)
    except TypeError:
        return None


def build_schedule(optimizer: TorchOptimizer, sched: Any, *, n_epochs: int, batches: int | None, accumulate: int) -> Any:
    """Optimizer ``optimizer``'s schedule from its ``NNSchedulerParams``."""
    kind = sched.resolved_kind.value
    if kind == "reduce_lr_on_plateau":
        return PlateauRule(factor=sched.factor, patience=sched.patience, cooldown=sched.cooldown, min_lr=sched.min_lr)
    length = horizon(
        sched.clock, n_epochs=n_epochs, batches=batches, accumulate=accumulate,
        explicit=sched.total_steps or sched.T_max or sched.step_size,
    )
    return build_scheduler(
        optimizer.optimizer, kind, clock=sched.clock, horizon=length, min_lr=sched.min_lr, factor=sched.factor,
        patience=sched.patience, cooldown=sched.cooldown, threshold=sched.threshold, step_size=sched.step_size,
        T_max=sched.T_max, max_lr=sched.max_lr, total_steps=sched.total_steps, warmup_steps=sched.warmup_steps,
    )


def build_schedules(
    optimizers: Mapping[str, TorchOptimizer], schedulers: Mapping[str, Any], optims: Mapping[str, Any], *,
    n_epochs: int, train_loader: Any,
) -> dict[str, Any]:
    """Every optimizer's schedule."""
    batches = loader_length(train_loader)
    return {
        name: build_schedule(opt, schedulers[name], n_epochs=n_epochs, batches=batches, accumulate=optims[name].accumulate_grad_batches)
        for name, opt in optimizers.items()
    }


def check_schedule_budgets(
    schedulers: Mapping[str, Any], optims: Mapping[str, Any], *, n_epochs: int, train_loader: Any, owns_windows: bool,
    resumed: Mapping[str, Any] | None, named: bool,
) -> None:
    """Refuse budgeted schedules too short for the run (``ScheduleBudgetError``), before writing.
    ``resumed``: the schedule states a stateful resume restores, by optimizer name; ``named``:
    the messages name the optimizer (a Trainer)."""
    batches = loader_length(train_loader)
    check_budgets(
        [
            Budget(
                kind=sched.resolved_kind.value,
                clock=sched.clock,
                total_steps=sched.total_steps,
                per_epoch=ticks_per_epoch(sched.clock, batches, optims[name].accumulate_grad_batches, owns_windows),
                done=int((resumed or {}).get(name, {}).get("ticks", 0)),
                name=name if named else None,
            )
            for name, sched in schedulers.items()
        ],
        n_epochs=n_epochs,
    )
