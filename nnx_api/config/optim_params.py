"""The optimizer and schedule params: ``NNOptimParams`` (a built-in optimizer) or
``NNOptimFactoryParams`` (a registered one, named by an ``OptimizerFactorySpec``), their parameter
groups (``NNParamGroupSpec``), and the learning-rate schedule (``NNSchedulerParams``).

``NNTrainParams`` / ``NNTrainerParams`` (``nnx_api.config.train_params``) hold them; the params
conventions (state, ``OMIT``, checks at construction) are those of ``nnx_api.config.params``.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import numbers
import re
from collections.abc import Mapping
from typing import Any

from nnx_core.convert import OMIT
from nnx_core.errors import ParamsError
from nnx_core.validate import check_float
from nnx_api.config.base import (
    FrozenDict,
    FrozenDims,
    Params,
    count,
    instance,
    member,
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
    lr: float | None = param(None, check=optional(real(minimum=0.0, exclusive_min=True, rule="lr must be positive")),
                             state=OMIT)
    lr_multiplier: float | None = param(
        None, check=optional(real(minimum=0.0, exclusive_min=True, rule="lr_multiplier must be positive")), state=OMIT
    )
    weight_decay: float | None = param(
        None, check=optional(real(minimum=0.0, rule="weight_decay must be non-negative")), state=OMIT
    )

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
            if not math.isfinite(out["lr"]):
                raise ParamsError(
                    f"NNParamGroupSpec({self.name_pattern!r}).lr_multiplier",
                    f"the group's lr {base_lr!r} × {self.lr_multiplier!r} is not finite; use a smaller lr_multiplier",
                )
        if self.weight_decay is not None:
            out["weight_decay"] = self.weight_decay
        return out


def _momentum(path: str, value: Any) -> Any:
    """A (beta1, beta2) pair as floats (each a real number: booleans and strings are refused), or
    the scalar as given (checked with its optimizer)."""
    if isinstance(value, (list, tuple)):
        return tuple(check_float(f"{path}[{i}]", v) for i, v in enumerate(value))
    return value


def _param_groups(path: str, value: Any) -> FrozenDims | None:
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
    return FrozenDims(value)  # a tuple (hashable, saved as before) equal to the same list, as NNx's list


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


_DECAY = real(minimum=0.0, rule="weight_decay must be non-negative")
_CLIP = optional(real(minimum=0.0, exclusive_min=True, rule="grad_clip_norm must be > 0"))
_ACCUMULATE = count(1, rule="accumulate_grad_batches must be >= 1")


@params_class
class NNOptimParams(Params):
    """Optimizer: kind, learning rate, momentum (float for SGD, (b1, b2) for Adam; default
    (0.9, 0.999) or 0.0), decay, clipping, gradient accumulation and optional parameter groups."""

    name: Optims = param(Optims.ADAM, check=_optim_name)
    # max_lr 0 allowed, as NNx allows it (a frozen or probe run)
    max_lr: float = param(1e-2, check=real(minimum=0.0, rule="max_lr must be non-negative"))
    momentum: Momentum | None = param(None, check=_momentum)
    weight_decay: float = param(0.0, check=_DECAY)
    eps: float = param(1e-8, check=real(minimum=0.0, exclusive_min=True), state=OMIT)
    grad_clip_norm: float | None = param(None, check=_CLIP, state=OMIT)
    accumulate_grad_batches: int = param(1, check=_ACCUMULATE, state=OMIT)
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


_SLUG = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]*")


def _factory_id(path: str, value: Any) -> str:
    """A factory id: letters, digits, ``_``, ``.`` or ``-``, starting with a letter or digit."""
    if not isinstance(value, str) or _SLUG.fullmatch(value) is None:
        raise ParamsError(path, (
            "must be a non-empty string of letters, digits, '_', '.' or '-' (starting with a letter or digit), "
            f"e.g. 'acme.lion'; got {value!r}"))
    return value


def _frozen(path: str, value: Any) -> Any:
    """A read-only copy of a JSON-like value: mappings as ``FrozenDict``, lists as tuples, NumPy
    scalars as ``int`` / ``float``; non-finite numbers, callables and other objects are refused."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return real()(path, float(value))
    if isinstance(value, Mapping):
        return FrozenDict({text()(f"{path} key", k): _frozen(f"{path}[{k!r}]", v) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(f"{path}[{i}]", v) for i, v in enumerate(value))
    if callable(value):
        raise ParamsError(path, (
            f"holds a callable ({value!r}), which a run's configuration cannot store; register code with "
            "register_optimizer_factory(id, version, fn) and keep only JSON-like values in config"))
    raise ParamsError(path, f"must hold only JSON-like values (numbers, strings, lists, mappings), got {value!r}")


def _factory_config(path: str, value: Any) -> FrozenDict:
    if not isinstance(value, Mapping):
        raise ParamsError(path, f"must be a mapping of JSON-like values, got {type(value).__name__} {value!r}")
    return _frozen(path, value)


def _thawed(value: Any) -> Any:
    """``_frozen``'s value as plain dicts and lists (what ``state()`` writes)."""
    if isinstance(value, Mapping):
        return {k: _thawed(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [_thawed(v) for v in value]
    return value


@positional_params_class
class OptimizerFactorySpec(Params):
    """An optimizer built by a registered factory: ``OptimizerFactorySpec("lion", 1, {"betas": [0.9,
    0.99]})``, named by ``NNOptimFactoryParams(factory=...)``. The spec holds no code (a run naming
    it loads without the factory); ``register_optimizer_factory(id, version, factory)`` provides it
    to the processes that train. ``config`` holds JSON-like values, kept read-only (lists as
    tuples, NumPy scalars as ``int`` / ``float``), and is part of the run id: specs are equal (and
    hash equally) when their states are, so ``1``, ``1.0`` and ``True`` make different specs.
    ``str(spec)`` is ``id@vN``."""

    id: str = param(check=_factory_id)
    version: int = param(1, check=count(1))
    config: Mapping[str, Any] = param(factory=dict, check=_factory_config)

    def state(self) -> dict[str, Any]:
        """``{"id", "version", "config"}``, the config as plain dicts and lists."""
        return {"id": self.id, "version": self.version, "config": _thawed(self.config)}

    def _key(self) -> str:
        return json.dumps(self.state(), sort_keys=True)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self._key() == other._key()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(self._key())

    def __str__(self) -> str:
        return f"{self.id}@v{self.version}"


converter.register_unstructure_hook(OptimizerFactorySpec, OptimizerFactorySpec.state)


def _spec_hint(value: Any) -> str:
    if callable(value):
        return ("OptimizerFactorySpec(id, version, config) naming the function, registered once with "
                "register_optimizer_factory(id, version, fn): a run's configuration stores no code")
    return "OptimizerFactorySpec(id, version, config)"


@params_class
class NNOptimFactoryParams(Params):
    """A user-registered optimizer (``OptimizerFactorySpec``) with the settings the update loop
    owns: learning rate, weight decay, clipping, gradient accumulation and parameter groups. It
    goes wherever an ``NNOptimParams`` does (``NNTrainParams(optim=...)``,
    ``NNTrainerParams(optims=...)``); its state's ``factory`` entry is what tells the two apart."""

    factory: OptimizerFactorySpec = param(check=instance(OptimizerFactorySpec, _spec_hint))
    max_lr: float = param(check=real(minimum=0.0, exclusive_min=True, rule="max_lr > 0"))
    weight_decay: float = param(0.0, check=_DECAY)
    grad_clip_norm: float | None = param(None, check=_CLIP, state=OMIT)
    accumulate_grad_batches: int = param(1, check=_ACCUMULATE, state=OMIT)
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


def check_clock(path: str, value: Any) -> str:
    """``"epoch"`` or ``"optimizer_update"``."""
    if value not in CLOCKS:
        raise ParamsError(path, f"clock must be 'epoch' or 'optimizer_update'; got {value!r}")
    return value


def _when_set(name: str) -> Any:
    """An optional tick count ≥ 1 (``name`` words the rule)."""
    return optional(count(1, rule=f"{name} > 0 when set"))


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
    ``"epoch"`` (one tick per epoch) or ``"optimizer_update"`` (one per committed update). A
    kind-specific field the params' own kind does not read is accepted here (a factory
    ``Schedulers.X(optimizer, params, n)`` builds kind X) and refused where a run uses the params
    (``check_read_by_kind``)."""

    min_lr: float = param(1e-7, check=real(minimum=0.0, rule="min_lr >= 0"))
    factor: float = param(0.95, check=real(minimum=0.0, exclusive_min=True, rule="factor > 0"))
    patience: int = param(8, check=count(0, rule="patience >= 0"))
    cooldown: int = param(2, check=count(0, rule="cooldown >= 0"))
    threshold: float = param(1e-3, check=real(minimum=0.0, rule="threshold >= 0"))
    kind: Schedulers | None = param(None, check=optional(member(Schedulers)), state=OMIT)
    step_size: int | None = param(None, check=_when_set("step_size"), state=OMIT)
    T_max: int | None = param(None, check=_when_set("T_max"), state=OMIT)
    max_lr: float | None = param(
        None, check=optional(real(minimum=0.0, exclusive_min=True, rule="max_lr > 0 when set")), state=OMIT
    )
    total_steps: int | None = param(None, check=_when_set("total_steps"), state=OMIT)
    warmup_steps: int | None = param(None, check=_when_set("warmup_steps"), state=OMIT)
    clock: str = param("epoch", check=check_clock, state=OMIT)

    @property
    def resolved_kind(self) -> Schedulers:
        """``kind``, with None meaning reduce-on-plateau."""
        return self.kind or Schedulers.REDUCE_LR_ON_PLATEAU

    def check_read_by_kind(self, path: str = "NNSchedulerParams") -> None:
        """Refuse a kind-specific field (``step_size``, ``T_max``, ``max_lr``, ``total_steps``,
        ``warmup_steps``) that this params' own kind does not read (``ParamsError`` at ``path``).
        Not checked at construction: NNx builds kind-less params for a factory
        (``Schedulers.STEP(optimizer, NNSchedulerParams(step_size=2), n)`` builds a step schedule
        whatever ``kind`` says); a run uses the params' own kind, so ``NNTrainParams`` and
        ``NNTrainerParams`` check it, before anything is written."""
        kind = self.resolved_kind
        ignored = [f for f in OWN_FIELDS if getattr(self, f) is not None and f not in READS[kind]]
        if ignored:
            readers = sorted({k.value for k, fields in READS.items() if ignored[0] in fields})
            raise ParamsError(
                f"{path}.{ignored[0]}",
                f"kind {kind.value!r} does not read {' or '.join(ignored)} (it reads "
                f"{', '.join(sorted(READS[kind] | PLATEAU_READS[kind]))}); {ignored[0]} is read by {' and '.join(readers)}. "
                f"Drop it, or choose the kind that reads it: NNSchedulerParams(kind={readers[0]!r}, {ignored[0]}=...)",
            )

    def _check(self) -> None:
        kind = self.resolved_kind
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
                "the reduce-on-plateau scheduler reads a monitored metric at the epoch boundary and cannot run on "
                "the optimizer_update clock; use clock='epoch' (builder: .clock('epoch')) or another kind",
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
