"""The optimizer and schedule params: ``NNOptimParams`` (a built-in optimizer) or
``NNOptimFactoryParams`` (a registered one, named by an ``OptimizerFactorySpec``), their parameter
groups (``NNParamGroupSpec``), and the learning-rate schedule (``NNSchedulerParams``).

``NNTrainParams`` / ``NNTrainerParams`` (``nnx_api.config.train_params``) hold them; the params
conventions (state, ``OMIT``, checks at construction) are those of ``nnx_api.config.params``.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any

from nnx_core.convert import OMIT
from nnx_core.errors import ParamsError
from nnx_api.config.base import (
    Params,
    count,
    instance,
    json_like,
    member,
    one_of,
    optional,
    param,
    params_class,
    positional_params_class,
    real,
    text,
)
from nnx_api.config.builders import NNOptimParamsBuilder, NNSchedulerParamsBuilder
from nnx_api.config.convert import Momentum, converter
from nnx_api.config.enums import Optims, Schedulers


@positional_params_class
class NNParamGroupSpec(Params):
    """Parameters whose dotted name matches ``name_pattern`` (fnmatch) get their own lr / decay:
    ``NNParamGroupSpec("encoder.*", lr_multiplier=0.1)``."""

    name_pattern: str = param(check=text())
    lr: float | None = param(None, check=optional(real(minimum=0.0, exclusive_min=True)), state=OMIT)
    lr_multiplier: float | None = param(None, check=optional(real(minimum=0.0, exclusive_min=True)), state=OMIT)
    weight_decay: float | None = param(None, check=optional(real(minimum=0.0)), state=OMIT)

    def _check(self) -> None:
        if self.lr is not None and self.lr_multiplier is not None:
            raise ParamsError("NNParamGroupSpec", "give at most one of lr and lr_multiplier")

    def overrides(self, base_lr: float) -> dict[str, float]:
        """The optimizer group options this spec sets (``lr`` and/or ``weight_decay``)."""
        out: dict[str, float] = {}
        if self.lr is not None:
            out["lr"] = self.lr
        elif self.lr_multiplier is not None:
            out["lr"] = base_lr * self.lr_multiplier
        if self.weight_decay is not None:
            out["weight_decay"] = self.weight_decay
        return out


def _momentum(path: str, value: Any) -> Any:
    return tuple(float(v) for v in value) if isinstance(value, (list, tuple)) else value


class ParamGroups(tuple):  # type: ignore[type-arg]
    """``param_groups`` as stored: a tuple (hashed and saved as one, so run ids do not change)
    that also compares equal to the list of the same specs, as NNx's list field does
    (``optim.param_groups == [spec]``)."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, list):
            return tuple.__eq__(self, tuple(other))
        return tuple.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = tuple.__hash__


def _param_groups(path: str, value: Any) -> ParamGroups | None:
    """Optional ``NNParamGroupSpec`` items; a plain dict (or anything else) is a ``TypeError``
    (``ParamsError``) naming the spec to wrap it in, as NNx refuses it."""
    if value is None:
        return None
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, (list, tuple)):
        raise ParamsError(path, f"must be a list/tuple of NNParamGroupSpec, got {type(value).__name__}")
    for i, item in enumerate(value):
        if not isinstance(item, NNParamGroupSpec):
            raise ParamsError(
                f"{path}[{i}]",
                f"must be an NNParamGroupSpec, got {type(item).__name__}; wrap it: "
                "NNParamGroupSpec(name_pattern=..., lr=...)",
            )
    return ParamGroups(value)


def _optim_name(path: str, value: Any) -> Optims:
    """A built-in optimizer's name; any other ``torch.optim`` optimizer (by class or lowercase
    name) is refused with how to name it: a registered factory."""
    try:
        return Optims.parse(path, value)
    except ParamsError:
        import torch

        given = value.__name__ if isinstance(value, type) else str(value)
        found = {n.lower(): n for n in dir(torch.optim)
                 if isinstance(getattr(torch.optim, n), type) and issubclass(getattr(torch.optim, n), torch.optim.Optimizer)}
        if given.lower() not in found:
            raise
        cls = found[given.lower()]
        raise ParamsError(path, (
            f"torch.optim.{cls} ({given!r}) is not built in (built in: {', '.join(m.value for m in Optims)}); name it "
            f"with a registered factory: nnx.register_optimizer_factory('{cls.lower()}', 1, lambda groups, config: "
            f"torch.optim.{cls}(groups, **config)); optim=nnx.NNOptimFactoryParams(factory=nnx.OptimizerFactorySpec("
            f"'{cls.lower()}', 1, {{}}), max_lr=1e-3)")) from None


@params_class
class NNOptimParams(Params):
    """Optimizer: kind, learning rate, momentum (float for SGD, (b1, b2) for Adam; default
    (0.9, 0.999) or 0.0), decay, clipping, gradient accumulation and optional parameter groups."""

    name: Optims = param(Optims.ADAM, check=_optim_name)
    max_lr: float = param(1e-2, check=real(minimum=0.0))  # 0 allowed, as NNx allows it (a frozen or probe run)
    momentum: Momentum | None = param(None, check=_momentum)
    weight_decay: float = param(0.0, check=real(minimum=0.0))
    eps: float = param(1e-8, check=real(minimum=0.0, exclusive_min=True), state=OMIT)
    grad_clip_norm: float | None = param(None, check=optional(real(minimum=0.0, exclusive_min=True)), state=OMIT)
    accumulate_grad_batches: int = param(1, check=count(1), state=OMIT)
    param_groups: tuple[NNParamGroupSpec, ...] | None = param(None, check=_param_groups, state=OMIT)

    def _check(self) -> None:
        path = "NNOptimParams.momentum"
        if self.momentum is None:
            object.__setattr__(self, "momentum", (0.9, 0.999) if self.name.is_adam else 0.0)
        # each value is checked here; whether its shape fits the optimizer (a pair for the Adam
        # family, a float for SGD) is ``is_valid()``'s question, asked when training starts, as in NNx
        if isinstance(self.momentum, tuple):
            if len(self.momentum) != 2:
                raise ParamsError(path, f"betas must be a (beta1, beta2) pair, got {self.momentum!r}")
            for i, beta in enumerate(self.momentum):
                real(minimum=0.0, maximum=1.0, exclusive_max=True)(f"{path}[{i}]", beta)
        else:
            real(minimum=0.0)(path, self.momentum)
        if not self.name.is_adam and self.eps != 1e-8:
            raise ParamsError("NNOptimParams.eps", f"only Adam-family optimizers take eps, not {self.name.value}")

    def is_valid(self) -> bool:
        """NNx's shape check of ``momentum``: a (beta1, beta2) pair for the Adam family, a float
        for SGD. Construction accepts the other shape, as NNx does; training refuses it
        (``ParamsError``, a ``ValueError``, saying the optimizer config is invalid)."""
        return isinstance(self.momentum, tuple) == self.name.is_adam

    @classmethod
    def builder(cls) -> NNOptimParamsBuilder:
        """A fluent builder: ``NNOptimParams.builder().adam(max_lr=1e-3).grad_clip(1.0).build()``."""
        return NNOptimParamsBuilder(cls)


@positional_params_class
class OptimizerFactorySpec(Params):
    """An optimizer built by a registered factory: ``OptimizerFactorySpec("lion", 1, {"betas": [0.9,
    0.99]})``, named by ``NNOptimFactoryParams(factory=...)``. The spec holds no code (a run naming
    it loads without the factory); ``register_optimizer_factory(id, version, factory)`` provides it
    to the processes that train. ``config`` holds JSON-like values and is part of the run id."""

    id: str = param(check=text())
    version: int = param(1, check=count(1))
    config: Mapping[str, Any] = param(factory=dict, check=json_like)


@params_class
class NNOptimFactoryParams(Params):
    """A user-registered optimizer (``OptimizerFactorySpec``) with the settings the update loop
    owns: learning rate, weight decay, clipping, gradient accumulation and parameter groups. It
    goes wherever an ``NNOptimParams`` does (``NNTrainParams(optim=...)``,
    ``NNTrainerParams(optims=...)``); its state's ``factory`` entry is what tells the two apart."""

    factory: OptimizerFactorySpec = param(
        check=instance(OptimizerFactorySpec, lambda v: "OptimizerFactorySpec(id, version, config)")
    )
    max_lr: float = param(check=real(minimum=0.0, exclusive_min=True))
    weight_decay: float = param(0.0, check=real(minimum=0.0))
    grad_clip_norm: float | None = param(None, check=optional(real(minimum=0.0, exclusive_min=True)), state=OMIT)
    accumulate_grad_batches: int = param(1, check=count(1), state=OMIT)
    param_groups: tuple[NNParamGroupSpec, ...] | None = param(None, check=_param_groups, state=OMIT)

    def is_valid(self) -> bool:
        """Always True: every field is checked at construction (whether the factory is registered
        is checked when training starts, before any run is reserved)."""
        return True


AnyOptimParams = NNOptimParams | NNOptimFactoryParams


def _structure_optim(value: Any, _type: Any) -> Any:
    """A saved optimizer state as the class its keys name (a ``factory`` entry marks a registered
    one), structured by the converter so a nested error keeps its path."""
    if isinstance(value, Mapping):
        return converter.structure(value, NNOptimFactoryParams if "factory" in value else NNOptimParams)
    return value


converter.register_structure_hook(AnyOptimParams, _structure_optim)


CLOCKS = ("epoch", "optimizer_update")


OWN_FIELDS = ("step_size", "T_max", "max_lr", "total_steps", "warmup_steps")  # each read by some kinds only
READS = {  # the kind-specific fields each kind reads (nnx_adapters.pytorch.optim.build_scheduler)
    Schedulers.REDUCE_LR_ON_PLATEAU: set(), Schedulers.STEP: {"step_size"}, Schedulers.COSINE_ANNEALING: {"T_max"},
    Schedulers.ONE_CYCLE: {"max_lr", "total_steps"}, Schedulers.LINEAR_WARMUP_DECAY: {"warmup_steps", "total_steps"},
    Schedulers.WARMUP_COSINE: {"warmup_steps", "total_steps"},
}
PLATEAU_READS = {  # and which of the five plateau fields (every kind takes them, as NNx requires)
    Schedulers.REDUCE_LR_ON_PLATEAU: {"min_lr", "factor", "patience", "cooldown", "threshold"}, Schedulers.STEP: {"factor"},
    Schedulers.COSINE_ANNEALING: {"min_lr"}, Schedulers.ONE_CYCLE: set(), Schedulers.LINEAR_WARMUP_DECAY: set(),
    Schedulers.WARMUP_COSINE: {"min_lr"},
}


@params_class
class NNSchedulerParams(Params):
    """Learning-rate schedule. ``kind=None`` is reduce-on-plateau with the five plateau fields;
    other kinds use their own fields (defaults derived from the run length n in clock ticks:
    ``step_size`` ``max(1, n // 3)``, ``T_max`` and ``total_steps`` n, ``warmup_steps``
    ``max(1, n // 10)``; docs/metrics.md §4). ``warmup_cosine`` (an NNx extension) warms up
    linearly over ``warmup_steps``, then decays along a cosine to ``min_lr`` at ``total_steps``. ``clock`` is
    ``"epoch"`` (one tick per epoch) or ``"optimizer_update"`` (one per committed update)."""

    min_lr: float = param(1e-7, check=real(minimum=0.0))
    factor: float = param(0.95, check=real(minimum=0.0, exclusive_min=True))
    patience: int = param(8, check=count(0))
    cooldown: int = param(2, check=count(0))
    threshold: float = param(1e-3, check=real(minimum=0.0))
    kind: Schedulers | None = param(None, check=optional(member(Schedulers)), state=OMIT)
    step_size: int | None = param(None, check=optional(count(1)), state=OMIT)
    T_max: int | None = param(None, check=optional(count(1)), state=OMIT)
    max_lr: float | None = param(None, check=optional(real(minimum=0.0, exclusive_min=True)), state=OMIT)
    total_steps: int | None = param(None, check=optional(count(1)), state=OMIT)
    warmup_steps: int | None = param(None, check=optional(count(1)), state=OMIT)
    clock: str = param("epoch", check=one_of(*CLOCKS), state=OMIT)

    @property
    def resolved_kind(self) -> Schedulers:
        """``kind``, with None meaning reduce-on-plateau."""
        return self.kind or Schedulers.REDUCE_LR_ON_PLATEAU

    def _check(self) -> None:
        kind = self.resolved_kind
        ignored = [f for f in OWN_FIELDS if getattr(self, f) is not None and f not in READS[kind]]
        if ignored:
            readers = sorted({k.value for k, fields in READS.items() if ignored[0] in fields})
            raise ParamsError(
                f"NNSchedulerParams.{ignored[0]}",
                f"kind {kind.value!r} does not read {' or '.join(ignored)} (it reads "
                f"{', '.join(sorted(READS[kind] | PLATEAU_READS[kind]))}); {ignored[0]} is read by {' and '.join(readers)}. "
                "Drop it, or choose the kind that reads it",
            )
        if (kind is Schedulers.WARMUP_COSINE and self.warmup_steps is not None and self.total_steps is not None
                and self.warmup_steps > self.total_steps):
            raise ParamsError(
                "NNSchedulerParams.warmup_steps",
                f"warmup_steps={self.warmup_steps} exceeds total_steps={self.total_steps}: the warm-up would not end "
                "before the schedule does; give total_steps at least warmup_steps",
            )
        if self.resolved_kind is Schedulers.REDUCE_LR_ON_PLATEAU and self.clock == "optimizer_update":
            raise ParamsError(
                "NNSchedulerParams.clock",
                "reduce-on-plateau reads an epoch metric and cannot run on the optimizer_update clock; "
                "use clock='epoch' or another kind",
            )

    @classmethod
    def builder(cls) -> NNSchedulerParamsBuilder:
        """A fluent builder: ``NNSchedulerParams.builder().cosine_annealing(T_max=10).build()``."""
        return NNSchedulerParamsBuilder(cls)


PLATEAU = ("min_lr", "factor", "patience", "cooldown", "threshold")


def _refuse_unread_plateau(init: Any) -> Any:
    """``NNSchedulerParams``'s constructor, refusing a plateau field given with a value other than
    its default to a kind that does not read it (``patience=5`` on ``cosine_annealing``). All five
    given together is NNx's form (it required them on every kind; a saved state has them all) and
    stays accepted. Nothing enters ``state()``: no configuration's id changes."""

    @functools.wraps(init)
    def checked(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        if set(PLATEAU) <= set(kwargs):
            return
        kind = self.resolved_kind
        defaults = {f.name: f.default for f in dataclasses.fields(self) if f.name in PLATEAU}
        ignored = [f for f in PLATEAU if f in kwargs and f not in PLATEAU_READS[kind] and kwargs[f] != defaults[f]]
        if ignored:
            readers = sorted(k.value for k, fields in PLATEAU_READS.items() if ignored[0] in fields)
            raise ParamsError(
                f"NNSchedulerParams.{ignored[0]}",
                f"kind {kind.value!r} does not read {' or '.join(ignored)} (it reads "
                f"{', '.join(sorted(READS[kind] | PLATEAU_READS[kind])) or 'none of the plateau fields'}); "
                f"{ignored[0]} is read by {' and '.join(readers)}. Drop it, or choose the kind that reads it",
            )

    return checked


NNSchedulerParams.__init__ = _refuse_unread_plateau(NNSchedulerParams.__init__)  # type: ignore[method-assign]
