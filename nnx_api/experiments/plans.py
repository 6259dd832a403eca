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

import dataclasses
import os
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import torch

from nnx_core.errors import NNxError, ParamsError
from nnx_core.identity import validate_tag
from nnx_core.monitor_spec import MonitorSpec
from nnx_adapters.pytorch import state as torch_state
from nnx_adapters.pytorch.batches import split_batch, to_device
from nnx_adapters.pytorch.metrics import REGISTRY, resolve
from nnx_api.callbacks import Callback, EarlyStopping
from nnx_api.config.metrics import MetricSpec, monitor_problems
from nnx_api.config.optim_params import NNOptimParams, NNSchedulerParams
from nnx_api.config.params import ModelSpec, NNModelParams, NNParams, RuntimeModule
from nnx_api.config.train_params import NNTrainParams
from nnx_api.experiments.plan_parts import (
    INHERIT,
    KEEP,
    Diagnostic,
    PlanData,
    PlanError,
    PlanValidation,
    Resume,
    SingleProcessError,
    _binds,
    _changed,
    _frozen,
    _is_factory,
    _items,
    _preserved_global_state,
    _seed_live_streams,
    _source_problem,
    edit_train,
    horizon_problems,
    refuse_multi_rank,
    resume_problems,
)
from nnx_api.experiments.results import FitResult, ProbeResult, selected_metrics
from nnx_api.model import NNModel
from nnx_api.parts.models import registered_model_factories
from nnx_api.runs.run import NNRun
from nnx_api.runs.store import runs_root
from nnx_api.scope import refuse
from nnx_api.training.steps import streaming_eval_step

SALT_PREFIX = "plan-attempt:"


@dataclasses.dataclass(frozen=True, init=False)
class ExperimentPlan:
    """An immutable experiment: net (or module factory), model and training params, data
    (``train_data``, ``val_data``), seed, callbacks, step functions or objective, components and
    a resume point. ``ExperimentPlan()`` is the empty plan every ``with_*`` chain can start from.

    Borrowed objects — a loader, a callback instance, the ``extra_metrics`` functions, the step
    functions, the objective and the components — are shared by every fit and keep their state;
    a factory (a zero-argument callable) gives a fresh one per fit. ``pending`` holds the
    changes to the optimizer, schedule or extra metrics the training params refused
    (``with_optim("adam")``), as diagnostics ``validate()`` reports with every other problem;
    ``train`` keeps the last accepted value. See the module docstring."""

    net: NNParams | None
    model: NNModelParams
    train: NNTrainParams | None
    train_data: Any
    val_data: Any
    data_identity: Any
    seed: int | None
    callbacks: tuple[Any, ...]
    callback_factories: tuple[Callable[[], Any], ...]
    train_step_fn: Any
    eval_step_fn: Any
    objective: Any
    components: tuple[Any, ...]
    batch_adapter: Any
    resume: Resume | None
    module_factory: Callable[[], torch.nn.Module] | None
    root: Path | None
    storage: Any = dataclasses.field(compare=False)
    pending: tuple[Diagnostic, ...] = ()

    def __init__(  # noqa: PLR0913
        self, *, net: NNParams | None = None, model: NNModelParams | None = None, train: NNTrainParams | None = None,
        train_data: Any = None, val_data: Any = INHERIT, data_identity: Any = INHERIT, seed: int | None = None,
        callbacks: Any = (), callback_factories: Any = (), train_step_fn: Any = None, eval_step_fn: Any = None,
        objective: Any = None, components: Any = (), batch_adapter: Any = None, resume: Resume | None = None,
        module_factory: Callable[[], torch.nn.Module] | None = None, root: Any = None, storage: Any = None,
        data: PlanData | None = None, pending: Any = (),
    ) -> None:
        if data is not None:  # this implementation's spelling: data=PlanData(train=..., val=...)
            train_data, val_data = getattr(data, "train", data), getattr(data, "val", INHERIT)
        values = dict(
            net=net, model=NNModelParams() if model is None else model, train=train, train_data=train_data,
            val_data=val_data, data_identity=data_identity, seed=seed, callbacks=_frozen(callbacks),
            callback_factories=_frozen(callback_factories), train_step_fn=train_step_fn, eval_step_fn=eval_step_fn,
            objective=objective, components=_frozen(components), batch_adapter=batch_adapter, resume=resume,
            module_factory=module_factory, root=None if root is None else Path(root), storage=storage,
            pending=tuple(pending),
        )
        for name, value in values.items():
            object.__setattr__(self, name, value)

    @property
    def data(self) -> PlanData:
        """The plan's data as ``PlanData(train=train_data, val=val_data)``."""
        return PlanData(train=self.train_data, val=self.val_data)

    def _evolve(self, **changes: Any) -> ExperimentPlan:
        return dataclasses.replace(self, **changes)

    # ------------------------------------------------------------------ branching
    def with_net(self, net: Any = KEEP, /, **changes: Any) -> ExperimentPlan:
        """A plan with another ``NNParams`` (``None``: no ``NNParams``, for a ``ModelSpec`` or a
        module factory), or this one's with ``changes``."""
        return self._evolve(net=_changed(self.net if net is KEEP else net, changes, "net"))

    def with_model(self, model: NNModelParams | None = None, /, **changes: Any) -> ExperimentPlan:
        """A plan with another ``NNModelParams`` (or this one's with ``changes``)."""
        return self._evolve(model=_changed(model if model is not None else self.model, changes, "model"))

    def with_train(self, train: NNTrainParams | None = None, /, **changes: Any) -> ExperimentPlan:
        """A plan with another ``NNTrainParams`` (or this one's with ``changes``). A change the
        params refuse to the optimizer, schedule or extra metrics is held until ``validate()``
        (``pending``); any other refused change is a :class:`PlanError` naming ``train.<field>``."""
        current = train if train is not None else self.train
        held = self.pending if train is None else tuple(d for d in self.pending if not d.path.startswith("train"))
        if not changes or not isinstance(current, NNTrainParams):
            return self._evolve(train=_changed(current, changes, "train"), pending=held)
        params, held = edit_train(current, changes, held)
        return self._evolve(train=params, pending=held)

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
        ``monitor`` (``monitor=None`` drops it); what is not given is kept."""
        changes: dict[str, Any] = {}
        if len(metrics) == 1 and (metrics[0] is None or (not isinstance(metrics[0], MetricSpec)
                                                         and isinstance(metrics[0], Iterable))):
            metrics = metrics[0]  # NNx's with_metrics([spec, ...])
            changes["metrics"] = metrics if metrics is None else tuple(metrics)
        elif metrics:
            changes["metrics"] = metrics
        if monitor is not KEEP:
            changes["monitor"] = monitor
        return self._edit_train("with_metrics", **changes) if changes else self

    def with_monitor(self, monitor: MonitorSpec | None) -> ExperimentPlan:
        """A plan whose BEST/plateau/EarlyStopping follow ``monitor``."""
        return self._edit_train("with_monitor", monitor=monitor)

    def with_extra_metrics(self, extra_metrics: Mapping[str, Callable[[Any, Any], float]] | None) -> ExperimentPlan:
        """A plan scoring ``{name: fn(y_true, y_pred)}`` (borrowed functions; a read-only copy of the mapping)."""
        return self._edit_train("with_extra_metrics", extra_metrics=extra_metrics)

    def with_data(self, train: Any = KEEP, val: Any = KEEP, *, identity: Any = KEEP) -> ExperimentPlan:
        """A plan with other data: a re-iterable loader of batches (borrowed: shared by every fit)
        or a zero-argument factory returning one (called once per fit); what is not given is kept
        (``with_data(val=...)`` changes only the validation data). ``val=None``: no validation;
        ``train=None``: the training params' loader. ``identity`` becomes
        ``NNTrainParams.data_id`` (part of the run id; ``None`` records none)."""
        changes = {k: v for k, v in (("train_data", train), ("val_data", val), ("data_identity", identity)) if v is not KEEP}
        return self._evolve(**changes)

    def with_seed(self, seed: int | None) -> ExperimentPlan:
        """A plan seeded with ``seed`` (initial weights, loader order, dropout); it overrides the
        training params' own seed, and ``None`` falls back to it."""
        return self._evolve(seed=seed)

    def with_callbacks(self, *callbacks: Any) -> ExperimentPlan:
        """A plan with these (borrowed) callback instances."""
        return self._evolve(callbacks=callbacks)

    def with_callback_factories(self, *factories: Callable[[], Any]) -> ExperimentPlan:
        """A plan building fresh callbacks per fit: each factory (a zero-argument callable) returns
        a callback or a list of them."""
        return self._evolve(callback_factories=factories)

    def with_step_fns(self, train_step_fn: Any = KEEP, eval_step_fn: Any = KEEP) -> ExperimentPlan:
        """A plan with these (borrowed) step functions; the one not given is kept (None drops it)."""
        changes = {k: v for k, v in (("train_step_fn", train_step_fn), ("eval_step_fn", eval_step_fn)) if v is not KEEP}
        return self._evolve(**changes)

    def with_objective(self, objective: Any) -> ExperimentPlan:
        """A plan whose updates an objective owns (borrowed)."""
        return self._evolve(objective=objective)

    def with_components(self, *components: Any) -> ExperimentPlan:
        """A plan checkpointing these (borrowed) components with every fit."""
        return self._evolve(components=components)

    def with_batch_adapter(self, adapter: Any) -> ExperimentPlan:
        """A plan building its model with ``NNModel(..., batch_adapter=adapter)``."""
        return self._evolve(batch_adapter=adapter)

    def with_provenance(self, manifest: Any) -> ExperimentPlan:
        """Refused: provenance manifests are out of scope (every run keeps its attempt record)."""
        refuse("ExperimentPlan.with_provenance", "provenance manifests (every fit records its attempt in the run's "
               "attempt record, and its configuration is the run id's content)")

    def resuming(
        self, run_id: str, *, checkpoint: str = "last", mode: str | None = None, epochs: str | None = None
    ) -> ExperimentPlan:
        """A plan whose fits warm-start from run ``run_id``'s ``checkpoint`` (a new run with that
        lineage; the source is never written). ``mode`` and ``epochs`` default to the training
        params' ``resume_mode`` and ``resume_epochs`` (``"additional"``: each fit trains
        ``n_epochs`` more; ``"planned"``: up to the source run's own plan)."""
        checkpoint = getattr(checkpoint, "value", checkpoint)  # a Checkpoints member
        return self._evolve(resume=Resume(run_id=run_id, checkpoint=checkpoint, mode=mode, epochs=epochs))

    with_resuming = resuming

    def without_resume(self) -> ExperimentPlan:
        """A plan without a resume point."""
        return self._evolve(resume=None)

    def with_module(self, factory: Callable[[], torch.nn.Module] | None) -> ExperimentPlan:
        """A plan training a fresh custom module per fit instead of the built-in net."""
        return self._evolve(module_factory=factory, net=None if factory is not None else self.net)

    def with_root(self, root: str | os.PathLike[str] | None) -> ExperimentPlan:
        """A plan writing its runs under ``root``."""
        return self._evolve(root=root)

    def with_storage(self, storage: Any) -> ExperimentPlan:
        """A plan keeping its runs in ``storage`` (a ``Storage`` adapter, e.g.
        ``nnx_api.storage.MemoryStorage()``; default: the file system under ``root``)."""
        return self._evolve(storage=storage)

    # ------------------------------------------------------------------ checks
    def validate(self) -> PlanValidation:
        """Every problem, each with its field path; empty (``.ok``) when the plan can be fitted.
        Pure: no model is built, no factory is called, no loader is iterated, no callback is bound."""
        out: list[Diagnostic] = []
        add = lambda path, message: out.append(Diagnostic(path, message))  # noqa: E731
        train, model = self.train, self.model
        if train is None:
            add("train", "no training params: give train=NNTrainParams(...) or .with_train(...)")
        elif not isinstance(train, NNTrainParams):
            add("train", f"must be NNTrainParams, got {type(train).__name__}")
        out.extend(self.pending)
        if not isinstance(model, NNModelParams):
            add("model", f"must be NNModelParams, got {type(model).__name__}")
        for path, message in self._net_problems():
            add(path, message)
        seed = self.effective_seed
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**32:
            add("seed", f"must be an int in [0, 2**32) or None, got {seed!r}")
        for path, message in self._data_problems():
            add(path, message)
        for path, message in self._callback_problems():
            add(path, message)
        for path, message in self._step_problems():
            add(path, message)
        if isinstance(train, NNTrainParams) and isinstance(model, NNModelParams):
            for path, message in self._training_problems(train, model):
                add(path, message)
        for path, message in resume_problems(self.resume):
            add(path, message)
        if isinstance(train, NNTrainParams) and "resume.epochs" not in {d.path for d in out}:
            for path, message in horizon_problems(self.resume, train):
                add(path, message)
        return PlanValidation(out)

    def _net_problems(self) -> Iterator[tuple[str, str]]:
        declared = getattr(self.model, "net", None)
        if isinstance(declared, RuntimeModule):
            yield "model.net", "a RuntimeModule describes one module instance: a plan builds a fresh net per fit; " \
                "give module_factory=<callable returning a module> (with_module) or a ModelSpec"
        elif isinstance(declared, ModelSpec):
            if self.net is not None:
                yield "net", "model.net is a ModelSpec, whose registered factory builds the net: give no NNParams " \
                    "(with_net(None))"
            if (declared.id, declared.version) not in registered_model_factories():
                yield "model.net", f"ModelSpec {declared.id!r} v{declared.version} names no registered factory; " \
                    "register it first with nnx.models.register_model_factory"
        elif (self.net is None) == (self.module_factory is None):
            yield "net", "give exactly one of net=NNParams(...) and module_factory=<callable returning a module>"
        elif self.net is not None and not isinstance(self.net, NNParams):
            yield "net", f"must be NNParams, got {type(self.net).__name__}"
        elif self.module_factory is not None and not callable(self.module_factory):
            yield "module_factory", "must be a zero-argument callable returning a torch.nn.Module"
        adapter = self.batch_adapter
        if adapter is not None and (isinstance(adapter, (str, bytes)) or not callable(getattr(adapter, "split", None))):
            yield "batch_adapter", f"must be a BatchAdapter (PositionalInputs, KeywordInputs), got {self.batch_adapter!r}"

    def _has_val(self) -> bool:
        return self.data.sources(self.train)[1] is not None

    def _data_problems(self) -> Iterator[tuple[str, str]]:
        train, val = self.data.sources(self.train)
        if train is None:
            yield "data.train", "no training data: give .with_data(train=...) or NNTrainParams(train_loader=...)"
        for name, value in (("train", train), ("val", val)):
            if value is None:
                continue
            if _is_factory(value):
                if not _binds(value, 0):
                    yield f"data.{name}", "a factory is called with no arguments: give a zero-argument callable"
                continue
            problem = _source_problem(value)
            if problem:
                yield f"data.{name}", problem
        identity = self.data_identity
        if identity is not INHERIT and identity is not None and (not isinstance(identity, str) or not identity.strip()):
            yield "data.identity", f"must be a non-blank string or None, got {identity!r}"

    def _callback_problems(self) -> Iterator[tuple[str, str]]:
        for name in ("callbacks", "callback_factories", "components"):
            if not isinstance(getattr(self, name), tuple):
                yield name, f"must be a sequence, got {type(getattr(self, name)).__name__}; with_{name}(*items)"
        for i, cb in enumerate(_items(self.callbacks)):
            if isinstance(cb, Callback):
                continue
            if isinstance(cb, (list, tuple)):
                yield f"callbacks[{i}]", f"is a {type(cb).__name__} of callbacks: pass them as separate arguments, " \
                    "with_callbacks(*callbacks)"
            elif not callable(cb):
                yield f"callbacks[{i}]", f"{cb!r} is neither a Callback nor a callable fn(idps)"
            elif _binds(cb, 0):
                yield f"callbacks[{i}]", f"{cb!r} takes no arguments, so it is a factory, not a callback: pass it to " \
                    "with_callback_factories (or pass an instance)"
            elif not _binds(cb, 1):
                yield f"callbacks[{i}]", f"{cb!r} is neither a Callback nor a callable fn(idps)"
        for i, factory in enumerate(_items(self.callback_factories)):
            if not callable(factory) or not _binds(factory, 0):
                yield f"callback_factories[{i}]", f"must be a zero-argument callable returning callbacks, got {factory!r}"

    def _step_problems(self) -> Iterator[tuple[str, str]]:
        for name in ("train_step_fn", "eval_step_fn", "objective"):
            value = getattr(self, name)
            if value is not None and not callable(value):
                yield name, f"must be callable, got {type(value).__name__}"
        if self.train_step_fn is not None and self.objective is not None:
            yield "objective", "give either a train_step_fn or an objective (one update owner per run), not both"
        for i, component in enumerate(_items(self.components)):
            if not hasattr(component, "component_spec"):
                yield f"components[{i}]", f"{component!r} has no component_spec() (not a checkpointable component)"

    def _training_problems(self, train: NNTrainParams, model: NNModelParams) -> Iterator[tuple[str, str]]:
        kind = model.resolved_task.kind
        if model.task is not None and model.loss.task_kind != kind:
            yield "model.loss", f"{model.loss.value} suits a {model.loss.task_kind} task, not {kind}"
        try:
            model.loss()
        except Exception as exc:  # noqa: BLE001  # a loss that cannot be built: what NNModel would raise
            yield "model.loss", f"{model.loss} cannot be built: {type(exc).__name__}: {exc}"
        width = self.net.output_dim if isinstance(self.net, NNParams) else None
        if width is not None and model.task is not None and model.task.n not in (None, width):
            yield "model.task", f"TaskSpec.n is {model.task.n} but the net has output_dim={width}"
        optim = train.optim
        if hasattr(optim, "is_valid") and not optim.is_valid():
            yield "train.optim", f"{optim} is not valid (is_valid() is False): check its momentum for {optim.name}"
        broken: set[str] = set()
        streamed = self.eval_step_fn is streaming_eval_step and self._has_val()
        for i, spec in enumerate(train.metrics):
            for problem in resolve((spec,), kind, width):
                broken.add(spec.label)  # an unregistered one by its index, what it cannot score by the field
                problem += " (streaming_eval_step() scores it on the validation data)" if streamed else ""
                yield f"train.metrics[{i}]" if (spec.id, spec.version) not in REGISTRY else "train.metrics", problem
        labels = [spec.label for spec in train.metrics]
        for label in sorted({lb for lb in labels if labels.count(lb) > 1}):
            yield "train.metrics", f"two metrics are labelled {label!r}; give one of them name=..."
        has_val, default_step = self._has_val(), self.train_step_fn is None and self.objective is None
        check_run = getattr(self.eval_step_fn, "check_run", None)  # an eval step's own pre-run refusals
        try:
            if has_val and callable(check_run):
                check_run(train)
        except ParamsError as exc:
            yield "train." + exc.path.split(".", 1)[-1], exc.detail
        monitors = [("train.monitor", train.monitor)] + [
            (f"callbacks[{i}].monitor", cb.monitor) for i, cb in enumerate(_items(self.callbacks))
            if isinstance(cb, EarlyStopping) and isinstance(cb.monitor, MonitorSpec)
        ]
        for path, monitor in monitors:
            yield from ((path, p) for p in self._monitor_problems(monitor, train, kind, has_val, default_step, broken))

    @staticmethod
    def _monitor_problems(monitor: Any, train: NNTrainParams, kind: str, has_val: bool, default_step: bool,
                          broken: set[str] = frozenset()) -> list[str]:  # type: ignore[assignment]
        if monitor is None or monitor.metric in broken:
            return []  # a broken metric is reported once, where it is declared
        problems = monitor_problems(monitor, train.metrics, kind, has_val)
        step = monitor.step_problem(default_step=default_step)
        return problems + ([step] if step else [])

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

    def train_params(self, loaders: tuple[Any, Any] | None = None) -> NNTrainParams:
        """The training params of one fit: ``loaders`` (default: the data's, factories called),
        the effective seed, the data identity and the resume point."""
        params = self.train
        assert params is not None  # validate() refuses a plan without one
        train_loader, val_loader = loaders if loaders is not None else self.data.loaders(params)
        changes: dict[str, Any] = {"train_loader": train_loader, "val_loader": val_loader, "seed": self.effective_seed}
        if self.data_identity is not INHERIT:
            changes["data_id"] = self.data_identity
        if self.resume is not None:
            changes.update(resume_from_run_id=self.resume.run_id, resume_from_checkpoint=self.resume.checkpoint)
            if self.resume.mode is not None:
                changes["resume_mode"] = self.resume.mode
            if self.resume.epochs is not None:
                changes["resume_epochs"] = self.resume.epochs
        return params.replace(**changes)

    def build_callbacks(self) -> list[Any]:
        """The borrowed callbacks, then each factory's fresh ones."""
        return [*self.callbacks, *(cb for _, cb in self._made_callbacks())]

    def _made_callbacks(self) -> list[tuple[int, Any]]:
        """Each factory's fresh callbacks, with the factory's index."""
        out = []
        for i, factory in enumerate(self.callback_factories):
            made = factory()
            out.extend((i, cb) for cb in (made if isinstance(made, (list, tuple)) else [made]))
        return out

    def probe(self, batch: Any) -> ProbeResult:
        """One no-grad forward + loss of a throw-away model on ``batch`` (``(inputs, targets)``).

        Every RNG stream (Python, NumPy, torch, CUDA), the cuDNN flags and ``os.environ`` are
        restored afterwards, so probing never shifts a later fit."""
        self.check_model()
        with _preserved_global_state():
            _seed_live_streams(self.effective_seed)
            model = self.build_model()
            adapter = model.batch_adapter
            if adapter is not None:
                args, kwargs, target = adapter.split(batch)
            elif isinstance(batch, (tuple, list)) and len(batch) == 1:
                args, kwargs, target = (batch[0],), {}, None  # inputs only: an output, no loss
            else:
                inputs, target = split_batch(batch)
                args, kwargs = (tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)), {}
            args, kwargs = to_device(args, model.device), to_device(kwargs, model.device)
            has_target = isinstance(target, torch.Tensor)
            model.net.eval()
            with torch.no_grad(), model.autocast_context()():
                output = model.net(*args, **kwargs)
                output = adapter.output(output) if adapter is not None else output
                loss, count = None, 0
                if has_target:
                    target = to_device(target, model.device)
                    model.task_adapter.check(output, target)
                    loss_sum, count = model.task_adapter.sum_terms(output, target)
                    own_step = self.train_step_fn is not None or self.objective is not None  # its loss is its own
                    loss = float(loss_sum) / count if count and not own_step else None
            parameters = list(model.net.parameters())
            return ProbeResult(
                output_shape=tuple(output.shape), loss=loss, count=int(count),
                output_dtype=str(output.dtype).removeprefix("torch."),
                target_shape=tuple(target.shape) if has_target else None,
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
    def fit(self, attempt: str | None = None, *, resume: str | None = None) -> FitResult:
        """Validate, then seed → factories → ``NNModel`` → ``train`` as attempt ``attempt`` (a new
        id when None). Each attempt is its own run (salt ``"plan-attempt:<id>"``); an attempt id
        that already has a run raises ``FileExistsError``, unless ``resume="auto"``: then a fit of
        that attempt killed on the way goes on from its run's LAST (``NNTrainParams.resume``), and
        one that finished is returned as it is. Refused inside a process group of several ranks
        (a fit trains in one process)."""
        refuse_multi_rank("ExperimentPlan.fit()")  # before seeding, a factory call or a run
        problems = list(self.validate())
        if attempt is not None:
            try:
                validate_tag(attempt)
            except (NNxError, TypeError) as exc:
                problems.append(Diagnostic("attempt", f"{exc}; give a non-blank attempt id such as 'nightly-1'"))
        if resume not in (None, "auto"):
            problems.append(Diagnostic("resume", f"must be None or 'auto', got {resume!r}"))
        elif resume is not None and attempt is None:
            problems.append(Diagnostic("resume", "continues a named attempt: give the attempt id of the fit to go on with"))
        PlanValidation(problems).raise_for_errors()
        attempt_id = attempt if attempt is not None else uuid.uuid4().hex[:16]
        torch_state.set_seed(self.effective_seed)
        loaders = self.data.loaders(self.train)
        made = self._made_callbacks()
        self._check_made(loaders, made)
        params = self.train_params(loaders)
        if resume is not None:
            params = params.replace(resume=resume)
        callbacks = [*self.callbacks, *(cb for _, cb in made)]
        model = self.build_model()
        salt = SALT_PREFIX + attempt_id
        base = runs_root(self.root)
        expected = NNRun(config=model.run_config(params, salt), root=base, storage=self.storage)
        if resume is None and expected.files().exists():
            raise FileExistsError(
                f"attempt {attempt_id!r} already has run {expected.id} under {base}; use a new attempt id, or "
                f"fit({attempt_id!r}, resume='auto') to continue it"
            )
        run = model.train(
            params, callbacks=callbacks, salt=salt, root=base, train_step_fn=self.train_step_fn,
            eval_step_fn=self.eval_step_fn, objective=self.objective, components=list(self.components), storage=self.storage,
        )
        metrics = selected_metrics(run, has_val=params.val_loader is not None)
        return FitResult(model=model, run=run, metrics=metrics, attempt_id=attempt_id)

    def _check_made(self, loaders: tuple[Any, Any], made: list[tuple[int, Any]]) -> None:
        """What the factories made, checked before any run is reserved: loaders of batches,
        callbacks, and the made callbacks' monitors against the run (``PlanError``)."""
        problems = []
        for name, loader in zip(("train", "val"), loaders, strict=True):
            problem = None if loader is None and name == "val" else _source_problem(loader, made=True)
            if loader is None and name == "val" and _is_factory(self.data.sources(self.train)[1]):
                problem = "the factory returned None: return a loader (give val=None for no validation)"
            if problem:
                problems.append(Diagnostic(f"data.{name}", problem))
        kind = self.model.resolved_task.kind
        default_step = self.train_step_fn is None and self.objective is None
        for i, cb in made:
            path = f"callback_factories[{i}]"
            if not isinstance(cb, Callback) and not callable(cb):
                problems.append(Diagnostic(path, f"returned {cb!r}, which is neither a Callback nor a callable"))
            elif isinstance(cb, EarlyStopping) and isinstance(cb.monitor, MonitorSpec):
                for p in self._monitor_problems(cb.monitor, self.train, kind, loaders[1] is not None, default_step):
                    problems.append(Diagnostic(f"{path}.monitor", p))
        PlanValidation(problems).raise_for_errors()


__all__ = [
    "INHERIT", "KEEP", "Diagnostic", "ExperimentPlan", "PlanData", "PlanError", "PlanValidation", "Resume",
    "SingleProcessError", "refuse_multi_rank",
]
