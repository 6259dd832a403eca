"""``Trainer``: one model, several named optimizers (GANs, actor/critic, encoder/head splits).

    trainer = nnx.Trainer(model)
    run = trainer.train(
        nnx.NNTrainerParams(n_epochs=20, optims={"gen": gen_opt, "disc": disc_opt}, train_loader=loader),
        trainer_step_fn=gan_step,              # or objective=... (the shared update engine)
    )

Each optimizer owns a strict, disjoint set of parameters (its ``param_groups``; with one optimizer
and no groups, every trainable parameter), has at most one scheduler and counts its own committed
updates. A step reports each optimizer step with ``ctx.report_update(name)``. The run follows the
same lifecycle, commit protocol and callbacks as ``NNModel.train`` (it *is* a ``TrainingSession``
with named optimizers); its identity adds a ``trainer`` section, and every checkpoint holds each
named optimizer's and scheduler's state, so a Trainer run resumes exactly. A Trainer checkpoint
resumes only through ``Trainer`` and an NNModel checkpoint only through ``NNModel`` (unless
``resume_mode="weights_only"``).
"""

from __future__ import annotations

import contextlib
import fnmatch
import functools
import math
import types
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import torch

from nnx_core.commit import RunFiles
from nnx_core.errors import (
    ParamsError,
    ScheduleBudgetError,
    TrainingInputError,
    UpdateOwnerError,
)
from nnx_core.records import EvaluationDataPoint
from nnx_core.schedules import (
    ClockComponent,
    PlateauRule,
    budget_problems,
    ticks_per_epoch,
)
from nnx_adapters.storage.fs import FileStorage
from nnx_adapters.pytorch.metrics import resolve
from nnx_adapters.pytorch.optim import (
    TorchClock,
    TorchOptimizer,
    build_optimizer,
    build_scheduler,
    named_params,
)
from nnx_api.callbacks import EarlyStopping, normalize_callbacks
from nnx_api.runs.journal import check_history
from nnx_api.config.metrics import monitor_problems
from nnx_api.training.objectives import ObjectiveSession, check_update_owner
from nnx_api.config.params import NNOptimParams, NNTrainerParams
from nnx_api.runs.run import NNRun, runs_root

@attrs.define(kw_only=True)
class TrainerStepContext:
    """What a ``trainer_step_fn(ctx)`` receives for one batch.

    The step owns zero_grad, forwards, losses, backwards and ``optimizers[name].step()``; after
    each real step it calls ``ctx.report_update(name)`` once (``finalize_step(loss, ctx,
    paradigm=..., optimizer=name)`` does all of that). It returns the batch's
    ``EvaluationDataPoint``.
    """

    model: Any
    batch: Any
    optimizers: Mapping[str, torch.optim.Optimizer]
    schedulers: Mapping[str, Any]
    batch_idx: int
    epoch_idx: int
    is_last_batch: bool
    precision: str
    grad_clip_norms: Mapping[str, float | None]
    accumulate_grad_batches: Mapping[str, int]
    report_update: Callable[[str], None]
    session: Any = attrs.field(repr=False)


class TrainerSession(ObjectiveSession):
    """A ``TrainingSession`` over named optimizers, one schedule each."""

    def __init__(
        self,
        *,
        trainer_params: NNTrainerParams,
        optimizers: Mapping[str, TorchOptimizer],
        trainer_step_fn: Callable[[TrainerStepContext], Any] | None,
        objective: Any,
        trainer: Any,
        **base: Any,
    ) -> None:
        tp = trainer_params
        self.primary = tp.primary
        self.trainer_params = tp
        self.trainer_step_fn = trainer_step_fn
        optims = tp.optims
        super().__init__(
            objective=objective,
            named_optimizers=optimizers,
            accumulate=optims[tp.primary].accumulate_grad_batches,
            max_norms={n: o.grad_clip_norm for n, o in optims.items()},
            **base,
        )
        # the primary's schedule was built by TrainingSession from the representative params
        self.schedules: dict[str, Any] = {}
        for name, opt in self.named_opts.items():
            if name == self.primary:
                self.schedules[name] = self.plateau if self.plateau is not None else self.clock
            else:
                self.schedules[name] = self._build_schedule(name, opt)
        clocks = [
            ClockComponent(s, f"nnx.scheduler_clock.{n}")
            for n, s in self.schedules.items()
            if isinstance(s, TorchClock) and s.clock == "optimizer_update"
        ]
        self.components = self._collect_components([*base["components"], *([self.engine] if self.engine else []), *clocks])
        self.ctx.optimizers = types.MappingProxyType({n: o.optimizer for n, o in self.named_opts.items()})
        self.ctx.trainer = trainer
        self._step_optimizers = self.ctx.optimizers
        self._clip_norms = types.MappingProxyType({n: o.grad_clip_norm for n, o in optims.items()})
        self._accumulate = types.MappingProxyType({n: o.accumulate_grad_batches for n, o in optims.items()})
        self._step_schedulers = types.MappingProxyType(
            {n: (s.scheduler if isinstance(s, TorchClock) else s) for n, s in self.schedules.items()}
        )

    def _build_schedule(self, name: str, opt: TorchOptimizer) -> Any:
        sched = self.trainer_params.scheduler_for(name)
        kind = sched.resolved_kind.value
        if kind == "reduce_lr_on_plateau":
            return PlateauRule(factor=sched.factor, patience=sched.patience, cooldown=sched.cooldown, min_lr=sched.min_lr)
        return build_scheduler(
            opt.optimizer, kind, clock=sched.clock, horizon=self.horizon_of(name), min_lr=sched.min_lr, factor=sched.factor,
            patience=sched.patience, cooldown=sched.cooldown, threshold=sched.threshold, step_size=sched.step_size,
            T_max=sched.T_max, max_lr=sched.max_lr, total_steps=sched.total_steps, warmup_steps=sched.warmup_steps,
        )

    def horizon_of(self, name: str) -> int:
        """Optimizer ``name``'s run length in scheduler ticks."""
        tp = self.trainer_params
        sched = tp.scheduler_for(name)
        if sched.clock == "epoch":
            return tp.n_epochs
        try:
            batches = len(tp.train_loader)
        except TypeError:
            explicit = sched.total_steps or sched.T_max or sched.step_size
            if explicit is None:
                raise ScheduleBudgetError(
                    f"the train_loader has no len(); give optimizer {name!r}'s update-clock schedule an explicit "
                    "horizon (total_steps, T_max or step_size)"
                ) from None
            return explicit
        return tp.n_epochs * math.ceil(batches / tp.optims[name].accumulate_grad_batches)

    # ------------------------------------------------------------ names → schedules
    def clock_for(self, name: str) -> Any:
        sched = self.schedules.get(name) if hasattr(self, "schedules") else self.clock
        return sched if isinstance(sched, TorchClock) else None

    def auto_step(self) -> bool:
        return self.trainer_params.auto_step_schedulers

    def scheduler_object(self) -> Any:
        sched = self.schedules[self.primary]
        return sched.scheduler if isinstance(sched, TorchClock) else sched

    # ------------------------------------------------------------ steps
    def train_epoch(self, epoch: int) -> None:
        super().train_epoch(epoch)
        if self.stopped_update or not self.auto_step():
            return
        for name, count in self.epoch_counts.items():
            clock = self.clock_for(name)
            if name != self.primary and count == 0 and clock is not None and clock.clock == "optimizer_update":
                warnings.warn(
                    f"epoch {epoch} reported no update of optimizer {name!r} on the optimizer_update clock; a "
                    f"trainer_step_fn must call ctx.report_update({name!r}) after each optimizers[{name!r}].step()",
                    RuntimeWarning,
                    stacklevel=2,
                )

    def _default_step(self, batch: Any, epoch: int, batch_idx: int, is_last: bool) -> None:
        if self.trainer_step_fn is None:
            super()._default_step(batch, epoch, batch_idx, is_last)
            return
        ctx = TrainerStepContext(
            model=self.model,
            batch=batch,
            optimizers=self._step_optimizers,
            schedulers=self._step_schedulers,
            batch_idx=batch_idx,
            epoch_idx=epoch,
            is_last_batch=is_last,
            precision=self.model.precision,
            grad_clip_norms=self._clip_norms,
            accumulate_grad_batches=self._accumulate,
            report_update=lambda name: self._report(name, epoch, batch_idx),
            session=self,
        )
        record = self.trainer_step_fn(ctx)
        if not isinstance(record, EvaluationDataPoint):
            raise TrainingInputError(
                "trainer_step_fn must return an EvaluationDataPoint (e.g. nnx.EvaluationDataPoint(loss=...)), "
                f"got {type(record).__name__}"
            )
        self._append(record)

    def tick_epoch_clocks(self, epoch: int) -> None:
        """Every optimizer's epoch-clock schedule steps once; plateau schedules follow the decision."""
        if not self.auto_step():
            return
        d = self.decision
        for name, sched in self.schedules.items():
            if isinstance(sched, PlateauRule):
                assert d is not None
                groups = self.named_opts[name].optimizer.param_groups
                sched.step(epoch, d.improved, d.status, [g["lr"] for g in groups], lambda i, lr, g=groups: g[i].__setitem__("lr", lr))
            elif sched.clock == "epoch":
                sched.tick()

    # ------------------------------------------------------------ checkpoints
    def payload(self, epoch: int) -> dict[str, Any]:
        """NNModel's payload plus every named optimizer, schedule and update count."""
        out = super().payload(epoch)
        out["kind"] = "trainer"
        # an NNModel resume sees a stateful checkpoint of another kind and refuses it
        out["optimizer"] = {"type": "nnx.Trainer", "topology": None, "names": list(self.named_opts)}
        out["schedule"] = {"type": "nnx.Trainer"}
        out["optimizers"] = {n: o.state() for n, o in self.named_opts.items()}
        out["schedules"] = {n: s.state() for n, s in self.schedules.items()}
        out["update_counts"] = dict(self.update_counts)
        return out

    def _optimizer_states(self) -> dict[str, Any]:
        return {n: o.state() for n, o in self.named_opts.items()}

    def _load_optimizer_states(self, states: Mapping[str, Any]) -> None:
        for name, opt in self.named_opts.items():
            opt.load_state(states[name])

    def _load_training_state(self, payload: Mapping[str, Any]) -> None:
        """Every named optimizer and schedule, and the update counters."""
        self._load_optimizer_states(payload["optimizers"])
        for name, sched in self.schedules.items():
            sched.load_state(payload["schedules"][name])
        self.update_count = int(payload["update_count"])
        self.update_counts = {n: int(c) for n, c in payload["update_counts"].items()}

    def _resume_problems(self, payload: Mapping[str, Any]) -> list[str]:
        if payload.get("kind") != "trainer":
            return [
                (
                    f"checkpoint was written by {payload.get('kind')!r}, not a Trainer; resume it with NNModel.train "
                    "(or use resume_mode='weights_only' to start from its weights)"
                )
            ]
        problems = []
        saved_opts, saved_scheds = payload["optimizers"], payload["schedules"]
        if set(saved_opts) != set(self.named_opts):
            return [f"checkpoint optimizers {sorted(saved_opts)} != this run's {sorted(self.named_opts)}"]
        for name, opt in self.named_opts.items():
            mine = opt.state()
            if saved_opts[name]["type"] != mine["type"]:
                problems.append(f"optimizer {name!r}: type {saved_opts[name]['type']} != {mine['type']}")
            if saved_opts[name]["topology"] != opt.topology():
                problems.append(f"optimizer {name!r}: parameter topology differs (names/shapes of its groups)")
            sched = self.schedules[name]
            saved = saved_scheds[name]
            if ("bad_epochs" in saved) != isinstance(sched, PlateauRule):
                problems.append(f"optimizer {name!r}: scheduler kind differs from the checkpoint's")
            elif isinstance(sched, TorchClock) and saved["type"] != sched.state()["type"]:
                problems.append(f"optimizer {name!r}: scheduler type {saved['type']} != {sched.state()['type']}")
        return problems + self._component_problems(payload["components"])


def _strict_groups(net: torch.nn.Module, name: str, optim: NNOptimParams, *, required: bool) -> tuple[list[dict], list[str]]:
    """Strict parameter groups of optimizer ``name``: each trainable parameter goes to the first
    spec matching it; unmatched parameters are not this optimizer's."""
    trainable = [(n, p) for n, p in net.named_parameters() if p.requires_grad]
    path = f"NNTrainerParams.optims[{name!r}].param_groups"
    if not optim.param_groups:
        if required:
            raise ParamsError(
                path,
                "with several optimizers every optimizer must declare param_groups (which parameters it owns); "
                "otherwise a parameter would be stepped by more than one optimizer",
            )
        return [{"params": [p for _, p in trainable]}], [n for n, _ in trainable]
    groups, taken = [], []
    for i, spec in enumerate(optim.param_groups):
        members = [(n, p) for n, p in trainable if n not in taken and fnmatch.fnmatch(n, spec.name_pattern)]
        if not members:
            raise ParamsError(f"{path}[{i}]", f"pattern {spec.name_pattern!r} matches no trainable parameter")
        groups.append({"params": [p for _, p in members], **spec.overrides(optim.max_lr)})
        taken.extend(n for n, _ in members)
    return groups, taken


class Trainer:
    """Train an ``NNModel`` with several named optimizers (see the module docstring)."""

    def __init__(self, model: Any) -> None:
        from nnx_api.model import NNModel

        if not isinstance(model, NNModel):
            raise ParamsError("Trainer.model", f"must be an NNModel, got {type(model).__name__}")
        self.model = model

    # ------------------------------------------------------------ checks (nothing written yet)
    def _check(self, params: Any, callbacks: Sequence[Any], step_fn: Any, objective: Any) -> None:
        if not isinstance(params, NNTrainerParams):
            raise ParamsError("params", f"must be NNTrainerParams, got {type(params).__name__}")
        check_update_owner(step_fn, objective, step_name="trainer_step_fn")
        if step_fn is None and objective is None:
            raise UpdateOwnerError(
                "Trainer.train needs an update owner: trainer_step_fn=<fn(ctx) -> EvaluationDataPoint> or "
                "objective=<fn(ctx) -> ObjectiveResult>; there is no default trainer step"
            )
        if step_fn is not None and not callable(step_fn):
            raise UpdateOwnerError(f"trainer_step_fn must be callable, got {type(step_fn).__name__}")
        if params.train_loader is None:
            raise TrainingInputError("NNTrainerParams.train_loader is missing; pass train_loader=<loader of batches>")
        with contextlib.suppress(TypeError):
            if len(params.train_loader) == 0:
                raise TrainingInputError("train_loader is empty; give it at least one batch")
        model = self.model
        if not any(p.requires_grad for p in model.net.parameters()):
            raise ParamsError("model", "no parameter requires grad; did you freeze every parameter?")
        kind = model.params.resolved_task.kind
        problems = resolve(params.metrics, kind, model.head.width)
        if problems:
            raise ParamsError("NNTrainerParams.metrics", "; ".join(problems))
        problems = monitor_problems(params.monitor, params.metrics, kind, params.val_loader is not None)
        if problems:
            raise ParamsError("NNTrainerParams.monitor", "; ".join(problems))
        for cb in callbacks:
            if isinstance(cb, EarlyStopping):
                cb.check_run(params.monitor)
        if objective is not None:
            accumulate = {n: o.accumulate_grad_batches for n, o in params.optims.items()}
            if len(set(accumulate.values())) > 1:
                raise ParamsError(
                    "NNTrainerParams.optims",
                    f"an objective commits every optimizer once per window, so accumulate_grad_batches must agree: {accumulate}",
                )
            check_run = getattr(objective, "check_run", None)
            if check_run is not None:
                check_run(model, optimizers=tuple(params.optims), callbacks=tuple(callbacks))

    def _optimizers(self, params: NNTrainerParams) -> dict[str, TorchOptimizer]:
        """Strict, disjoint optimizers; a parameter claimed by two optimizers is refused."""
        net = self.model.net
        several = len(params.optims) > 1
        owner: dict[str, str] = {}
        out = {}
        for name, optim in params.optims.items():
            groups, taken = _strict_groups(net, name, optim, required=several)
            for pname in taken:
                if pname in owner:
                    raise ParamsError(
                        f"NNTrainerParams.optims[{name!r}].param_groups",
                        f"parameter {pname!r} is already owned by optimizer {owner[pname]!r}; each parameter belongs "
                        "to one optimizer (make the patterns disjoint)",
                    )
                owner[pname] = name
            torch_opt = build_optimizer(
                optim.name.value, groups, lr=optim.max_lr, momentum=optim.momentum, weight_decay=optim.weight_decay,
                eps=optim.eps,
            )
            out[name] = TorchOptimizer(torch_opt, named_params(net))
        return out

    def _check_budgets(self, params: NNTrainerParams, source: Any, owns_windows: bool) -> None:
        try:
            batches: int | None = len(params.train_loader)
        except TypeError:
            batches = None
        resumed = source[0].get("schedules", {}) if source and source[1] else {}
        problems = []
        for name, optim in params.optims.items():
            sched = params.scheduler_for(name)
            per = ticks_per_epoch(sched.clock, batches, optim.accumulate_grad_batches, owns_windows)
            done = int(resumed.get(name, {}).get("ticks", 0)) if isinstance(resumed, Mapping) else 0
            problems += [
                f"optimizer {name!r}: {p}"
                for p in budget_problems(
                    kind=sched.resolved_kind.value, clock=sched.clock, total_steps=sched.total_steps,
                    n_epochs=params.n_epochs, epochs_this_call=params.n_epochs, per_epoch=per, done=done,
                )
            ]
        if problems:
            raise ScheduleBudgetError("; ".join(problems))

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
    ) -> NNRun:
        """Train into ``<root>/<run id>/`` and return the committed :class:`NNRun` (as NNModel.train)."""
        from nnx_api.distributed import refuse_process_group

        refuse_process_group("Trainer.train")  # data parallelism covers NNModel.train(distributed=DDP()) only
        model = self.model
        cbs = normalize_callbacks(callbacks)
        self._check(params, cbs, trainer_step_fn, objective)
        journal = check_history(history, cbs)  # history=HistoryJournal(...) (nnx_api.runs.journal)
        optimizers = self._optimizers(params)
        rep = params.representative()
        config = self.run_config(params, salt)
        base = runs_root(root)
        run = NNRun(config=config, root=base)
        storage = FileStorage(base)
        files = RunFiles(storage, run.id)
        source = model._resume_source(rep, base)
        self._check_budgets(params, source, owns_windows=objective is not None)
        factory = functools.partial(
            TrainerSession, trainer_params=params, optimizers=optimizers, trainer_step_fn=trainer_step_fn,
            objective=objective, trainer=self,
        )
        return model._admit_and_train(
            run, files, rep, cbs, None, eval_step_fn, components or (), source=source, journal=journal,
            session_factory=factory,
        )


__all__ = ["NNTrainerParams", "Trainer", "TrainerStepContext"]
