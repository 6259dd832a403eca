"""``ExperimentPlan``: one immutable description of an experiment, fitted as many times as asked.

A plan holds the network (``NNParams``, or a module factory), ``NNModelParams``,
``NNTrainParams``, the data, a seed and callbacks. It never changes: ``with_*`` returns a new
plan, so variants branch from a base without copying code::

    base = ExperimentPlan(net=..., model=..., train=..., data=PlanData(train=make_loader))
    wide = base.with_net(hidden_dims=(256,)).with_optim(max_lr=3e-3)

``validate()`` is pure (builds nothing, calls no factory) and returns every problem as a
``Diagnostic`` naming its field path. ``probe(batch)`` builds a throw-away model and runs one
no-grad forward and loss on a batch, leaving every RNG stream, the cuDNN flags and the
environment as they were. ``fit()`` is seed → factories → ``NNModel`` → ``train`` with the salt
``"plan-attempt:<attempt id>"``: every fit is a distinct run, and fitting the same attempt id
twice is refused (``FileExistsError``).

Borrowed objects (a loader, a callback instance) are shared by every fit and keep their state;
give factories (zero-argument callables) for fresh ones per fit. What ``fit()`` and ``probe()``
return (``FitResult``, ``SplitMetrics``, ``ProbeResult``) lives in ``nnx_api.experiments.results``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import torch

from nnx_core.errors import NNxError, ParamsError
from nnx_core.identity import validate_run_id, validate_tag
from nnx_core.monitor_spec import MonitorSpec
from nnx_adapters.pytorch import state as torch_state
from nnx_adapters.pytorch.batches import split_batch, to_device
from nnx_adapters.pytorch.metrics import resolve
from nnx_api.callbacks import Callback, EarlyStopping
from nnx_api.config.metrics import MetricSpec, monitor_problems
from nnx_api.config.optim_params import NNOptimParams, NNSchedulerParams
from nnx_api.config.params import NNModelParams, NNParams
from nnx_api.config.train_params import RESUME_MODES, NNTrainParams
from nnx_api.distributed.process_group import refuse_process_group
from nnx_api.experiments.results import FitResult, ProbeResult, selected_metrics
from nnx_api.model import NNModel
from nnx_api.runs.run import NNRun
from nnx_api.runs.store import runs_root

SALT_PREFIX = "plan-attempt:"


@attrs.frozen
class Diagnostic:
    """One problem of a plan: the field path (``train.monitor``, ``data.train``) and why."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class PlanError(NNxError, ValueError, TypeError):
    """A plan that cannot be fitted; ``diagnostics`` lists every problem with its field path. It is
    a ``ValueError`` and a ``TypeError``, the two errors the params classes raise."""

    def __init__(self, diagnostics: Sequence[Diagnostic]) -> None:
        self.diagnostics = tuple(diagnostics)
        super().__init__("the plan is not valid:\n  - " + "\n  - ".join(str(d) for d in self.diagnostics))

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.diagnostics,))


class PlanValidation(tuple[Diagnostic, ...]):
    """What ``validate()`` found: the diagnostics in field order (a tuple of them), with ``ok``,
    ``paths`` and ``raise_for_errors()``."""

    @property
    def diagnostics(self) -> tuple[Diagnostic, ...]:
        """Every problem found."""
        return tuple(self)

    @property
    def ok(self) -> bool:
        """True when the plan can be fitted."""
        return not self

    @property
    def paths(self) -> tuple[str, ...]:
        """The field path of each problem."""
        return tuple(d.path for d in self)

    def raise_for_errors(self) -> None:
        """Raise :class:`PlanError` listing every diagnostic, if there is any."""
        if self:
            raise PlanError(self)


class _Marker:
    """A named marker (``KEEP``: leave the field as it is; ``INHERIT``: the training params' own)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


KEEP: Any = _Marker("KEEP")
INHERIT: Any = _Marker("INHERIT")


def _is_factory(value: Any) -> bool:
    """A zero-argument factory, as opposed to a loader (which is iterable)."""
    return callable(value) and not hasattr(value, "__iter__")


def _materialize(value: Any) -> Any:
    return value() if _is_factory(value) else value


@attrs.frozen(kw_only=True)
class PlanData:
    """Training and validation data: each a re-iterable loader of ``(inputs, targets)`` batches, or
    a zero-argument factory returning one (called once per fit). ``train=None``: the training
    params' ``train_loader``; ``val`` left out (``INHERIT``): their ``val_loader``; ``val=None``:
    no validation."""

    train: Any = None
    val: Any = INHERIT

    def loaders(self, params: NNTrainParams | None = None) -> tuple[Any, Any]:
        """``(train_loader, val_loader)``, calling factories (``params``: where inherited ones come from)."""
        train = _materialize(self.train) if self.train is not None else getattr(params, "train_loader", None)
        val = getattr(params, "val_loader", None) if self.val is INHERIT else _materialize(self.val)
        return train, val


@attrs.frozen(kw_only=True)
class Resume:
    """``resuming(...)``: warm-start every fit from run ``run_id``'s ``checkpoint``."""

    run_id: str
    checkpoint: str = "last"
    mode: str | None = None
    epochs: str | None = None


def _tuple(value: Any) -> tuple[Any, ...]:
    return tuple(value or ())


@attrs.frozen(kw_only=True)
class ExperimentPlan:
    """An immutable experiment: net (or module factory), model and training params, data, seed,
    callbacks, step functions or objective, components and a resume point. ``ExperimentPlan()``
    is the empty plan every ``with_*`` chain can start from. See the module docstring."""

    train: NNTrainParams | None = None
    net: NNParams | None = None
    model: NNModelParams = attrs.field(factory=NNModelParams)
    data: PlanData | None = None
    data_identity: Any = INHERIT
    seed: int | None = None
    callbacks: tuple[Any, ...] = attrs.field(default=(), converter=_tuple)
    callback_factories: tuple[Callable[[], Any], ...] = attrs.field(default=(), converter=_tuple)
    train_step_fn: Any = None
    eval_step_fn: Any = None
    objective: Any = None
    components: tuple[Any, ...] = attrs.field(default=(), converter=_tuple)
    batch_adapter: Any = None
    resume: Resume | None = None
    module_factory: Callable[[], torch.nn.Module] | None = None
    root: Path | None = attrs.field(default=None, converter=attrs.converters.optional(Path))
    storage: Any = attrs.field(default=None, eq=False)

    # ------------------------------------------------------------------ branching
    def with_net(self, net: NNParams | None = None, /, **changes: Any) -> ExperimentPlan:
        """A plan with another ``NNParams`` (or this one's with ``changes``)."""
        return attrs.evolve(self, net=_changed(net if net is not None else self.net, changes, "net"))

    def with_model(self, model: NNModelParams | None = None, /, **changes: Any) -> ExperimentPlan:
        """A plan with another ``NNModelParams`` (or this one's with ``changes``)."""
        return attrs.evolve(self, model=_changed(model if model is not None else self.model, changes, "model"))

    def with_train(self, train: NNTrainParams | None = None, /, **changes: Any) -> ExperimentPlan:
        """A plan with another ``NNTrainParams`` (or this one's with ``changes``)."""
        return attrs.evolve(self, train=_changed(train if train is not None else self.train, changes, "train"))

    def _edit_train(self, what: str, **changes: Any) -> ExperimentPlan:
        if self.train is None:
            raise PlanError([Diagnostic("train", f"set NNTrainParams with with_train(...) before {what}")])
        return self.with_train(**changes)

    def with_epochs(self, n_epochs: int) -> ExperimentPlan:
        """A plan training ``n_epochs`` epochs."""
        return self._edit_train("with_epochs", n_epochs=n_epochs)

    def with_optim(self, optim: NNOptimParams | None = None, /, **changes: Any) -> ExperimentPlan:
        """A plan with another optimizer (or this one's with ``changes``, e.g. ``max_lr=3e-3``)."""
        current = optim if optim is not None else getattr(self.train, "optim", None)
        return self._edit_train("with_optim", optim=_changed(current, changes, "train.optim"))

    def with_scheduler(self, scheduler: NNSchedulerParams | None = None, /, **changes: Any) -> ExperimentPlan:
        """A plan with another schedule (or this one's with ``changes``)."""
        current = scheduler if scheduler is not None else getattr(self.train, "scheduler", None)
        return self._edit_train("with_scheduler", scheduler=_changed(current, changes, "train.scheduler"))

    def with_metrics(self, *metrics: Any, monitor: Any = KEEP) -> ExperimentPlan:
        """A plan declaring ``metrics`` (``MetricSpec``s, or one sequence of them) and, when given,
        ``monitor`` (``monitor=None`` drops it)."""
        if len(metrics) == 1 and not isinstance(metrics[0], MetricSpec) and isinstance(metrics[0], Iterable):
            metrics = tuple(metrics[0])  # NNx's with_metrics([spec, ...])
        changes: dict[str, Any] = {"metrics": metrics}
        if monitor is not KEEP:
            changes["monitor"] = monitor
        return self._edit_train("with_metrics", **changes)

    def with_monitor(self, monitor: MonitorSpec | None) -> ExperimentPlan:
        """A plan whose BEST/plateau/EarlyStopping follow ``monitor``."""
        return self._edit_train("with_monitor", monitor=monitor)

    def with_extra_metrics(self, extra_metrics: Mapping[str, Callable[[Any, Any], float]] | None) -> ExperimentPlan:
        """A plan scoring ``{name: fn(y_true, y_pred)}`` (borrowed functions; a read-only copy of the mapping)."""
        return self._edit_train("with_extra_metrics", extra_metrics=extra_metrics)

    def with_data(self, train: Any = KEEP, val: Any = KEEP, *, identity: Any = KEEP) -> ExperimentPlan:
        """A plan with other data (loaders or zero-argument loader factories); what is not given is
        kept (``with_data(val=...)`` changes only the validation data). ``val=None``: no
        validation; ``train=None``: the training params' loader. ``identity`` becomes
        ``NNTrainParams.data_id`` (part of the run id; ``None`` records none)."""
        data = self.data or PlanData()
        data = attrs.evolve(data, **{k: v for k, v in (("train", train), ("val", val)) if v is not KEEP})
        return attrs.evolve(self, data=data, data_identity=self.data_identity if identity is KEEP else identity)

    def with_seed(self, seed: int | None) -> ExperimentPlan:
        """A plan seeded with ``seed`` (initial weights, loader order, dropout); it overrides the
        training params' own seed, and ``None`` falls back to it."""
        return attrs.evolve(self, seed=seed)

    def with_callbacks(self, *callbacks: Any) -> ExperimentPlan:
        """A plan with these (borrowed) callback instances."""
        return attrs.evolve(self, callbacks=callbacks)

    def with_callback_factories(self, *factories: Callable[[], Any]) -> ExperimentPlan:
        """A plan building fresh callbacks per fit (each factory returns a callback or a list)."""
        return attrs.evolve(self, callback_factories=factories)

    def with_step_fns(self, train_step_fn: Any = KEEP, eval_step_fn: Any = KEEP) -> ExperimentPlan:
        """A plan with these (borrowed) step functions; the one not given is kept (None drops it)."""
        changes = {k: v for k, v in (("train_step_fn", train_step_fn), ("eval_step_fn", eval_step_fn)) if v is not KEEP}
        return attrs.evolve(self, **changes)

    def with_objective(self, objective: Any) -> ExperimentPlan:
        """A plan whose updates an objective owns (borrowed)."""
        return attrs.evolve(self, objective=objective)

    def with_components(self, *components: Any) -> ExperimentPlan:
        """A plan checkpointing these (borrowed) components with every fit."""
        return attrs.evolve(self, components=components)

    def with_batch_adapter(self, adapter: Any) -> ExperimentPlan:
        """A plan building its model with ``NNModel(..., batch_adapter=adapter)``."""
        return attrs.evolve(self, batch_adapter=adapter)

    def with_provenance(self, manifest: Any) -> ExperimentPlan:
        """Refused: provenance manifests are out of scope (every run keeps its attempt record)."""
        raise ParamsError(
            "ExperimentPlan.with_provenance",
            "provenance manifests (nnx.provenance) are out of scope here; every fit records its attempt in the run's "
            "attempt record, and its configuration is the run id's content",
        )

    def resuming(
        self, run_id: str, *, checkpoint: str = "last", mode: str | None = None, epochs: str | None = None
    ) -> ExperimentPlan:
        """A plan whose fits warm-start from run ``run_id``'s ``checkpoint`` (a new run with that
        lineage; the source is never written). ``mode`` defaults to the training params'
        ``resume_mode``; ``epochs="additional"`` (each fit trains ``n_epochs`` more) is the only
        reading of ``n_epochs`` here."""
        checkpoint = getattr(checkpoint, "value", checkpoint)  # a Checkpoints member
        return attrs.evolve(self, resume=Resume(run_id=run_id, checkpoint=checkpoint, mode=mode, epochs=epochs))

    with_resuming = resuming

    def without_resume(self) -> ExperimentPlan:
        """A plan without a resume point."""
        return attrs.evolve(self, resume=None)

    def with_module(self, factory: Callable[[], torch.nn.Module] | None) -> ExperimentPlan:
        """A plan training a fresh custom module per fit instead of the built-in net."""
        return attrs.evolve(self, module_factory=factory, net=None if factory is not None else self.net)

    def with_root(self, root: str | os.PathLike[str] | None) -> ExperimentPlan:
        """A plan writing its runs under ``root``."""
        return attrs.evolve(self, root=root)

    def with_storage(self, storage: Any) -> ExperimentPlan:
        """A plan keeping its runs in ``storage`` (a ``Storage`` adapter, e.g.
        ``nnx_api.storage.MemoryStorage()``; default: the file system under ``root``)."""
        return attrs.evolve(self, storage=storage)

    # ------------------------------------------------------------------ checks
    def validate(self) -> PlanValidation:
        """Every problem, each with its field path; empty (``.ok``) when the plan can be fitted.
        Pure: no model is built, no factory is called, no loader is iterated."""
        out: list[Diagnostic] = []
        add = lambda path, message: out.append(Diagnostic(path, message))  # noqa: E731
        train, model = self.train, self.model
        if train is None:
            add("train", "no training params: give train=NNTrainParams(...) or .with_train(...)")
        elif not isinstance(train, NNTrainParams):
            add("train", f"must be NNTrainParams, got {type(train).__name__}")
        if not isinstance(model, NNModelParams):
            add("model", f"must be NNModelParams, got {type(model).__name__}")
        if (self.net is None) == (self.module_factory is None):
            add("net", "give exactly one of net=NNParams(...) and module_factory=<callable returning a module>")
        elif self.net is not None and not isinstance(self.net, NNParams):
            add("net", f"must be NNParams, got {type(self.net).__name__}")
        elif self.module_factory is not None and not callable(self.module_factory):
            add("module_factory", "must be a zero-argument callable returning a torch.nn.Module")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0):
            add("seed", f"must be a non-negative int or None, got {self.seed!r}")
        for path, message in self._data_problems():
            add(path, message)
        for i, cb in enumerate(self.callbacks):
            if not isinstance(cb, Callback) and not callable(cb):
                add(f"callbacks[{i}]", f"{cb!r} is neither a Callback nor a callable")
        for i, factory in enumerate(self.callback_factories):
            if not callable(factory):
                add(f"callback_factories[{i}]", f"must be a zero-argument callable, got {type(factory).__name__}")
        for path, message in self._step_problems():
            add(path, message)
        if isinstance(train, NNTrainParams) and isinstance(model, NNModelParams):
            kind = model.resolved_task.kind
            if model.task is not None and model.loss.task_kind != kind:
                add("model.loss", f"{model.loss.value} suits a {model.loss.task_kind} task, not {kind}")
            width = self.net.output_dim if isinstance(self.net, NNParams) else None
            if width is not None and model.task is not None and model.task.n not in (None, width):
                add("model.task.n", f"is {model.task.n} but the net has output_dim={self.net.output_dim}")
            out.extend(Diagnostic("train.metrics", p) for p in resolve(train.metrics, kind))
            monitor = monitor_problems(train.monitor, train.metrics, kind, self._has_val())
            out.extend(Diagnostic("train.monitor", p) for p in monitor)
            for i, cb in enumerate(self.callbacks):
                if isinstance(cb, EarlyStopping) and isinstance(cb.monitor, MonitorSpec) and cb.monitor != train.monitor:
                    add(f"callbacks[{i}].monitor", f"{cb.monitor} differs from the run's monitor {train.monitor}")
        for path, message in self._resume_problems():
            add(path, message)
        return PlanValidation(out)

    def _has_val(self) -> bool:
        val = self.data.val if self.data is not None else INHERIT
        return (getattr(self.train, "val_loader", None) is not None) if val is INHERIT else val is not None

    def _data_problems(self) -> Iterator[tuple[str, str]]:
        if self.data is not None and not isinstance(self.data, PlanData):
            yield "data", f"must be PlanData, got {type(self.data).__name__}"
            return
        data = self.data or PlanData()
        if data.train is None and getattr(self.train, "train_loader", None) is None:
            yield "data.train", "no training data: give .with_data(train=...) or NNTrainParams(train_loader=...)"
        for name in ("train", "val"):
            value = getattr(data, name)
            if value is None or value is INHERIT or _is_factory(value):
                continue
            if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
                kind = type(value).__name__
                yield f"data.{name}", f"must be a re-iterable loader or a zero-argument factory, got {kind}"
            elif hasattr(value, "__next__") and iter(value) is value:  # iter() on a DataLoader would draw a seed
                yield f"data.{name}", "is a one-shot iterator; give a loader (re-iterable) or a factory"
        identity = self.data_identity
        if identity is not INHERIT and identity is not None and (not isinstance(identity, str) or not identity.strip()):
            yield "data.identity", f"must be a non-blank string or None, got {identity!r}"

    def _step_problems(self) -> Iterator[tuple[str, str]]:
        for name in ("train_step_fn", "eval_step_fn", "objective"):
            value = getattr(self, name)
            if value is not None and not callable(value):
                yield name, f"must be callable, got {type(value).__name__}"
        if self.train_step_fn is not None and self.objective is not None:
            yield "objective", "give either a train_step_fn or an objective (one update owner per run), not both"
        for i, component in enumerate(self.components):
            if not hasattr(component, "component_spec"):
                yield f"components[{i}]", f"{component!r} has no component_spec() (not a checkpointable component)"

    def _resume_problems(self) -> Iterator[tuple[str, str]]:
        resume = self.resume
        if resume is None:
            return
        try:
            validate_run_id(resume.run_id)
            validate_tag(resume.checkpoint)
        except (NNxError, TypeError) as exc:
            yield "resume", str(exc)
        if resume.mode is not None and resume.mode not in RESUME_MODES:
            yield "resume.mode", f"must be one of {RESUME_MODES} or None, got {resume.mode!r}"
        if resume.epochs not in (None, "additional"):
            yield "resume.epochs", (
                f"{resume.epochs!r} is not supported: a resumed run trains n_epochs more (epochs='additional'); "
                "set n_epochs to the epochs still to train"
            )

    def check(self) -> None:
        """Raise :class:`PlanError` listing every diagnostic, if there is any."""
        self.validate().raise_for_errors()

    # ------------------------------------------------------------------ building
    def build_model(self) -> NNModel:
        """A fresh model (initial weights from the global torch RNG)."""
        extra = {"batch_adapter": self.batch_adapter} if self.batch_adapter is not None else {}
        if self.module_factory is not None:
            return NNModel(params=self.model, module=self.module_factory(), **extra)
        return NNModel(self.net, self.model, **extra)

    @property
    def effective_seed(self) -> int:
        """The seed a fit uses: the plan's, else the training params' own, else 0 (fits are
        reproducible by default)."""
        for seed in (self.seed, getattr(self.train, "seed", None)):
            if seed is not None:
                return seed
        return 0

    def train_params(self) -> NNTrainParams:
        """The training params of one fit: loaders from the data (factories called), the effective
        seed, the data identity and the resume point."""
        params = self.train
        assert params is not None  # validate() refuses a plan without one
        train_loader, val_loader = (self.data or PlanData()).loaders(params)
        changes: dict[str, Any] = {"train_loader": train_loader, "val_loader": val_loader, "seed": self.effective_seed}
        if self.data_identity is not INHERIT:
            changes["data_id"] = self.data_identity
        if self.resume is not None:
            changes.update(resume_from_run_id=self.resume.run_id, resume_from_checkpoint=self.resume.checkpoint)
            if self.resume.mode is not None:
                changes["resume_mode"] = self.resume.mode
        return params.replace(**changes)

    def build_callbacks(self) -> list[Any]:
        """The borrowed callbacks, then each factory's fresh ones."""
        out = list(self.callbacks)
        for factory in self.callback_factories:
            made = factory()
            out.extend(made if isinstance(made, (list, tuple)) else [made])
        return out

    def probe(self, batch: Any) -> ProbeResult:
        """One no-grad forward + loss of a throw-away model on ``batch`` (``(inputs, targets)``).

        Every RNG stream (Python, NumPy, torch, CUDA), the cuDNN flags and ``os.environ`` are
        restored afterwards, so probing never shifts a later fit."""
        self.check_model()
        with _preserved_global_state():
            torch_state.set_seed(self.effective_seed)
            model = self.build_model()
            inputs, target = split_batch(batch)
            inputs, target = to_device(inputs, model.device), to_device(target, model.device)
            model.net.eval()
            with torch.no_grad(), model.autocast_context()():
                output = model.net(*inputs) if isinstance(inputs, (tuple, list)) else model.net(inputs)
                model.task_adapter.check(output, target)
                loss_sum, count = model.task_adapter.loss_terms(output, target)
            loss = float(loss_sum) / count if count else None
            parameters = list(model.net.parameters())
            return ProbeResult(
                output_shape=tuple(output.shape), loss=loss, count=int(count),
                output_dtype=str(output.dtype).removeprefix("torch."), target_shape=tuple(target.shape),
                n_parameters=sum(p.numel() for p in parameters),
                n_trainable=sum(p.numel() for p in parameters if p.requires_grad),
            )

    def check_model(self) -> None:
        """Raise :class:`PlanError` for the model-related diagnostics only (what ``probe`` needs)."""
        roots = ("net", "model", "module_factory", "seed")
        problems = [d for d in self.validate() if d.path.split(".")[0] in roots]
        if problems:
            raise PlanError(problems)

    # ------------------------------------------------------------------ fitting
    def fit(self, attempt: str | None = None) -> FitResult:
        """Validate, then seed → factories → ``NNModel`` → ``train`` as attempt ``attempt`` (a new
        id when None). Each attempt is its own run (salt ``"plan-attempt:<id>"``); an attempt id
        that already has a run raises ``FileExistsError``. Refused inside a process group of
        several ranks (a fit trains in one process)."""
        refuse_process_group("ExperimentPlan.fit")
        self.check()
        attempt_id = validate_tag(attempt) if attempt is not None else uuid.uuid4().hex[:16]
        torch_state.set_seed(self.effective_seed)
        params = self.train_params()
        callbacks = self.build_callbacks()
        model = self.build_model()
        salt = SALT_PREFIX + attempt_id
        base = runs_root(self.root)
        expected = NNRun(config=model.run_config(params, salt), root=base, storage=self.storage)
        if expected.files().exists():
            raise FileExistsError(
                f"attempt {attempt_id!r} already has run {expected.id} under {base}; use a new attempt id"
            )
        run = model.train(
            params, callbacks=callbacks, salt=salt, root=base, train_step_fn=self.train_step_fn,
            eval_step_fn=self.eval_step_fn, objective=self.objective, components=list(self.components), storage=self.storage,
        )
        return FitResult(model=model, run=run, metrics=selected_metrics(run), attempt_id=attempt_id)


def _changed(value: Any, changes: Mapping[str, Any], path: str) -> Any:
    if not changes:
        return value
    if value is None or not dataclasses.is_dataclass(value):
        raise ParamsError(path, "there is nothing to change; give a whole value")
    return dataclasses.replace(value, **changes)


@contextlib.contextmanager
def _preserved_global_state() -> Iterator[None]:
    rng = torch_state.capture_rng()
    cudnn = (torch.backends.cudnn.enabled, torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic)
    deterministic = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    env = dict(os.environ)
    try:
        yield
    finally:
        torch_state.restore_rng(rng)
        torch.backends.cudnn.enabled, torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = cudnn
        torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)
        for key in set(os.environ) - set(env):
            del os.environ[key]
        os.environ.update({k: v for k, v in env.items() if os.environ.get(k) != v})


__all__ = ["Diagnostic", "ExperimentPlan", "INHERIT", "KEEP", "PlanData", "PlanError", "PlanValidation", "Resume"]
