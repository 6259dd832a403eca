"""The params classes: frozen, keyword-only, slotted dataclasses with lossless ``state()`` /
``from_state()`` round trips through the one converter.

``state()`` is a plain YAML-safe mapping and is what a run id hashes. Fields added after a class
first shipped are omitted while they hold their default (``OMIT``), so ids never drift; runtime-only
fields (loaders, extra metrics, overwrite flags, resume mode, progress) never enter it. Every value
is checked at construction — ``dataclasses.replace(params, ...)`` checks again — and a bad one
raises ``ParamsError`` naming the field and what to write instead. Enum fields accept the member,
its value or its name in any case; devices are named as in PyTorch (``"auto"``, ``"cuda:1"``, a
``torch.device``). ``NNOptimParams``, ``NNSchedulerParams`` and ``NNTrainerParams`` have fluent
builders (``.builder()``, see ``nnx_api.config.builders``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from nnx_core.convert import OMIT, RUNTIME, as_given
from nnx_core.errors import InvalidRunIdError, ParamsError
from nnx_core.identity import validate_tag
from nnx_core.monitor import MonitorSpec
from nnx_api.config.base import (
    FrozenDict,
    Params,
    count,
    flag,
    frozen_dims,
    instance,
    items,
    member,
    one_of,
    optional,
    param,
    real,
    text,
    typed_init,
)
from nnx_api.config.builders import NNOptimParamsBuilder, NNSchedulerParamsBuilder, NNTrainerParamsBuilder
from nnx_api.config.convert import Momentum, converter
from nnx_api.config.enums import Activations, Device, Devices, Losses, Nets, Optims, Schedulers, device_of
from nnx_api.config.identity import module_topology
from nnx_api.config.metrics import MetricSpec


def _params(cls: type) -> Any:
    return typed_init(dataclasses.dataclass(frozen=True, kw_only=True, slots=True)(cls))


def _positional_params(cls: type) -> Any:
    return typed_init(dataclasses.dataclass(frozen=True, slots=True)(cls))


_PROB = real(minimum=0.0, maximum=1.0)
_NET_VARIANTS: dict[str, type[NNParams]] = {}


@_params
class NNParams(Params):
    """Shape of the built-in nets: ``input_dim → hidden_dims... → output_dim``.

    ``activation`` / ``dropout_prob`` apply to every hidden layer; ``activations`` /
    ``dropout_probs`` (one per hidden layer) override them layer by layer. A per-layer list
    equal to the scalar everywhere is stored as None, so it never changes the run id."""

    input_dim: int = param(check=count(1))
    output_dim: int = param(check=count(1))
    hidden_dims: tuple[int, ...] = param((), check=frozen_dims(items(count(1))))
    dropout_prob: float = param(0.0, check=_PROB)
    activation: Activations = param(Activations.RELU, check=member(Activations))
    activations: tuple[Activations, ...] | None = param(None, check=optional(items(member(Activations))), state=OMIT)
    dropout_probs: tuple[float, ...] | None = param(None, check=optional(items(_PROB)), state=OMIT)

    def _check(self) -> None:
        for name, scalar in (("activations", self.activation), ("dropout_probs", self.dropout_prob)):
            values = getattr(self, name)
            if values is None:
                continue
            if len(values) != len(self.hidden_dims):
                raise ParamsError(
                    f"{type(self).__name__}.{name}",
                    f"needs one entry per hidden layer ({len(self.hidden_dims)}), got {len(values)}",
                )
            if all(v == scalar for v in values):
                object.__setattr__(self, name, None)

    @property
    def dims(self) -> list[int]:
        """``[input_dim, *hidden_dims, output_dim]``."""
        return [self.input_dim, *self.hidden_dims, self.output_dim]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super(NNParams, cls).__init_subclass__(**kwargs)  # noqa: UP008  (zero-argument super() fails in a slotted dataclass)
        _NET_VARIANTS[cls.__qualname__] = cls  # the slotted class replaces the one the decorator started from

    @classmethod
    def resolve_from_state(cls, state: Mapping[str, Any]) -> NNParams:
        """The params a saved net state describes, read back as the subclass that wrote it (a state
        with ``conv_channels`` is an ``NNConvParams``): the subclass whose own fields it names."""
        own = {f.name for f in dataclasses.fields(cls)}
        for sub in _NET_VARIANTS.values():
            if sub.__base__ is cls and set(state) & ({f.name for f in dataclasses.fields(sub)} - own):
                return sub.resolve_from_state(state)
        return cls.from_state(state)

    def activation_for(self, layer: int) -> Activations:
        """The activation of hidden layer ``layer``."""
        return self.activations[layer] if self.activations is not None else self.activation

    def dropout_for(self, layer: int) -> float:
        """The dropout probability of hidden layer ``layer``."""
        return self.dropout_probs[layer] if self.dropout_probs is not None else self.dropout_prob


TASK_KINDS = ("categorical", "multilabel", "regression")


def _as_is(path: str, value: Any) -> Any:
    return value


@_params
class TaskSpec(Params):
    """What the model's output means: categorical (with ``ignore_index``), multilabel or regression."""

    kind: str = param(check=one_of(*TASK_KINDS))
    n: int | None = param(None, check=optional(count(1)), state=OMIT)
    ignore_index: int | None = param(None, check=optional(count()), state=OMIT)
    threshold: float = param(0.5, check=real(minimum=0.0, maximum=1.0, exclusive_min=True), state=OMIT)
    labels: tuple[Any, ...] | None = param(None, check=optional(items(_as_is)), state=OMIT)

    @classmethod
    def categorical(cls, n: int | None = None, *, ignore_index: int | None = None, labels: Any = None) -> TaskSpec:
        """Classes decoded by argmax; targets equal to ``ignore_index`` are masked everywhere."""
        return cls(kind="categorical", n=n, ignore_index=ignore_index, labels=labels)

    @classmethod
    def multilabel(cls, n: int | None = None, *, threshold: float = 0.5, labels: Any = None) -> TaskSpec:
        """Independent sigmoid outputs decoded by ``p >= threshold``."""
        return cls(kind="multilabel", n=n, threshold=threshold, labels=labels)

    @classmethod
    def regression(cls, n: int | None = None, *, labels: Any = None) -> TaskSpec:
        """Continuous outputs; records carry loss, mse and mae (no error)."""
        return cls(kind="regression", n=n, labels=labels)

    @property
    def num_outputs(self) -> int | None:
        """NNx's name of ``n``: the class, label or target count along the output axis (None: unset)."""
        return self.n


def _task_hint(value: Any) -> str:
    return "TaskSpec.categorical(...), TaskSpec.multilabel(...) or TaskSpec.regression(...)"


PRECISION_MODES = ("fp32", "bf16", "fp16")


@_positional_params
class PrecisionPolicy(Params):
    """Autocast policy: ``PrecisionPolicy("bf16")`` (CPU/CUDA), ``"fp16"`` (CUDA, GradScaler) or
    ``"fp32"`` (default). ``fallback="fp32"`` runs full precision where the mode is unsupported
    instead of refusing. Parameters always stay float32."""

    mode: str = param("fp32", check=one_of(*PRECISION_MODES))
    fallback: str = param("error", check=one_of("error", "fp32"))


def _json_like(path: str, value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Mapping):
        return {text()(f"{path} key", k): _json_like(f"{path}[{k!r}]", v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_like(f"{path}[{i}]", v) for i, v in enumerate(value)]
    raise ParamsError(path, f"must hold only JSON-like values (numbers, strings, lists, mappings), got {value!r}")


@_positional_params
class ModelSpec(Params):
    """A network built by a registered factory: ``ModelSpec("my-mlp", 1, {"width": 64}, seed=0)``
    as ``NNModelParams(net=...)``. ``register_model_factory(id, version, factory)`` registers
    ``factory(config) -> nn.Module``; the module is built under ``seed`` with every RNG stream
    restored afterwards, so the same spec always gives the same initial weights. The spec holds
    no code: a run naming it loads without the factory, only rebuilding the module needs it."""

    id: str = param(check=text())
    version: int = param(1, check=count(1))
    config: Mapping[str, Any] = param(factory=dict, check=_json_like)
    _: dataclasses.KW_ONLY
    seed: int = param(0, check=count(0))


class RuntimeModule:
    """The descriptor of a caller's own ``torch.nn.Module`` (``NNModel(module=...)`` sets it as
    ``NNModelParams.net``): ``module`` is the class's qualified name, ``topology`` a digest of its
    parameter and buffer names, shapes and dtypes and of its ``repr`` (layer hyperparameters such
    as dropout rates), never of weight values. ``RuntimeModule.of(module)`` describes a module.
    No factory rebuilds it, so ``reconstructible`` is False: its weights load only into a module
    the caller passes again (``NNModel.from_checkpoint(ckpt, module=...)``)."""

    __slots__ = ("module", "topology")
    kind = "runtime"
    reconstructible = False
    module: str
    topology: str

    def __init__(self, module: str, topology: str) -> None:
        object.__setattr__(self, "module", text()("RuntimeModule.module", module))
        object.__setattr__(self, "topology", text()("RuntimeModule.topology", topology))

    @classmethod
    def of(cls, module: Any) -> RuntimeModule:
        """The descriptor of ``module`` (a ``torch.nn.Module``)."""
        return cls(*module_topology(module))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"RuntimeModule is immutable; {name!r} cannot be set")

    def __reduce__(self) -> tuple[Any, ...]:
        return (RuntimeModule, (self.module, self.topology))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RuntimeModule):
            return NotImplemented
        return (self.module, self.topology) == (other.module, other.topology)

    def __hash__(self) -> int:
        return hash((self.kind, self.module, self.topology))

    def __repr__(self) -> str:
        return f"RuntimeModule(module={self.module!r}, topology={self.topology!r})"

    def __str__(self) -> str:
        return f"runtime:{self.module}"

    def state(self) -> dict[str, Any]:
        """The descriptor as a plain mapping (``kind`` tells it from a ``ModelSpec``'s state)."""
        return {"kind": self.kind, "module": self.module, "topology": self.topology, "reconstructible": False}

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> RuntimeModule:
        """The descriptor of :meth:`state`."""
        if not isinstance(state, Mapping) or state.get("kind", cls.kind) != cls.kind:
            raise ParamsError("RuntimeModule", f"expected the state of a runtime module descriptor, got {state!r}")
        return cls(state.get("module"), state.get("topology"))


converter.register_structure_hook(Nets | ModelSpec | RuntimeModule | None, as_given)  # the field's check decodes


def _net(path: str, value: Any) -> Nets | ModelSpec | RuntimeModule | None:
    if value is None or isinstance(value, (ModelSpec, RuntimeModule)):
        return value
    if isinstance(value, Mapping):
        if value.get("kind") == RuntimeModule.kind:
            return RuntimeModule.from_state(value)
        return ModelSpec.from_state({k: v for k, v in value.items() if k != "kind"})
    return Nets.parse(path, value)


@_params
class NNModelParams(Params):
    """The model's net (a ``Nets`` member, a registered ``ModelSpec``, a ``RuntimeModule`` set by
    ``NNModel(module=...)``, or None: a feed-forward net when ``NNParams`` are given, the
    descriptor of ``module=`` otherwise), device, loss, and (optional) task and precision policy. ``mixed_precision=True`` is NNx's legacy flag: fp16
    autocast and loss scaling on CUDA, full precision elsewhere (no error), left out of the state
    (and the run id) while False; with a ``precision`` policy it must agree (fp16).

    ``device`` is a ``Devices`` member, ``"auto"`` (CUDA, then MPS, then CPU, resolved when the
    model is built), an indexed device (``"cuda:1"``) or a ``torch.device``; ``params.device()``
    is the ``torch.device`` it names on this machine."""

    net: Nets | ModelSpec | RuntimeModule | None = param(None, check=_net)
    device: Devices | Device = param(Devices.CPU, check=device_of)
    loss: Losses = param(Losses.CROSS_ENTROPY, check=member(Losses))
    task: TaskSpec | None = param(
        None, check=optional(instance(TaskSpec, _task_hint)), state=OMIT
    )
    precision: PrecisionPolicy | None = param(
        None, check=optional(instance(PrecisionPolicy, lambda v: f"PrecisionPolicy({v!r})")), state=OMIT
    )
    mixed_precision: bool = param(False, check=flag(), state=OMIT)

    def _check(self) -> None:
        if self.mixed_precision and self.precision is not None and self.precision.mode != "fp16":
            raise ParamsError(
                "NNModelParams.mixed_precision",
                f"is NNx's fp16 flag and contradicts precision={self.precision!r}; give one of them",
            )

    @property
    def resolved_task(self) -> TaskSpec:
        """The explicit task, else the one the loss implies."""
        return self.task or TaskSpec(kind=self.loss.task_kind)

    @property
    def builtin(self) -> bool:
        """Whether ``net`` names a built-in net (a ``Nets`` member)."""
        return isinstance(self.net, Nets)

    def _compared(self) -> tuple[Any, ...]:
        """The compared fields, an unset ``net`` as the ``Nets.FEED_FWD`` it stands for."""
        return tuple(
            Nets.FEED_FWD if f.name == "net" and self.net is None else getattr(self, f.name)
            for f in dataclasses.fields(self) if f.compare
        )

    def __eq__(self, other: object) -> bool:
        """Equal fields, an unset ``net`` equal to ``Nets.FEED_FWD``: both build the feed-forward
        net from ``NNParams``, write the same state and give the same run id (a state read back
        holds ``Nets.FEED_FWD``)."""
        if type(other) is not type(self):
            return NotImplemented
        return self._compared() == other._compared()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(self._compared())

    def state(self) -> dict[str, Any]:
        """The plain mapping of these params. An unset ``net`` is written as the feed-forward net
        it builds from ``NNParams`` (as when ``Nets.FEED_FWD`` was the default, so run ids hold);
        a ``RuntimeModule`` as its descriptor's mapping."""
        state = Params.state(self)
        if self.net is None:
            state["net"] = Nets.FEED_FWD.value
        elif isinstance(self.net, RuntimeModule):
            state["net"] = self.net.state()
        return state


@_positional_params
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



@_params
class NNOptimParams(Params):
    """Optimizer: kind, learning rate, momentum (float for SGD, (b1, b2) for Adam; default
    (0.9, 0.999) or 0.0), decay, clipping, gradient accumulation and optional parameter groups."""

    name: Optims = param(Optims.ADAM, check=member(Optims))
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


@_positional_params
class OptimizerFactorySpec(Params):
    """An optimizer built by a registered factory: ``OptimizerFactorySpec("lion", 1, {"betas": [0.9,
    0.99]})``, named by ``NNOptimFactoryParams(factory=...)``. The spec holds no code (a run naming
    it loads without the factory); ``register_optimizer_factory(id, version, factory)`` provides it
    to the processes that train. ``config`` holds JSON-like values and is part of the run id."""

    id: str = param(check=text())
    version: int = param(1, check=count(1))
    config: Mapping[str, Any] = param(factory=dict, check=_json_like)


@_params
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


@_params
class NNSchedulerParams(Params):
    """Learning-rate schedule. ``kind=None`` is reduce-on-plateau with the five plateau fields;
    other kinds use their own fields (defaults derived from the run length n in clock ticks:
    ``step_size`` ``max(1, n // 3)``, ``T_max`` and ``total_steps`` n, ``warmup_steps``
    ``max(1, n // 10)``; docs/metrics.md §4). ``clock`` is
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


RESUME_MODES = ("auto", "stateful", "weights_only", "reshard")  # reshard: a DDP run on another world size


def _loader(path: str, value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise ParamsError(path, f"must be a re-iterable of batches, got {type(value).__name__}")
    if iter(value) is value:
        raise ParamsError(
            path, "is a one-shot iterator; pass something that can be iterated every epoch (a DataLoader or a list)"
        )
    return value


def check_extra_metrics(path: str, value: Any) -> Mapping[str, Callable[[Any, Any], float]] | None:
    """``extra_metrics`` as a read-only ``{name: fn(y_true, y_pred) -> float}`` (None stays None)."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ParamsError(path, f"must be a mapping {{name: fn(y_true, y_pred) -> float}}, got {type(value).__name__}")
    for name, fn in value.items():
        text()(f"{path} key", name)
        if not callable(fn):
            raise ParamsError(f"{path}[{name!r}]", f"must be a function fn(y_true, y_pred) -> float, got {fn!r}")
    return FrozenDict(value)


def _monitor_hint(value: Any) -> str:
    split, _, metric = str(value).rpartition(".")
    if split in ("val", "train"):  # the "val.loss" spelling of EarlyStopping(monitor=...)
        return f"monitor=MonitorSpec({metric!r}, split={split!r})"
    return f"monitor=MonitorSpec({value!r})"


_METRICS = items(instance(MetricSpec, lambda v: f"metrics=(MetricSpec({v!r}),) — one MetricSpec per metric"))
_MONITOR = optional(instance(MonitorSpec, _monitor_hint))


def _optim_hint(value: Any) -> str:
    return f"NNOptimParams(name={value!r}, max_lr=...)" if isinstance(value, str) else "NNOptimParams(...)"


def _optim(path: str, value: Any) -> AnyOptimParams:
    """An ``NNOptimParams`` or ``NNOptimFactoryParams``; a saved state is read back as the one its
    keys name (a ``factory`` entry marks a registered optimizer)."""
    if isinstance(value, (NNOptimParams, NNOptimFactoryParams)):
        return value
    if isinstance(value, Mapping):
        return (NNOptimFactoryParams if "factory" in value else NNOptimParams).from_state(value)
    raise ParamsError(
        path, f"expects NNOptimParams or NNOptimFactoryParams, got {type(value).__name__} {value!r}; write {_optim_hint(value)}"
    )


def _scheduler_hint(value: Any) -> str:
    return f"NNSchedulerParams(kind={value!r}, ...)" if isinstance(value, str) else "NNSchedulerParams(...)"


@_params
class _Training(Params):
    """What ``NNTrainParams`` and ``NNTrainerParams`` share: epochs, seed, data id, metrics,
    monitor, lineage, and the runtime-only loaders, extra metrics and resume settings."""

    n_epochs: int = param(check=count(1))
    seed: int | None = param(None, check=optional(count(0)), state=OMIT)
    data_id: str | None = param(None, check=optional(text()), state=OMIT)
    save_phase_checkpoints: bool = param(True, check=flag(), state=OMIT)
    metrics: tuple[MetricSpec, ...] = param((), check=_METRICS, state=OMIT)
    monitor: MonitorSpec | None = param(None, check=_MONITOR, state=OMIT)
    parent_run_id: str | None = param(None, check=optional(text()), state=OMIT)
    parent_checkpoint: str | None = param(None, check=optional(text()), state=OMIT)
    # runtime-only below: never part of the run id
    train_loader: Any = param(None, check=_loader, state=RUNTIME, compare=False)
    val_loader: Any = param(None, check=_loader, state=RUNTIME, compare=False)
    extra_metrics: Mapping[str, Callable[[Any, Any], float]] | None = param(
        None, check=check_extra_metrics, state=RUNTIME, compare=False
    )
    resume_from_run_id: str | None = param(None, check=optional(text()), state=RUNTIME)
    resume_from_checkpoint: str = param("last", check=text(), state=RUNTIME)
    resume_mode: str = param("auto", check=one_of(*RESUME_MODES), state=RUNTIME)
    resume: str | None = param(None, check=optional(one_of("auto")), state=RUNTIME)
    overwrite_existing: bool = param(False, check=flag(), state=RUNTIME)
    progress: bool | None = param(None, check=optional(flag()), state=RUNTIME)

    def _check(self) -> None:
        if self.resume_from_run_id is not None and self.parent_run_id is None:
            # lineage is part of the configuration, so a resumed run always gets a new id
            object.__setattr__(self, "parent_run_id", self.resume_from_run_id)
            object.__setattr__(self, "parent_checkpoint", self.resume_from_checkpoint)
        if self.monitor is not None:  # a name no run computes is refused here, before any loader is read
            self.monitor.check_names(self.metrics, f"{type(self).__name__}.monitor")
        if self.resume is not None and self.resume_from_run_id is not None:
            raise ParamsError(
                f"{type(self).__name__}.resume", "give either resume='auto' or resume_from_run_id, not both"
            )

    def with_train_loader(self, loader: Any) -> Any:
        """A copy with ``train_loader`` set."""
        return dataclasses.replace(self, train_loader=loader)

    def with_val_loader(self, loader: Any) -> Any:
        """A copy with ``val_loader`` set."""
        return dataclasses.replace(self, val_loader=loader)


@_params
class NNTrainParams(_Training):
    """How to train: epochs, optimizer, scheduler, seed, metrics/monitor, loaders and resume.

    ``train_loader`` / ``val_loader`` are any re-iterable of ``(inputs, targets)`` batches and,
    like ``extra_metrics`` (``{name: fn(y_true, y_pred) -> float}``), are not part of the run id.
    ``resume_from_run_id`` starts a new run (its lineage is in the id) from a checkpoint of
    another; ``resume="auto"`` continues this configuration's own newest commit.
    """

    optim: AnyOptimParams = param(factory=NNOptimParams, check=_optim)
    scheduler: NNSchedulerParams = param(factory=NNSchedulerParams, check=instance(NNSchedulerParams, _scheduler_hint))


def _optimizer_name(path: str, name: Any) -> str:
    try:
        return validate_tag(name)
    except InvalidRunIdError as exc:
        raise ParamsError(path, f"optimizer name {name!r} must be a slug (letters, digits, '.', '_', '-')") from exc


def _named(what: str, check: Callable[[str, Any], Any]) -> Any:
    """A read-only ``{slug name: value}`` sorted by name, each value ``check``ed (``what`` names it)."""

    def run(path: str, value: Any) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            raise ParamsError(path, f"must be a mapping name → {what}, got {type(value).__name__}")
        named = {_optimizer_name(path, name): check(f"{path}[{name!r}]", v) for name, v in value.items()}
        return FrozenDict(sorted(named.items()))

    return run


def _no_schedulers() -> Mapping[str, NNSchedulerParams]:
    return FrozenDict()


@_params
class NNTrainerParams(_Training):
    """How a ``Trainer`` trains: epochs, named optimizers and their schedulers, seed, metrics,
    monitor, loaders and resume. ``schedulers`` keys must be optimizer names; an optimizer without
    one gets the default (reduce-on-plateau) schedule. ``auto_step_schedulers=False`` leaves every
    schedule to the step function. Loaders, extra metrics and resume settings are not part of the
    run id."""

    optims: Mapping[str, AnyOptimParams] = param(check=_named("NNOptimParams", _optim))
    schedulers: Mapping[str, NNSchedulerParams] = param(
        factory=_no_schedulers, check=_named("NNSchedulerParams", instance(NNSchedulerParams, _scheduler_hint)), state=OMIT
    )
    auto_step_schedulers: bool = param(True, check=flag(), state=OMIT)

    def _check(self) -> None:
        if not self.optims:
            raise ParamsError("NNTrainerParams.optims", "needs at least one named optimizer")
        unknown = sorted(set(self.schedulers) - set(self.optims))
        if unknown:
            raise ParamsError(
                "NNTrainerParams.schedulers", f"{unknown} name no optimizer (optimizers: {sorted(self.optims)})"
            )
        _Training._check(self)

    @classmethod
    def builder(cls) -> NNTrainerParamsBuilder:
        """A fluent builder: ``NNTrainerParams.builder().n_epochs(5).optimizer("main", optim).build()``."""
        return NNTrainerParamsBuilder(cls)

    @property
    def primary(self) -> str:
        """The sorted-first optimizer name: its LR is the records' ``lr`` and ``ctx.optimizer``."""
        return next(iter(self.optims))

    def scheduler_for(self, name: str) -> NNSchedulerParams:
        """The schedule of optimizer ``name`` (the default plateau schedule when none is given)."""
        return self.schedulers.get(name) or NNSchedulerParams()

    def representative(self) -> NNTrainParams:
        """The primary optimizer's view as ``NNTrainParams`` (the run's ``train`` section)."""
        shared = {f.name: getattr(self, f.name) for f in dataclasses.fields(_Training)}
        primary = self.primary
        return NNTrainParams(**shared, optim=self.optims[primary], scheduler=self.scheduler_for(primary))
