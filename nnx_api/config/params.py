"""Frozen, keyword-only parameter classes with lossless ``state()`` / ``from_state()`` round trips.

``state()`` is a plain YAML-safe mapping and is what a run id hashes. Fields added after a class
first shipped are omitted while they hold their default (``omit`` below), so ids never drift.
Runtime-only fields (loaders, overwrite flags, resume mode, progress) never enter ``state()``.
Every value is checked at construction; a bad one raises :class:`ParamsError` naming the field.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

import attrs

from nnx_core.errors import ParamsError
from nnx_core.validate import check_choice, check_float, check_int, check_str, optional, validator
from nnx_api.config.enums import Activations, Devices, Losses, Nets, Optims, Schedulers

_RUNTIME = {"runtime": True}
_OMIT = {"omit": True}


def _encode(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if hasattr(value, "state") and attrs.has(type(value)):
        return value.state()
    if isinstance(value, (tuple, list)):
        return [_encode(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _encode(v) for k, v in sorted(value.items())}
    return value


class _Params:
    """Shared ``state`` / ``from_state`` / ``replace`` for params classes (attrs metadata driven)."""

    def state(self) -> dict[str, Any]:
        """Plain mapping: runtime fields never, ``omit`` fields only when not default."""
        out: dict[str, Any] = {}
        for field in attrs.fields(type(self)):
            if field.metadata.get("runtime"):
                continue
            value = getattr(self, field.name)
            if field.metadata.get("omit") and value == _default_of(field, self):
                continue
            out[field.name] = _encode(value)
        return out

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> Any:
        """Rebuild from :meth:`state` (unknown keys are refused with the field path)."""
        if not isinstance(state, Mapping):
            raise ParamsError(cls.__name__, f"state must be a mapping, got {type(state).__name__}")
        fields = {f.name: f for f in attrs.fields(cls)}
        kwargs = {}
        for key, value in state.items():
            field = fields.get(key)
            if field is None or field.metadata.get("runtime"):
                raise ParamsError(f"{cls.__name__}.{key}", "unknown field in saved state")
            decode = field.metadata.get("decode")
            kwargs[key] = decode(value) if decode and value is not None else value
        return cls(**kwargs)

    def replace(self, **changes: Any) -> Any:
        """A validated copy with ``changes`` applied."""
        return attrs.evolve(self, **changes)


def _default_of(field: attrs.Attribute, instance: Any) -> Any:
    default = field.default
    if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
        return default.factory(instance) if default.takes_self else default.factory()
    return default


def _tuple_of_ints(value: Any) -> tuple[int, ...]:
    return tuple(value)


def _hidden_dims(instance: Any, attribute: Any, value: tuple[int, ...]) -> None:
    for i, dim in enumerate(value):
        check_int(f"NNParams.hidden_dims[{i}]", dim, minimum=1)


@attrs.frozen(kw_only=True)
class NNParams(_Params):
    """Shape of the built-in feed-forward net: ``input_dim → hidden_dims... → output_dim``."""

    input_dim: int = attrs.field(validator=validator(check_int, minimum=1))
    output_dim: int = attrs.field(validator=validator(check_int, minimum=1))
    hidden_dims: tuple[int, ...] = attrs.field(default=(), converter=_tuple_of_ints, validator=_hidden_dims)
    dropout_prob: float = attrs.field(default=0.0, validator=validator(check_float, minimum=0.0, maximum=1.0))
    activation: Activations = attrs.field(
        default=Activations.RELU, converter=Activations, metadata={"decode": Activations}
    )

    @property
    def dims(self) -> list[int]:
        """``[input_dim, *hidden_dims, output_dim]``."""
        return [self.input_dim, *self.hidden_dims, self.output_dim]


TASK_KINDS = ("categorical", "multilabel", "regression")


@attrs.frozen(kw_only=True)
class TaskSpec(_Params):
    """What the model's output means: categorical (with ``ignore_index``), multilabel or regression."""

    kind: str = attrs.field(validator=validator(check_choice, choices=TASK_KINDS))
    n: int | None = attrs.field(default=None, validator=optional(check_int, minimum=1), metadata=_OMIT)
    ignore_index: int | None = attrs.field(default=None, validator=optional(check_int), metadata=_OMIT)
    threshold: float = attrs.field(
        default=0.5, validator=validator(check_float, minimum=0.0, maximum=1.0, exclusive_min=True), metadata=_OMIT
    )
    labels: tuple[str, ...] | None = attrs.field(
        default=None, converter=attrs.converters.optional(tuple), metadata=_OMIT
    )

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


PRECISION_MODES = ("fp32", "bf16", "fp16")


@attrs.frozen(kw_only=True)
class PrecisionPolicy(_Params):
    """Autocast policy: ``fp32`` (default), ``bf16`` (CPU/CUDA), ``fp16`` (CUDA, GradScaler).

    ``fallback="fp32"`` runs full precision where the mode is unsupported instead of refusing.
    Parameters always stay float32.
    """

    mode: str = attrs.field(default="fp32", validator=validator(check_choice, choices=PRECISION_MODES))
    fallback: str = attrs.field(default="error", validator=validator(check_choice, choices=("error", "fp32")))


def _task(value: Any) -> TaskSpec:
    return value if isinstance(value, TaskSpec) else TaskSpec.from_state(value)


def _precision(value: Any) -> PrecisionPolicy:
    return value if isinstance(value, PrecisionPolicy) else PrecisionPolicy.from_state(value)


@attrs.frozen(kw_only=True)
class NNModelParams(_Params):
    """The model's net kind, device, loss, and (optional) task and precision policy."""

    net: Nets = attrs.field(default=Nets.FEED_FWD, converter=Nets, metadata={"decode": Nets})
    device: Devices = attrs.field(default=Devices.CPU, converter=Devices, metadata={"decode": Devices})
    loss: Losses = attrs.field(default=Losses.CROSS_ENTROPY, converter=Losses, metadata={"decode": Losses})
    task: TaskSpec | None = attrs.field(
        default=None, converter=attrs.converters.optional(_task), metadata={**_OMIT, "decode": _task}
    )
    precision: PrecisionPolicy | None = attrs.field(
        default=None, converter=attrs.converters.optional(_precision), metadata={**_OMIT, "decode": _precision}
    )

    @property
    def resolved_task(self) -> TaskSpec:
        """The explicit task, else the one the loss implies."""
        return self.task or TaskSpec(kind=self.loss.task_kind)


def _momentum_default(self: Any) -> Any:
    return (0.9, 0.999) if Optims(self.name).is_adam else 0.0


def _momentum(value: Any) -> Any:
    return tuple(float(v) for v in value) if isinstance(value, (list, tuple)) else value


def _check_momentum(instance: NNOptimParams, attribute: Any, value: Any) -> None:
    path = "NNOptimParams.momentum"
    if instance.name.is_adam:
        if not isinstance(value, tuple) or len(value) != 2:
            raise ParamsError(path, f"{instance.name.value} needs (beta1, beta2), got {value!r}")
        for i, beta in enumerate(value):
            check_float(f"{path}[{i}]", beta, minimum=0.0, maximum=1.0, exclusive_max=True)
    else:
        check_float(path, value, minimum=0.0)


@attrs.frozen(kw_only=True)
class NNParamGroupSpec(_Params):
    """Parameters whose dotted name matches ``name_pattern`` (fnmatch) get their own lr / decay."""

    name_pattern: str = attrs.field(validator=validator(check_str))
    lr: float | None = attrs.field(
        default=None, validator=optional(check_float, minimum=0.0, exclusive_min=True), metadata=_OMIT
    )
    lr_multiplier: float | None = attrs.field(
        default=None, validator=optional(check_float, minimum=0.0, exclusive_min=True), metadata=_OMIT
    )
    weight_decay: float | None = attrs.field(default=None, validator=optional(check_float, minimum=0.0), metadata=_OMIT)

    def __attrs_post_init__(self) -> None:
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


def _groups(value: Any) -> tuple[NNParamGroupSpec, ...] | None:
    if value is None:
        return None
    return tuple(v if isinstance(v, NNParamGroupSpec) else NNParamGroupSpec.from_state(v) for v in value)


@attrs.frozen(kw_only=True)
class NNOptimParams(_Params):
    """Optimizer: kind, learning rate, momentum (float for SGD, (b1, b2) for Adam), decay, clipping,
    gradient accumulation and optional parameter groups."""

    name: Optims = attrs.field(default=Optims.ADAM, converter=Optims, metadata={"decode": Optims})
    max_lr: float = attrs.field(default=1e-2, validator=validator(check_float, minimum=0.0, exclusive_min=True))
    momentum: Any = attrs.field(
        default=attrs.Factory(_momentum_default, takes_self=True),
        converter=_momentum,
        validator=_check_momentum,
        metadata={"decode": _momentum},
    )
    weight_decay: float = attrs.field(default=0.0, validator=validator(check_float, minimum=0.0))
    eps: float = attrs.field(
        default=1e-8, validator=validator(check_float, minimum=0.0, exclusive_min=True), metadata=_OMIT
    )
    grad_clip_norm: float | None = attrs.field(
        default=None, validator=optional(check_float, minimum=0.0, exclusive_min=True), metadata=_OMIT
    )
    accumulate_grad_batches: int = attrs.field(default=1, validator=validator(check_int, minimum=1), metadata=_OMIT)
    param_groups: tuple[NNParamGroupSpec, ...] | None = attrs.field(
        default=None, converter=_groups, metadata={**_OMIT, "decode": _groups}
    )

    def __attrs_post_init__(self) -> None:
        if not self.name.is_adam and self.eps != 1e-8:
            raise ParamsError("NNOptimParams.eps", f"only Adam-family optimizers take eps, not {self.name.value}")


CLOCKS = ("epoch", "optimizer_update")


@attrs.frozen(kw_only=True)
class NNSchedulerParams(_Params):
    """Learning-rate schedule. ``kind=None`` is reduce-on-plateau with the five plateau fields;
    other kinds use their own fields (defaults derived from the run length). ``clock`` is
    ``"epoch"`` (one tick per epoch) or ``"optimizer_update"`` (one per committed update)."""

    min_lr: float = attrs.field(default=1e-7, validator=validator(check_float, minimum=0.0))
    factor: float = attrs.field(default=0.95, validator=validator(check_float, minimum=0.0, exclusive_min=True))
    patience: int = attrs.field(default=8, validator=validator(check_int, minimum=0))
    cooldown: int = attrs.field(default=2, validator=validator(check_int, minimum=0))
    threshold: float = attrs.field(default=1e-3, validator=validator(check_float, minimum=0.0))
    kind: Schedulers | None = attrs.field(
        default=None, converter=attrs.converters.optional(Schedulers), metadata={**_OMIT, "decode": Schedulers}
    )
    step_size: int | None = attrs.field(default=None, validator=optional(check_int, minimum=1), metadata=_OMIT)
    T_max: int | None = attrs.field(default=None, validator=optional(check_int, minimum=1), metadata=_OMIT)
    max_lr: float | None = attrs.field(
        default=None, validator=optional(check_float, minimum=0.0, exclusive_min=True), metadata=_OMIT
    )
    total_steps: int | None = attrs.field(default=None, validator=optional(check_int, minimum=1), metadata=_OMIT)
    warmup_steps: int | None = attrs.field(default=None, validator=optional(check_int, minimum=1), metadata=_OMIT)
    clock: str = attrs.field(default="epoch", validator=validator(check_choice, choices=CLOCKS), metadata=_OMIT)

    @property
    def resolved_kind(self) -> Schedulers:
        """``kind``, with None meaning reduce-on-plateau."""
        return self.kind or Schedulers.REDUCE_LR_ON_PLATEAU

    def __attrs_post_init__(self) -> None:
        if self.resolved_kind is Schedulers.REDUCE_LR_ON_PLATEAU and self.clock == "optimizer_update":
            raise ParamsError(
                "NNSchedulerParams.clock",
                "reduce-on-plateau reads an epoch metric and cannot run on the optimizer_update clock; "
                "use clock='epoch' or another kind",
            )


def _optim(value: Any) -> NNOptimParams:
    return value if isinstance(value, NNOptimParams) else NNOptimParams.from_state(value)


def _scheduler(value: Any) -> NNSchedulerParams:
    return value if isinstance(value, NNSchedulerParams) else NNSchedulerParams.from_state(value)


RESUME_MODES = ("auto", "stateful", "weights_only")


def _check_loader(instance: Any, attribute: Any, value: Any) -> None:
    if value is None:
        return
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise ParamsError(f"NNTrainParams.{attribute.name}", f"must be a re-iterable of batches, got {type(value).__name__}")
    if iter(value) is value:
        raise ParamsError(
            f"NNTrainParams.{attribute.name}",
            "is a one-shot iterator; pass something that can be iterated every epoch (a DataLoader or a list)",
        )


def _metrics(value: Any) -> tuple[Any, ...]:
    from nnx_api.config.metrics import MetricSpec

    return tuple(v if isinstance(v, MetricSpec) else MetricSpec.from_state(v) for v in value or ())


def _monitor(value: Any) -> Any:
    from nnx_api.config.metrics import MonitorSpec

    return value if isinstance(value, MonitorSpec) else MonitorSpec.from_state(value)


@attrs.frozen(kw_only=True)
class NNTrainParams(_Params):
    """How to train: epochs, optimizer, scheduler, seed, metrics/monitor, loaders and resume.

    ``train_loader`` / ``val_loader`` are any re-iterable of ``(inputs, targets)`` batches and are
    not part of the run id. ``resume_from_run_id`` starts a new run (its lineage is in the id) from
    a checkpoint of another; ``resume="auto"`` continues this configuration's own newest commit.
    """

    n_epochs: int = attrs.field(validator=validator(check_int, minimum=1))
    optim: NNOptimParams = attrs.field(factory=NNOptimParams, converter=_optim, metadata={"decode": _optim})
    scheduler: NNSchedulerParams = attrs.field(
        factory=NNSchedulerParams, converter=_scheduler, metadata={"decode": _scheduler}
    )
    seed: int | None = attrs.field(default=None, validator=optional(check_int, minimum=0), metadata=_OMIT)
    data_id: str | None = attrs.field(default=None, validator=optional(check_str), metadata=_OMIT)
    save_phase_checkpoints: bool = attrs.field(default=True, metadata=_OMIT)
    metrics: tuple[Any, ...] = attrs.field(default=(), converter=_metrics, metadata={**_OMIT, "decode": _metrics})
    monitor: Any = attrs.field(
        default=None, converter=attrs.converters.optional(_monitor), metadata={**_OMIT, "decode": _monitor}
    )
    parent_run_id: str | None = attrs.field(default=None, validator=optional(check_str), metadata=_OMIT)
    parent_checkpoint: str | None = attrs.field(default=None, validator=optional(check_str), metadata=_OMIT)
    # runtime-only below: never part of the run id
    train_loader: Any = attrs.field(default=None, eq=False, validator=_check_loader, metadata=_RUNTIME)
    val_loader: Any = attrs.field(default=None, eq=False, validator=_check_loader, metadata=_RUNTIME)
    resume_from_run_id: str | None = attrs.field(default=None, validator=optional(check_str), metadata=_RUNTIME)
    resume_from_checkpoint: str = attrs.field(default="last", validator=validator(check_str), metadata=_RUNTIME)
    resume_mode: str = attrs.field(
        default="auto", validator=validator(check_choice, choices=RESUME_MODES), metadata=_RUNTIME
    )
    resume: str | None = attrs.field(
        default=None, validator=optional(check_choice, choices=("auto",)), metadata=_RUNTIME
    )
    overwrite_existing: bool = attrs.field(default=False, metadata=_RUNTIME)
    progress: bool | None = attrs.field(default=None, metadata=_RUNTIME)

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.save_phase_checkpoints, bool):
            raise ParamsError("NNTrainParams.save_phase_checkpoints", "must be a bool")
        if self.resume_from_run_id is not None and self.parent_run_id is None:
            # lineage is part of the configuration, so a resumed run always gets a new id
            object.__setattr__(self, "parent_run_id", self.resume_from_run_id)
            object.__setattr__(self, "parent_checkpoint", self.resume_from_checkpoint)
        if self.resume is not None and self.resume_from_run_id is not None:
            raise ParamsError("NNTrainParams.resume", "give either resume='auto' or resume_from_run_id, not both")

    def with_train_loader(self, loader: Any) -> NNTrainParams:
        """A copy with ``train_loader`` set."""
        return attrs.evolve(self, train_loader=loader)

    def with_val_loader(self, loader: Any) -> NNTrainParams:
        """A copy with ``val_loader`` set."""
        return attrs.evolve(self, val_loader=loader)
