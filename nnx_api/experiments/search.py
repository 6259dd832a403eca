"""Hyperparameter search over an ``ExperimentPlan`` with Optuna (the ``search`` extra).

``search(plan, space, budget=..., monitor=...)`` asks Optuna for values, applies them to the plan
(``apply``; by default each parameter name is a dotted path into the plan, e.g.
``"train.optim.max_lr"`` or ``"net.hidden_dims"``) and fits it. Every trial is a plan fit with
its own attempt id and therefore its own run. What a trial is worth is the value of the epoch
its BEST holds — the value stored with that checkpoint — so the winner can always be reloaded
with ``NNModel.from_checkpoint(outcome.run_id, "best")``.

Pruning sees the run's one monitor decision: a trial callback reports ``ctx.decision.value`` at
``step = epoch`` and, when the pruner says so, sets ``ctx.should_stop`` (the epoch still
commits, so a pruned trial's run is complete and loadable). ``SearchBudget.updates_per_trial``
caps each trial's committed optimizer updates through ``ctx.stop_at_update``.

The budget counts every trial asked, whatever became of it (completed, pruned, failed). The
search stops for the first of: ``"budget"`` (trials asked), ``"deadline"`` (seconds since the
search began, checked before each new trial) and ``"exhausted"`` (a finite space whose every
combination has been tried).

Where the trials' runs live is the plan's: ``plan.with_root(...)`` or ``plan.with_storage(...)``
(a ``Storage`` adapter). ``search(storage=...)`` is Optuna's study storage, not the runs'.
"""

from __future__ import annotations

import dataclasses
import math
import re
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from nnx_core.errors import NNxError, ParamsError
from nnx_core.monitor_spec import MonitorSpec
from nnx_adapters.extras import require
from nnx_adapters.pytorch.metrics import metric_mode
from nnx_api.callbacks import Callback, CallbackContext
from nnx_api.experiments.plans import ExperimentPlan

STATES = ("completed", "pruned", "failed")  # NNx's names
PRIMITIVES = (type(None), bool, int, float, str)


# ---------------------------------------------------------------------------------- the space
def _check_bounds(where: str, low: Any, high: Any) -> None:
    """``low < high``, both finite real numbers (a range of one value is a constant, not a search)."""
    for field, value in (("low", low), ("high", high)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ParamsError(f"{where}.{field}", f"must be a finite number, got {value!r}")
    if not low < high:
        raise ParamsError(where, f"low must be < high, got low={low!r}, high={high!r}")


@attrs.frozen
class FloatParam:
    """A float in ``[low, high]`` (``log`` scale, or a grid of ``step``)."""

    name: str
    low: float
    high: float
    log: bool = False
    step: float | None = None

    def __attrs_post_init__(self) -> None:
        where = f"FloatParam({self.name!r})"
        _check_bounds(where, self.low, self.high)
        if self.log and self.low <= 0:
            raise ParamsError(f"{where}.low", f"a log scale needs low > 0, got {self.low!r}")
        if self.step is not None and (self.log or not self.step > 0):
            raise ParamsError(f"{where}.step", f"must be > 0 and is not combined with log=True, got {self.step!r}")

    def suggest(self, trial: Any) -> float:
        return trial.suggest_float(self.name, self.low, self.high, log=self.log, step=self.step)

    def state(self) -> dict[str, Any]:
        """``{"kind": "float", "name", "low", "high"}``, with ``log`` / ``step`` only when set (as NNx writes it)."""
        return _bounded_state("float", self, log=self.log, step=self.step)

    def size(self) -> int | None:
        return None if self.step is None else int(math.floor((self.high - self.low) / self.step + 1e-9)) + 1


@attrs.frozen
class IntParam:
    """An int in ``[low, high]`` (``log`` scale, or every ``step``)."""

    name: str
    low: int
    high: int
    log: bool = False
    step: int = 1

    def __attrs_post_init__(self) -> None:
        where = f"IntParam({self.name!r})"
        _check_bounds(where, self.low, self.high)
        if isinstance(self.step, bool) or not isinstance(self.step, int) or self.step < 1:
            raise ParamsError(f"{where}.step", f"must be an int >= 1, got {self.step!r}")
        if self.log and (self.low < 1 or self.step != 1):
            raise ParamsError(f"{where}.low", f"a log scale needs low >= 1 and step 1, got low={self.low!r}, step={self.step!r}")

    def suggest(self, trial: Any) -> int:
        return trial.suggest_int(self.name, self.low, self.high, log=self.log, step=self.step)

    def state(self) -> dict[str, Any]:
        """``{"kind": "int", "name", "low", "high"}``, with ``log`` / ``step`` only when not the default."""
        return _bounded_state("int", self, log=self.log, step=None if self.step == 1 else self.step)

    def size(self) -> int | None:
        return None if self.log else (self.high - self.low) // self.step + 1


@attrs.frozen
class CategoricalParam:
    """One of ``choices``; choices that are not plain scalars (tuples such as hidden sizes) are
    offered to Optuna by their ``repr`` and mapped back."""

    name: str
    choices: tuple[Any, ...] = attrs.field(converter=tuple)

    def __attrs_post_init__(self) -> None:
        if not self.choices:
            raise ParamsError(f"CategoricalParam({self.name!r}).choices", "give at least one choice")

    def suggest(self, trial: Any) -> Any:
        if all(isinstance(c, PRIMITIVES) for c in self.choices):
            return trial.suggest_categorical(self.name, list(self.choices))
        labels = {repr(c): c for c in self.choices}
        return labels[trial.suggest_categorical(self.name, list(labels))]

    def size(self) -> int | None:
        return len(self.choices)

    def state(self) -> dict[str, Any]:
        """``{"kind": "categorical", "name", "choices": [...]}`` (a tuple choice as a list)."""
        return {"kind": "categorical", "name": self.name,
                "choices": [list(c) if isinstance(c, tuple) else c for c in self.choices]}


def _bounded_state(kind: str, param: Any, *, log: bool, step: Any) -> dict[str, Any]:
    state: dict[str, Any] = {"kind": kind, "name": param.name, "low": param.low, "high": param.high}
    if log:
        state["log"] = True
    if step is not None:
        state["step"] = step
    return state


Param = FloatParam | IntParam | CategoricalParam


class SearchSpace:
    """The parameters a search draws, each named by where ``apply`` puts it."""

    def __init__(self, *params: Param) -> None:
        names = [p.name for p in params]
        if not params:
            raise ParamsError("SearchSpace", "give at least one parameter")
        if len(set(names)) != len(names):
            raise ParamsError("SearchSpace", f"parameter names must be unique, got {names}")
        self.params: tuple[Param, ...] = tuple(params)

    def sample(self, trial: Any) -> dict[str, Any]:
        """One value per parameter, asked from ``trial``."""
        return {p.name: p.suggest(trial) for p in self.params}

    def size(self) -> int | None:
        """How many distinct combinations there are (None: unbounded)."""
        total = 1
        for p in self.params:
            n = p.size()
            if n is None:
                return None
            total *= n
        return total


@attrs.frozen(kw_only=True)
class SearchBudget:
    """How much to spend: ``trials`` asked in all, optionally ``updates_per_trial`` committed
    optimizer updates per trial and a ``deadline_seconds`` for the whole search."""

    trials: int
    updates_per_trial: int | None = None
    deadline_seconds: float | None = None

    def __attrs_post_init__(self) -> None:
        if isinstance(self.trials, bool) or not isinstance(self.trials, int) or self.trials < 1:
            raise ParamsError("SearchBudget.trials", f"must be an int >= 1, got {self.trials!r}")
        if self.updates_per_trial is not None and self.updates_per_trial < 1:
            raise ParamsError("SearchBudget.updates_per_trial", "must be >= 1 or None")
        if self.deadline_seconds is not None and not self.deadline_seconds > 0:
            raise ParamsError("SearchBudget.deadline_seconds", "must be > 0 or None")


# ---------------------------------------------------------------------------------- results
@attrs.frozen(kw_only=True)
class TrialOutcome:
    """One trial: its values, what became of it, its run and the value at its BEST."""

    number: int
    params: Mapping[str, Any]
    state: str  # "completed" | "pruned" | "failed"
    reason: str = ""  # why the trial ended so, in words
    value: float | None = None
    best_epoch: int | None = None
    run_id: str | None = None
    attempt_id: str | None = None
    epochs: int = 0
    pruned_at_epoch: int | None = None
    error: str | None = None

    @property
    def monitor_value(self) -> float | None:
        """NNx's name for ``value``: the monitored value at the trial's BEST epoch."""
        return self.value


@attrs.frozen(kw_only=True)
class SearchResult:
    """Every trial in order, the best completed one (None if none completed), how many trials
    were asked, why the search stopped, the direction and the Optuna study."""

    outcomes: tuple[TrialOutcome, ...]
    best: TrialOutcome | None
    asked: int
    stop_reason: str  # "budget" | "deadline" | "exhausted"
    direction: str
    study: Any = attrs.field(eq=False, repr=False)

    def counts(self) -> dict[str, int]:
        """How many trials ended in each state."""
        return {state: sum(o.state == state for o in self.outcomes) for state in STATES}


class SearchError(NNxError, RuntimeError):
    """The search cannot run here (e.g. inside a multi-rank process group)."""


# ---------------------------------------------------------------------------------- trial control
class TrialControl(Callback):
    """Reports the epoch's monitor decision to the Optuna trial and stops pruned or capped trials."""

    distributed = "all"

    def __init__(self, trial: Any, max_updates: int | None = None) -> None:
        self.trial = trial
        self.max_updates = max_updates
        self.pruned_at: int | None = None
        self.capped = False
        self.reported: list[tuple[int, float]] = []

    def on_train_begin(self, ctx: CallbackContext) -> None:
        if self.max_updates is not None:
            ctx.update_listeners.append(self._after_update)

    def _after_update(self, ctx: CallbackContext) -> None:
        if ctx.update_count >= self.max_updates:  # type: ignore[operator]
            ctx.stop_at_update, self.capped = True, True

    def on_epoch_end(self, ctx: CallbackContext) -> None:
        decision = ctx.decision
        if decision is None or decision.value is None or not math.isfinite(decision.value):
            return
        self.trial.report(float(decision.value), step=ctx.epoch)
        self.reported.append((ctx.epoch, float(decision.value)))
        if self.trial.should_prune():
            ctx.should_stop, self.pruned_at = True, ctx.epoch


# ---------------------------------------------------------------------------------- search
def apply_params(plan: ExperimentPlan, values: Mapping[str, Any]) -> ExperimentPlan:
    """The default ``apply``: each name is a dotted path into the plan (``"train.optim.max_lr"``,
    ``"net.hidden_dims"``, ``"seed"``); every level is rebuilt (and so re-validated)."""
    for name, value in values.items():
        plan = _set_path(plan, name.split("."), value, name)
    return plan


def _set_path(obj: Any, parts: Sequence[str], value: Any, name: str) -> Any:
    if not parts:
        return value
    head, rest = parts[0], parts[1:]
    if dataclasses.is_dataclass(obj):  # the params classes
        fields, replace = {f.name for f in dataclasses.fields(obj)}, dataclasses.replace
    else:  # the plan (an attrs class), or a value with no fields
        fields, replace = set(attrs.fields_dict(type(obj))) if attrs.has(type(obj)) else set(), attrs.evolve
    if head not in fields:
        raise ParamsError(name, f"{type(obj).__name__} has no field {head!r}")
    return replace(obj, **{head: _set_path(getattr(obj, head), rest, value, name)})


def search(
    plan: ExperimentPlan,
    space: SearchSpace,
    *,
    budget: SearchBudget,
    monitor: MonitorSpec | None = None,
    apply: Callable[[ExperimentPlan, Mapping[str, Any]], ExperimentPlan] = apply_params,
    study_name: str | None = None,
    sampler: Any = None,
    pruner: Any = None,
    storage: Any = None,
    seed: int | None = 0,
) -> SearchResult:
    """Search ``space`` by fitting ``plan`` once per trial (see the module docstring).

    ``monitor`` (default: the plan's ``NNTrainParams.monitor``, else the documented fallback
    signal) decides BEST in every trial and so the trial's value; its direction is the study's.
    ``sampler`` defaults to TPE seeded with ``seed``; ``pruner`` to a median pruner (two
    start-up trials, one warm-up epoch); ``storage`` is Optuna's study storage (the runs go where
    the plan keeps them: ``plan.with_storage(...)``)."""
    started = time.monotonic()  # the deadline covers the whole search, set-up included
    if study_name is not None and (not isinstance(study_name, str) or not study_name.strip()):
        raise ParamsError("search.study_name", f"must be a non-blank string or None, got {study_name!r}")
    optuna = require("optuna", "search", "nnx_api.experiments.search.search")
    _refuse_multi_rank()
    if monitor is not None:
        plan = plan.with_monitor(monitor)
    plan.check()
    direction = _direction(plan)
    name = study_name or f"search-{uuid.uuid4().hex[:8]}"
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-._") or "search"
    study = optuna.create_study(
        direction="minimize" if direction == "min" else "maximize",
        sampler=sampler if sampler is not None else optuna.samplers.TPESampler(seed=seed),
        pruner=pruner if pruner is not None else optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=1),
        study_name=name,
        storage=storage,
    )
    outcomes: list[TrialOutcome] = []
    tried: set[str] = set()
    size = space.size()
    asked = 0
    while True:
        if asked >= budget.trials:
            reason = "budget"
            break
        if budget.deadline_seconds is not None and time.monotonic() - started >= budget.deadline_seconds:
            reason = "deadline"
            break
        if size is not None and len(tried) >= size:
            reason = "exhausted"
            break
        trial = study.ask()
        asked += 1
        attempt = f"{slug}.t{trial.number}"
        outcome, sampler_done = _run_trial(optuna, study, trial, plan, space, apply, budget, attempt, tried)
        outcomes.append(outcome)
        if sampler_done:  # e.g. a GridSampler whose grid is used up
            reason = "exhausted"
            break
    return SearchResult(
        outcomes=tuple(outcomes),
        best=_best(outcomes, direction),
        asked=asked,
        stop_reason=reason,
        direction=direction,
        study=study,
    )


def _run_trial(  # noqa: ANN001
    optuna, study, trial, plan, space, apply, budget, attempt, tried
) -> tuple[TrialOutcome, bool]:
    """Fit one trial and tell Optuna; also whether the sampler asked the study to stop."""
    states = optuna.trial.TrialState
    values: dict[str, Any] = {}
    try:
        values = space.sample(trial)
        tried.add(repr(sorted(values.items())))
        control = TrialControl(trial, budget.updates_per_trial)
        trial_plan = apply(plan, values)
        result = trial_plan.with_callbacks(*trial_plan.callbacks, control).fit(attempt=attempt)
    except BaseException as exc:
        done = _tell(study, trial, state=states.FAIL)
        if not isinstance(exc, Exception):
            raise
        outcome = TrialOutcome(number=trial.number, params=values, state="failed", attempt_id=attempt,
                               reason=f"training raised {type(exc).__name__}", error=f"{type(exc).__name__}: {exc}")
        return outcome, done
    run = result.run
    best = run.best()
    value = None if best is None or best.selection is None else best.selection.value
    common = dict(
        number=trial.number,
        params=values,
        value=value,
        best_epoch=None if best is None else best.epoch_idx,
        run_id=run.id,
        attempt_id=attempt,
        epochs=len(run.epochs),
    )
    if control.pruned_at is not None:
        reason = f"pruned at epoch {control.pruned_at}: its monitored value was not promising"
        return TrialOutcome(**common, state="pruned", reason=reason, pruned_at_epoch=control.pruned_at), _tell(
            study, trial, state=states.PRUNED
        )
    if value is None or not math.isfinite(value):
        error = "the run selected no BEST epoch (no finite monitored value)"
        return TrialOutcome(**common, state="failed", reason=error, error=error), _tell(study, trial, state=states.FAIL)
    reason = f"trained {len(run.epochs)} epoch(s); BEST at epoch {common['best_epoch']}"
    return TrialOutcome(**common, state="completed", reason=reason), _tell(study, trial, value)


def _tell(study: Any, trial: Any, value: float | None = None, *, state: Any = None) -> bool:
    """``study.tell``; True when the sampler asked the study to stop. (Optuna records the trial
    before a sampler's stop request, which outside ``study.optimize`` arrives as this error.)"""
    try:
        study.tell(trial, value, state=state)
    except RuntimeError as exc:
        if "Study.stop" not in str(exc):
            raise
        return True
    return False


def _direction(plan: ExperimentPlan) -> str:
    monitor = plan.train.monitor
    if monitor is None:
        return "min"  # the fallback signal (errors, then losses) is minimized
    return monitor.mode or metric_mode(monitor.metric, plan.train.metrics)


def _best(outcomes: Sequence[TrialOutcome], direction: str) -> TrialOutcome | None:
    complete = [o for o in outcomes if o.state == "completed"]
    if not complete:
        return None
    pick = min if direction == "min" else max
    return pick(complete, key=lambda o: o.value)  # the first of equal values wins, as in Optuna


def _refuse_multi_rank() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        raise SearchError("search runs trials in one process; call it outside a multi-rank process group")


__all__ = [
    "CategoricalParam",
    "FloatParam",
    "IntParam",
    "SearchBudget",
    "SearchError",
    "SearchResult",
    "SearchSpace",
    "TrialControl",
    "TrialOutcome",
    "apply_params",
    "search",
]
