"""The training params: ``NNTrainParams`` (how ``NNModel.train`` trains: epochs, one optimizer
and its schedule, seed, metrics and monitor, loaders, resume) and ``NNTrainerParams`` (a
``Trainer``'s named optimizers and their schedules), both built on what they share (``_Training``).

Loaders, extra metrics and the resume settings are runtime-only: never part of the run id. The
params conventions (state, ``OMIT``, checks at construction) are those of ``nnx_api.config.params``;
the optimizer and schedule params they hold live in ``nnx_api.config.optim_params``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from nnx_core.convert import OMIT, RUNTIME
from nnx_core.errors import InvalidRunIdError, ParamsError
from nnx_core.identity import validate_tag
from nnx_core.monitor_spec import MonitorSpec
from nnx_api.config.base import FrozenDict, Params, count, flag, instance, items, one_of, optional, param, params_class, text
from nnx_api.config.builders import NNTrainerParamsBuilder
from nnx_api.config.metrics import MetricSpec
from nnx_api.config.optim_params import AnyOptimParams, NNOptimFactoryParams, NNOptimParams, NNSchedulerParams

RESUME_MODES = ("auto", "stateful", "weights_only", "reshard")  # reshard: a DDP run on another world size


def _loader(path: str, value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise ParamsError(path, f"must be a re-iterable of batches, got {type(value).__name__}")
    # only an iterator (it has __next__) can be one-shot: iter() on a DataLoader would start an epoch and draw
    # its base seed from the global torch stream (or its generator), moving the first epoch's shuffle
    if hasattr(value, "__next__") and iter(value) is value:
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


@params_class
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


@params_class
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


@params_class
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
