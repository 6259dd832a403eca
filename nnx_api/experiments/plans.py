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
give factories (zero-argument callables) for fresh ones per fit.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import torch

from nnx_core.errors import NNxError, ParamsError
from nnx_core.identity import validate_tag
from nnx_core.monitor import MonitorSpec
from nnx_core.records import IterationDataPoint
from nnx_adapters.pytorch import state as torch_state
from nnx_adapters.pytorch.metrics import resolve
from nnx_api.callbacks import Callback, EarlyStopping
from nnx_api.runs.curves import committed_records, epoch_scalars, iter_epochs
from nnx_api.config.metrics import monitor_problems
from nnx_api.model import NNModel
from nnx_api.config.params import NNModelParams, NNOptimParams, NNParams, NNSchedulerParams, NNTrainParams
from nnx_api.runs.run import NNRun, runs_root
from nnx_api.training.steps import split_batch, to_device

SALT_PREFIX = "plan-attempt:"


@attrs.frozen
class Diagnostic:
    """One problem of a plan: the field path (``train.monitor``, ``data.train``) and why."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class PlanError(NNxError, ValueError):
    """A plan that cannot be fitted; ``diagnostics`` lists every problem with its field path."""

    def __init__(self, diagnostics: Sequence[Diagnostic]) -> None:
        self.diagnostics = tuple(diagnostics)
        super().__init__("the plan is not valid:\n  - " + "\n  - ".join(str(d) for d in self.diagnostics))


def _is_factory(value: Any) -> bool:
    """A zero-argument factory, as opposed to a loader (which is iterable)."""
    return callable(value) and not hasattr(value, "__iter__")


def _materialize(value: Any) -> Any:
    return value() if _is_factory(value) else value


@attrs.frozen(kw_only=True)
class PlanData:
    """Training and (optional) validation data: each a re-iterable loader of ``(inputs, targets)``
    batches, or a zero-argument factory returning one (called once per fit)."""

    train: Any
    val: Any = None

    def loaders(self) -> tuple[Any, Any]:
        """``(train_loader, val_loader)``, calling factories."""
        return _materialize(self.train), _materialize(self.val)


@attrs.frozen(kw_only=True)
class FitResult:
    """What ``fit()`` produced: the trained model, its committed run, the metrics of the epoch
    BEST holds (the last epoch when nothing was selected) and the attempt id."""

    model: NNModel
    run: NNRun
    metrics: Mapping[str, float]
    attempt_id: str

    @property
    def best_epoch(self) -> int | None:
        """The epoch BEST holds, if any."""
        best = self.run.best()
        return None if best is None else best.epoch_idx

    @property
    def value(self) -> float | None:
        """The monitored value of the epoch BEST holds (what a search optimizes)."""
        best = self.run.best()
        return None if best is None or best.selection is None else best.selection.value


@attrs.frozen(kw_only=True)
class ProbeResult:
    """One no-grad forward of a throw-away model: output shape, loss and valid target count."""

    output_shape: tuple[int, ...]
    loss: float | None
    count: int


def _tuple(value: Any) -> tuple[Any, ...]:
    return tuple(value or ())


@attrs.frozen(kw_only=True)
class ExperimentPlan:
    """An immutable experiment: net (or module factory), model and training params, data, seed
    and callbacks. See the module docstring."""

    train: NNTrainParams
    net: NNParams | None = None
    model: NNModelParams = attrs.field(factory=NNModelParams)
    data: PlanData | None = None
    seed: int | None = 0
    callbacks: tuple[Any, ...] = attrs.field(default=(), converter=_tuple)
    callback_factories: tuple[Callable[[], Any], ...] = attrs.field(default=(), converter=_tuple)
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

    def with_epochs(self, n_epochs: int) -> ExperimentPlan:
        """A plan training ``n_epochs`` epochs."""
        return self.with_train(n_epochs=n_epochs)

    def with_optim(self, optim: NNOptimParams | None = None, /, **changes: Any) -> ExperimentPlan:
        """A plan with another optimizer (or this one's with ``changes``, e.g. ``max_lr=3e-3``)."""
        return self.with_train(optim=_changed(optim if optim is not None else self.train.optim, changes, "train.optim"))

    def with_scheduler(self, scheduler: NNSchedulerParams | None = None, /, **changes: Any) -> ExperimentPlan:
        """A plan with another schedule (or this one's with ``changes``)."""
        current = scheduler if scheduler is not None else self.train.scheduler
        return self.with_train(scheduler=_changed(current, changes, "train.scheduler"))

    def with_metrics(self, *metrics: Any) -> ExperimentPlan:
        """A plan declaring ``metrics`` (``MetricSpec``s)."""
        return self.with_train(metrics=metrics)

    def with_monitor(self, monitor: MonitorSpec | None) -> ExperimentPlan:
        """A plan whose BEST/plateau/EarlyStopping follow ``monitor``."""
        return self.with_train(monitor=monitor)

    def with_data(self, train: Any, val: Any = None) -> ExperimentPlan:
        """A plan with other data (loaders or zero-argument loader factories)."""
        return attrs.evolve(self, data=PlanData(train=train, val=val))

    def with_seed(self, seed: int | None) -> ExperimentPlan:
        """A plan seeded with ``seed`` (initial weights, loader order, dropout)."""
        return attrs.evolve(self, seed=seed)

    def with_callbacks(self, *callbacks: Any) -> ExperimentPlan:
        """A plan with these (borrowed) callback instances."""
        return attrs.evolve(self, callbacks=callbacks)

    def with_callback_factories(self, *factories: Callable[[], Any]) -> ExperimentPlan:
        """A plan building fresh callbacks per fit (each factory returns a callback or a list)."""
        return attrs.evolve(self, callback_factories=factories)

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
    def validate(self) -> list[Diagnostic]:
        """Every problem, each with its field path; empty when the plan can be fitted. Pure: no
        model is built and no factory is called."""
        out: list[Diagnostic] = []
        add = lambda path, message: out.append(Diagnostic(path, message))  # noqa: E731
        train, model = self.train, self.model
        if not isinstance(train, NNTrainParams):
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
        if isinstance(train, NNTrainParams) and isinstance(model, NNModelParams):
            kind = model.resolved_task.kind
            if model.task is not None and model.loss.task_kind != kind:
                add("model.loss", f"{model.loss.value} suits a {model.loss.task_kind} task, not {kind}")
            width = self.net.output_dim if isinstance(self.net, NNParams) else None
            if width is not None and model.task is not None and model.task.n not in (None, width):
                add("model.task.n", f"is {model.task.n} but the net has output_dim={self.net.output_dim}")
            out.extend(Diagnostic("train.metrics", p) for p in resolve(train.metrics, kind))
            has_val = train.val_loader is not None or (self.data is not None and self.data.val is not None)
            monitor = monitor_problems(train.monitor, train.metrics, kind, has_val)
            out.extend(Diagnostic("train.monitor", p) for p in monitor)
            for i, cb in enumerate(self.callbacks):
                if isinstance(cb, EarlyStopping) and cb.monitor is not None and cb.monitor != train.monitor:
                    add(f"callbacks[{i}].monitor", f"{cb.monitor} differs from the run's monitor {train.monitor}")
        return out

    def _data_problems(self) -> Iterator[tuple[str, str]]:
        train_loader = self.train.train_loader if isinstance(self.train, NNTrainParams) else None
        if self.data is None:
            if train_loader is None:
                yield "data.train", "no training data: give data=PlanData(train=...) or NNTrainParams(train_loader=...)"
            return
        if not isinstance(self.data, PlanData):
            yield "data", f"must be PlanData, got {type(self.data).__name__}"
            return
        for name in ("train", "val"):
            value = getattr(self.data, name)
            if value is None:
                if name == "train":
                    yield "data.train", "is missing"
                continue
            if _is_factory(value):
                continue
            if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
                kind = type(value).__name__
                yield f"data.{name}", f"must be a re-iterable loader or a zero-argument factory, got {kind}"
            elif iter(value) is value:
                yield f"data.{name}", "is a one-shot iterator; give a loader (re-iterable) or a factory"

    def check(self) -> None:
        """Raise :class:`PlanError` listing every diagnostic, if there is any."""
        problems = self.validate()
        if problems:
            raise PlanError(problems)

    # ------------------------------------------------------------------ building
    def build_model(self) -> NNModel:
        """A fresh model (initial weights from the global torch RNG)."""
        if self.module_factory is not None:
            return NNModel(params=self.model, module=self.module_factory())
        return NNModel(self.net, self.model)

    def train_params(self) -> NNTrainParams:
        """The training params of one fit: loaders from the data (factories called), the plan's
        seed unless the params carry their own."""
        params = self.train
        if self.data is not None:
            train_loader, val_loader = self.data.loaders()
            params = params.replace(train_loader=train_loader, val_loader=val_loader)
        if params.seed is None and self.seed is not None:
            params = params.replace(seed=self.seed)
        return params

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
            if self.seed is not None:
                torch_state.set_seed(self.seed)
            model = self.build_model()
            inputs, target = split_batch(batch)
            inputs, target = to_device(inputs, model.device), to_device(target, model.device)
            model.net.eval()
            with torch.no_grad(), model.autocast_context()():
                output = model.net(*inputs) if isinstance(inputs, (tuple, list)) else model.net(inputs)
                model.task_adapter.check(output, target)
                loss_sum, count = model.task_adapter.loss_terms(output, target)
            loss = float(loss_sum) / count if count else None
            return ProbeResult(output_shape=tuple(output.shape), loss=loss, count=int(count))

    def check_model(self) -> None:
        """Raise :class:`PlanError` for the model-related diagnostics only (what ``probe`` needs)."""
        roots = ("net", "model", "module_factory")
        problems = [d for d in self.validate() if d.path.split(".")[0] in roots]
        if problems:
            raise PlanError(problems)

    # ------------------------------------------------------------------ fitting
    def fit(self, attempt: str | None = None) -> FitResult:
        """Validate, then seed → factories → ``NNModel`` → ``train`` as attempt ``attempt`` (a new
        id when None). Each attempt is its own run (salt ``"plan-attempt:<id>"``); an attempt id
        that already has a run raises ``FileExistsError``."""
        self.check()
        attempt_id = validate_tag(attempt) if attempt is not None else uuid.uuid4().hex[:16]
        if self.seed is not None:
            torch_state.set_seed(self.seed)
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
        run = model.train(params, callbacks=callbacks, salt=salt, root=base, storage=self.storage)
        return FitResult(model=model, run=run, metrics=selected_metrics(run), attempt_id=attempt_id)


def selected_metrics(run: NNRun) -> dict[str, float]:
    """``epoch_scalars`` of the epoch BEST holds (else the last epoch), plus ``epoch``."""
    best = run.best()
    chosen: tuple[int, list[IterationDataPoint]] | None = None
    for epoch, records in iter_epochs(committed_records(run)):
        if best is None or epoch == best.epoch_idx:
            chosen = (epoch, records)
    if chosen is None:
        return {}
    return {"epoch": float(chosen[0]), **epoch_scalars(chosen[1])}


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


__all__ = ["Diagnostic", "ExperimentPlan", "FitResult", "PlanData", "PlanError", "ProbeResult"]
