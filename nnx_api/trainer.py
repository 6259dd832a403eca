"""``Trainer``: one model, several named optimizers (GANs, actor/critic, encoder/head splits).

    trainer = nnx.Trainer(model)
    run = trainer.train(
        nnx.NNTrainerParams(n_epochs=20, optims={"gen": gen_opt, "disc": disc_opt}, train_loader=loader),
        trainer_step_fn=gan_step,              # or objective=... (the shared update engine)
    )

Each optimizer owns a strict, disjoint set of parameters (its ``param_groups``; with one optimizer
and no groups, every trainable parameter), has at most one scheduler and counts its own committed
updates. A step reports each optimizer step with ``ctx.report_update(name)``. The run follows the
same pipeline, lifecycle, commit protocol and callbacks as ``NNModel.train`` (``nnx_api.launch``:
NNModel is the one-optimizer case); its identity adds a ``trainer`` section, and every checkpoint holds each
named optimizer's and scheduler's state, so a Trainer run resumes exactly. A Trainer checkpoint
resumes only through ``Trainer`` and an NNModel checkpoint only through ``NNModel`` (unless
``resume_mode="weights_only"``).
"""

from __future__ import annotations

import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from nnx_core.errors import InvalidRunIdError, ParamsError
from nnx_core.identity import validate_tag
from nnx_core.validate import check_choice, check_int, check_str, optional, validator
from nnx_api.config.params import (
    RESUME_MODES,
    NNOptimParams,
    NNSchedulerParams,
    NNTrainParams,
    _check_loader,
    _metrics,
    _monitor,
    _Params,
)
from nnx_api.distributed import refuse_process_group
from nnx_api.launch import TrainingEntry, launch
from nnx_api.model import NNModel
from nnx_api.runs.run import NNRun
from nnx_api.training.steps import TrainerStepContext

_RUNTIME = {"runtime": True}
_OMIT = {"omit": True}


def _name(path: str, name: Any) -> str:
    try:
        return validate_tag(name)
    except InvalidRunIdError as exc:
        raise ParamsError(path, f"optimizer name {name!r} must be a slug (letters, digits, '.', '_', '-')") from exc


def _named(path: str, value: Any, cls: Any) -> Mapping[str, Any]:
    """A read-only ``{slug name: cls}`` from a mapping of ``cls`` instances or their states."""
    if not isinstance(value, Mapping):
        raise ParamsError(path, f"must be a mapping name → {cls.__name__}, got {type(value).__name__}")
    out = {_name(path, name): v if isinstance(v, cls) else cls.from_state(v) for name, v in sorted(value.items())}
    return types.MappingProxyType(out)


def _optims(value: Any) -> Mapping[str, NNOptimParams]:
    return _named("NNTrainerParams.optims", value, NNOptimParams)


def _schedulers(value: Any) -> Mapping[str, NNSchedulerParams]:
    return _named("NNTrainerParams.schedulers", value, NNSchedulerParams)


def _no_schedulers() -> Mapping[str, NNSchedulerParams]:
    return types.MappingProxyType({})


@attrs.frozen(kw_only=True)
class NNTrainerParams(_Params):
    """How a ``Trainer`` trains: epochs, named optimizers and their schedulers, seed, metrics,
    monitor, loaders and resume. ``schedulers`` keys must be optimizer names; an optimizer without
    one gets the default (reduce-on-plateau) schedule. ``auto_step_schedulers=False`` leaves every
    schedule to the step function. Loaders and resume settings are not part of the run id."""

    n_epochs: int = attrs.field(validator=validator(check_int, minimum=1))
    optims: Mapping[str, NNOptimParams] = attrs.field(converter=_optims, metadata={"decode": _optims})
    schedulers: Mapping[str, NNSchedulerParams] = attrs.field(
        factory=_no_schedulers, converter=_schedulers, metadata={**_OMIT, "decode": _schedulers}
    )
    seed: int | None = attrs.field(default=None, validator=optional(check_int, minimum=0), metadata=_OMIT)
    data_id: str | None = attrs.field(default=None, validator=optional(check_str), metadata=_OMIT)
    save_phase_checkpoints: bool = attrs.field(default=True, metadata=_OMIT)
    auto_step_schedulers: bool = attrs.field(default=True, metadata=_OMIT)
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
    resume_mode: str = attrs.field(default="auto", validator=validator(check_choice, choices=RESUME_MODES), metadata=_RUNTIME)
    resume: str | None = attrs.field(default=None, validator=optional(check_choice, choices=("auto",)), metadata=_RUNTIME)
    overwrite_existing: bool = attrs.field(default=False, metadata=_RUNTIME)
    progress: bool | None = attrs.field(default=None, metadata=_RUNTIME)

    def __attrs_post_init__(self) -> None:
        if not self.optims:
            raise ParamsError("NNTrainerParams.optims", "needs at least one named optimizer")
        unknown = sorted(set(self.schedulers) - set(self.optims))
        if unknown:
            raise ParamsError("NNTrainerParams.schedulers", f"{unknown} name no optimizer (optimizers: {sorted(self.optims)})")
        for flag in ("save_phase_checkpoints", "auto_step_schedulers"):
            if not isinstance(getattr(self, flag), bool):
                raise ParamsError(f"NNTrainerParams.{flag}", "must be a bool")
        if self.resume_from_run_id is not None and self.parent_run_id is None:
            object.__setattr__(self, "parent_run_id", self.resume_from_run_id)
            object.__setattr__(self, "parent_checkpoint", self.resume_from_checkpoint)
        if self.resume is not None and self.resume_from_run_id is not None:
            raise ParamsError("NNTrainerParams.resume", "give either resume='auto' or resume_from_run_id, not both")

    @property
    def primary(self) -> str:
        """The sorted-first optimizer name: its LR is the records' ``lr`` and ``ctx.optimizer``."""
        return next(iter(self.optims))

    def scheduler_for(self, name: str) -> NNSchedulerParams:
        """The schedule of optimizer ``name`` (the default plateau schedule when none is given)."""
        return self.schedulers.get(name) or NNSchedulerParams()

    def representative(self) -> NNTrainParams:
        """The primary optimizer's view as ``NNTrainParams`` (the run's ``train`` section)."""
        primary = self.primary
        return NNTrainParams(
            n_epochs=self.n_epochs,
            optim=self.optims[primary],
            scheduler=self.scheduler_for(primary),
            seed=self.seed,
            data_id=self.data_id,
            save_phase_checkpoints=self.save_phase_checkpoints,
            metrics=self.metrics,
            monitor=self.monitor,
            parent_run_id=self.parent_run_id,
            parent_checkpoint=self.parent_checkpoint,
            train_loader=self.train_loader,
            val_loader=self.val_loader,
            resume_from_run_id=self.resume_from_run_id,
            resume_from_checkpoint=self.resume_from_checkpoint,
            resume_mode=self.resume_mode,
            resume=self.resume,
            overwrite_existing=self.overwrite_existing,
            progress=self.progress,
        )

    def with_train_loader(self, loader: Any) -> NNTrainerParams:
        """A copy with ``train_loader`` set."""
        return attrs.evolve(self, train_loader=loader)

    def with_val_loader(self, loader: Any) -> NNTrainerParams:
        """A copy with ``val_loader`` set."""
        return attrs.evolve(self, val_loader=loader)


class Trainer:
    """Train an ``NNModel`` with several named optimizers (see the module docstring)."""

    def __init__(self, model: Any) -> None:
        if not isinstance(model, NNModel):
            raise ParamsError("Trainer.model", f"must be an NNModel, got {type(model).__name__}")
        self.model = model

    def run_config(self, params: NNTrainerParams, salt: str | None) -> dict[str, Any]:
        """The configuration whose content address is the run id (model, ``train``, ``trainer``)."""
        config = {**self.model.state(), "train": params.representative().state(), "trainer": params.state()}
        if salt is not None:
            if not isinstance(salt, str) or not salt.strip():
                raise ParamsError("salt", "must be a non-blank string")
            config["salt"] = salt
        return config

    # ------------------------------------------------------------ training
    def train(
        self,
        params: NNTrainerParams,
        trainer_step_fn: Callable[[TrainerStepContext], Any] | None = None,
        callbacks: Sequence[Any] | None = None,
        salt: str | None = None,
        root: Any = None,
        components: Sequence[Any] | None = None,
        objective: Any = None,
        eval_step_fn: Callable[..., Any] | None = None,
        history: Any = None,
        storage: Any = None,
    ) -> NNRun:
        """Train into ``<root>/<run id>/`` and return the committed :class:`NNRun` (as NNModel.train;
        ``storage=`` a ``Storage`` adapter, default the file system under ``root``)."""
        refuse_process_group("Trainer.train")  # data parallelism covers NNModel.train(distributed=DDP()) only
        if not isinstance(params, NNTrainerParams):
            raise ParamsError("params", f"must be NNTrainerParams, got {type(params).__name__}")
        return launch(
            TrainingEntry(
                kind="trainer", name="Trainer.train", model=self.model, params=params, train=params.representative(),
                config=self.run_config(params, salt), optims=dict(params.optims),
                schedulers={name: params.scheduler_for(name) for name in params.optims}, primary=params.primary,
                strict_groups=True, auto_step=params.auto_step_schedulers, trainer_step_fn=trainer_step_fn,
                objective=objective, eval_step_fn=eval_step_fn, callbacks=callbacks or (), components=components or (),
                history=history, root=root, storage=storage, trainer=self,
            )
        )


__all__ = ["NNTrainerParams", "Trainer", "TrainerStepContext"]
