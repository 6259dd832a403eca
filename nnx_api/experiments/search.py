"""Hyperparameter search over an ``ExperimentPlan`` with Optuna (the ``search`` extra).

``search(plan, space, budget=..., monitor=...)`` asks Optuna for values, applies them to the plan
(``apply``; by default each parameter name is a dotted path into the plan, e.g.
``"train.optim.max_lr"`` or ``"net.hidden_dims"``) and fits it. Every trial is a plan fit with
its own attempt id and therefore its own run. What a trial is worth is the value of the epoch
its BEST holds — the value stored with that checkpoint — so the winner can always be reloaded
with ``NNModel.from_checkpoint(outcome.run_id, "best")``.

The space, budget, monitor (a validation monitor, equal to the plan's own when it has one) and
plan are checked before any study or trial exists; a plan holding callback instances is refused
there (each trial needs fresh ones: give callback factories). A fit that raises fails its trial
and the search goes on; a configuration error (``apply`` raising or returning a plan the search
cannot score) is recorded on its trial and stops the search, as is an interruption.

Pruning sees the run's one monitor decision: a trial callback reports ``ctx.decision.value`` at
``step = epoch`` and, when the pruner says so, sets ``ctx.should_stop`` (the epoch still
commits, so a pruned trial's run is complete and loadable); a missing or non-finite value fails
the trial. ``SearchBudget.updates_per_trial`` caps each trial's committed optimizer updates
through ``ctx.stop_at_update``; the deadline stops a running trial at its next update or epoch
boundary.

The budget counts every trial of the study, whatever became of it (completed, pruned, failed,
or left running by a crashed process), earlier searches of a stored study included, and every
worker's. Any number of processes run one search by running the same command on one study
storage and one runs root; a trial whose worker died is resumed from its run's LAST, never
restarted (``nnx_api.experiments.search_workers``). A fit that raises fails its trial and stays
failed (never retried); ``KeyboardInterrupt`` fails its trial and stops the search; a preemption
(``TrainingPreempted``, after SIGTERM) stops the search and leaves its trial running for the same
command to resume. The search
stops for the first of: ``"budget"``, ``"deadline"`` (seconds on ``clock`` since the search
began, checked before each new trial) and ``"exhausted"`` (a finite space whose every
combination has been tried).

Where the trials' runs live is the plan's: ``plan.with_root(...)`` or ``plan.with_storage(...)``
(a ``Storage`` adapter). ``search(storage=...)`` is Optuna's study storage, not the runs'.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import os
import re
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import attrs

from nnx_core.errors import ParamsError, TrainingPreempted
from nnx_core.monitor_spec import MonitorSpec
from nnx_adapters.extras import require
from nnx_adapters.storage.fs import FileStorage
from nnx_api.callbacks import Callback, CallbackContext
from nnx_api.config.train_params import NNTrainParams
from nnx_api.experiments import search_workers as workers
from nnx_api.experiments.plans import INHERIT, ExperimentPlan, SingleProcessError, refuse_multi_rank
from nnx_api.experiments.search_space import CategoricalParam, FloatParam, IntParam, SearchBudget, SearchSpace
from nnx_api.experiments.search_workers import StudyStorageError
from nnx_api.runs.run import NNCheckpoint

STATES = ("completed", "pruned", "failed", "running")  # NNx's names; "running": an orphan of a crashed process
STUDY_ATTR = "nnx.search"  # the study's user attribute holding what the stored study belongs to
STUDY_ID_ATTR = "nnx.study_id"  # the study's user attribute naming its trials' attempts


# ---------------------------------------------------------------------------------- results
@attrs.frozen(kw_only=True)
class TrialOutcome:
    """One trial of the study: its values, what became of it (``state``: completed, pruned,
    failed, or running for an orphan left by a crashed process) and why (``reason``: completed,
    pruned, update_cap, deadline, non_finite, missing, no_validated_epoch, ``error:<type>``,
    ``config_error:<type>``, orphaned), what it used (``epochs`` committed, committed ``updates``,
    ``seconds``, ``overrun_seconds`` past the deadline), the ``observations`` ``(epoch, value)``
    pruning saw, its run and the value at its BEST (``value``, also ``monitor_value``), and the
    ``worker`` (``"<host>:<pid>"``) that ran it."""

    number: int
    params: Mapping[str, Any]
    state: str
    reason: str = ""
    value: float | None = None
    best_epoch: int | None = None
    run_id: str | None = None
    attempt_id: str | None = None
    checkpoint: str | None = None  # the BEST tag's manifest file, when the run is on a file system
    epochs: int = 0
    updates: int = 0
    seconds: float = 0.0
    overrun_seconds: float | None = None
    observations: tuple[tuple[int, float], ...] = ()
    pruned_at_epoch: int | None = None
    error: str | None = None
    worker: str | None = None  # "<host>:<pid>" of the worker that ran it last (resumed: the one that finished it)

    @property
    def monitor_value(self) -> float | None:
        """NNx's name for ``value``: the monitored value at the trial's BEST epoch."""
        return self.value

    @classmethod
    def of(cls, frozen: Any) -> TrialOutcome:
        """The outcome Optuna's ``FrozenTrial`` records (this search's user attributes)."""
        facts = dict(frozen.user_attrs)
        state = {"COMPLETE": "completed", "PRUNED": "pruned", "FAIL": "failed"}.get(frozen.state.name, "running")
        facts.setdefault("reason", "orphaned" if state == "running" else state)
        facts["observations"] = tuple((int(e), float(v)) for e, v in facts.get("observations", ()))
        known = {f.name for f in attrs.fields(cls)} - {"number", "params", "state"}
        return cls(number=frozen.number, params=dict(frozen.params), state=state,
                   **{k: v for k, v in facts.items() if k in known})


@attrs.frozen(kw_only=True)
class SearchResult:
    """Every trial of the study in order (earlier searches' included), the best completed one
    (None if none completed), how many trials this call asked, why it stopped, the direction
    (``"minimize"`` / ``"maximize"``), the monitor's key (``"val.loss"``; None for the fallback
    signal), how far past the deadline it ended, the runs this call trained by trial number, the
    trials it resumed from a dead worker's LAST (``resumed``), and the Optuna study."""

    outcomes: tuple[TrialOutcome, ...]
    best: TrialOutcome | None
    asked: int
    stop_reason: str  # "budget" | "deadline" | "exhausted"
    direction: str
    study: Any = attrs.field(eq=False, repr=False)
    study_name: str = ""
    monitor: str | None = None
    deadline_overrun_seconds: float | None = None
    trial_runs: Mapping[int, Any] = attrs.field(factory=dict, eq=False, repr=False)
    resumed: tuple[int, ...] = ()  # the trials this call resumed from their runs' LAST (a dead worker's)

    def counts(self) -> dict[str, int]:
        """How many trials ended in each state."""
        return {state: sum(o.state == state for o in self.outcomes) for state in STATES}


class SearchError(SingleProcessError):
    """The search cannot run here (inside a multi-rank process group); a ``RuntimeError``."""


# ---------------------------------------------------------------------------------- trial control
class TrialControl(Callback):
    """One trial's callback: reports each epoch's monitor decision to the Optuna trial (pruning),
    stops a trial whose monitored value is missing or not finite, and stops at an update or epoch
    boundary at the update cap or the deadline."""

    distributed = "all"

    def __init__(
        self, trial: Any, max_updates: int | None = None, *, deadline: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.trial, self.max_updates, self.deadline, self.clock = trial, max_updates, deadline, clock
        self.pruned_at: int | None = None
        self.reason: str | None = None  # "update_cap" | "deadline" | "non_finite" | "missing"
        self.overrun: float | None = None
        self.updates = 0
        self.epochs = 0
        self.observations: list[tuple[int, float]] = []

    @property
    def reported(self) -> list[tuple[int, float]]:
        """The ``(epoch, value)`` pairs reported to the pruner (``observations``)."""
        return self.observations

    def on_train_begin(self, ctx: CallbackContext) -> None:
        ctx.update_listeners.append(self._after_update)

    def _past_deadline(self) -> bool:
        if self.deadline is None:
            return False
        now = self.clock()
        if now < self.deadline:
            return False
        self.overrun = now - self.deadline
        return True

    def _stop(self, reason: str) -> None:
        """Why the trial stops, also written on the trial at once: a worker that resumes it after
        this process died (between this decision and telling the trial) knows it."""
        self.reason = reason
        self.trial.set_user_attr("reason", reason)

    def _after_update(self, ctx: CallbackContext) -> None:
        self.updates = ctx.update_count
        if self.max_updates is not None and self.updates >= self.max_updates:
            ctx.stop_at_update = True
            self._stop(self.reason or "update_cap")
        if self._past_deadline():
            ctx.stop_at_update = True
            self._stop("deadline")

    def on_epoch_end(self, ctx: CallbackContext) -> None:
        self.epochs += 1
        decision = ctx.decision
        value = None if decision is None else decision.value
        if value is None or not math.isfinite(value):
            ctx.should_stop = True
            self._stop("missing" if value is None else "non_finite")
            return
        self.trial.report(float(value), step=ctx.epoch)  # a resumed epoch's report is already stored: Optuna keeps it
        self.observations[:] = [o for o in self.observations if o[0] < ctx.epoch] + [(ctx.epoch, float(value))]
        if self.trial.should_prune():
            ctx.should_stop, self.pruned_at = True, ctx.epoch
            self.trial.set_user_attr("pruned_at_epoch", ctx.epoch)
        elif self._past_deadline():
            ctx.should_stop = True
            self._stop("deadline")

    def resume(self, frozen: Any) -> None:
        """Go on from what a dead worker's control saw and decided on trial ``frozen``."""
        self.observations[:] = sorted((int(e), float(v)) for e, v in frozen.intermediate_values.items())
        self.pruned_at, self.reason = frozen.user_attrs.get("pruned_at_epoch"), frozen.user_attrs.get("reason")


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
    fields = {f.name for f in dataclasses.fields(obj)} if dataclasses.is_dataclass(obj) else set()
    if head not in fields:
        raise ParamsError(name, f"{type(obj).__name__} has no field {head!r}")
    return dataclasses.replace(obj, **{head: _set_path(getattr(obj, head), rest, value, name)})


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
    clock: Callable[[], float] = time.monotonic,
) -> SearchResult:
    """Search ``space`` by fitting ``plan`` once per trial (see the module docstring).

    ``monitor`` (a validation monitor; default: the plan's ``NNTrainParams.monitor``, else the
    documented fallback signal) decides BEST in every trial and so the trial's value; its
    direction is the study's. A plan that has its own monitor must have this one. ``sampler``
    defaults to TPE seeded with ``seed``; ``pruner`` to Optuna's default (a median pruner);
    ``storage`` is Optuna's study storage (the runs go where the plan keeps them:
    ``plan.with_storage(...)``); a stored study named ``study_name`` is continued, its trials
    counting against the budget, and its trials left running by a dead worker are resumed from
    their runs' LAST (``nnx_api.experiments.search_workers``). ``clock`` measures the deadline
    (seconds)."""
    started = clock()  # the deadline covers the whole search, set-up included
    refuse_multi_rank("nnx_api.search.search()")
    if not isinstance(space, SearchSpace):
        raise ParamsError("search.space", f"must be a SearchSpace, got {type(space).__name__}")
    if not isinstance(budget, SearchBudget):
        raise ParamsError("search.budget", f"must be a SearchBudget, got {type(budget).__name__}")
    if not callable(apply):
        raise ParamsError("search.apply", "must be a callable (plan, params) -> ExperimentPlan")
    if study_name is not None and (not isinstance(study_name, str) or not study_name.strip()):
        raise ParamsError("search.study_name", f"must be a non-blank string or None, got {study_name!r}")
    plan, resolved = _scored_plan(plan, monitor, budget)
    optuna = require("optuna", "search", "nnx_api.experiments.search.search")
    direction = "minimize" if resolved is None or resolved.mode == "min" else "maximize"
    name = study_name or f"search-{uuid.uuid4().hex[:8]}"
    study = workers.open_study(
        optuna, name=name, storage=storage, direction=direction,
        sampler=sampler if sampler is not None else _default_sampler(optuna, seed),
        pruner=pruner,  # None: Optuna's own default (a median pruner after five trials), as NNx passes it
    )
    study_id = _claim(study, name, {"space": space.state(), "monitor": None if resolved is None else resolved.state(),
                         "direction": direction, "plan": _plan_identity(plan)})
    deadline = None if budget.deadline_seconds is None else started + budget.deadline_seconds
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-._") or "search"
    root = workers.lease_root(plan)
    tried = {repr(sorted(t.params.items())) for t in study.get_trials(deepcopy=False)}
    size, asked, resumed, reason, overrun, runs = space.size(), 0, [], "budget", None, {}

    def attempt_of(number: int) -> str:
        return f"{slug}-{study_id}.t{number}"

    me, alive = workers.worker_lease(root)  # held while this worker searches: its trials' askers are alive
    with alive:
        while True:
            now = clock()
            if deadline is not None and now >= deadline:
                reason, overrun = "deadline", now - deadline
                break
            with contextlib.ExitStack() as lease:
                frozen = workers.take_orphan(study, root, attempt_of, lease)
                if frozen is not None:  # a dead worker's trial: its run goes on from LAST
                    trial = optuna.trial.Trial(study, frozen._trial_id)
                    attempt = frozen.user_attrs.get("attempt_id") or attempt_of(trial.number)
                    trial.set_user_attr("attempt_id", attempt)
                    resumed.append(trial.number)
                else:
                    if workers.counted(study.get_trials(deepcopy=False)) >= budget.trials:
                        break
                    if size is not None and len(tried) >= size:
                        reason = "exhausted"
                        break
                    trial = workers.ask(study, me)
                    if workers.over_budget(study, trial.number, budget.trials):  # another worker took the last one
                        trial.set_user_attr(workers.DISCARDED_ATTR, True)
                        _tell(optuna, study, trial, "failed")
                        workers.say(name, f"trial {trial.number} discarded: the budget of {budget.trials} was spent")
                        break
                    attempt = attempt_of(trial.number)
                    lease.enter_context(workers.claimed(root, attempt))
                    asked += 1
                    trial.set_user_attr("attempt_id", attempt)
                trial.set_user_attr(workers.WORKER_ATTR, workers.worker_name())  # only under the lease, made durable
                try:
                    run, state, value = _run_trial(trial, plan, space, apply, resolved, budget, deadline, clock,
                                                   attempt, tried, frozen, name)
                except TrainingPreempted:
                    raise  # the trial stays running under this worker's name: the same command resumes it
                except BaseException:
                    _tell(optuna, study, trial, "failed")
                    raise
                if run is not None:
                    runs[trial.number] = run
                stop = _tell(optuna, study, trial, state, value)  # before the lease is released
            if stop:  # e.g. a GridSampler whose grid is used up
                reason = "exhausted"
                break
    now = clock()
    if reason == "budget" and deadline is not None and asked and now >= deadline:
        overrun = now - deadline
    outcomes = tuple(TrialOutcome.of(t) for t in study.get_trials(deepcopy=False)
                     if t.state.name != "WAITING" and not t.user_attrs.get(workers.DISCARDED_ATTR))
    return SearchResult(
        outcomes=outcomes, best=_best(outcomes, direction), asked=asked, stop_reason=reason, direction=direction,
        study=study, study_name=name, monitor=None if resolved is None else resolved.key,
        deadline_overrun_seconds=overrun, trial_runs=MappingProxyType(runs), resumed=tuple(resumed),
    )


def _default_sampler(optuna: Any, seed: int | None) -> Any:
    """TPE, seeded per trial number when ``seed`` is given (``search_workers.trial_seeded_tpe``)."""
    return optuna.samplers.TPESampler(seed=None) if seed is None else workers.trial_seeded_tpe(optuna, seed)


def _scored_plan(plan: Any, monitor: MonitorSpec | None, budget: SearchBudget) -> tuple[ExperimentPlan, Any]:
    """The plan every trial starts from (carrying ``monitor``) and the monitor resolved (None: the
    fallback signal); refused before any study or trial exists when the search cannot score it."""
    if not isinstance(plan, ExperimentPlan):
        raise ParamsError("search.plan", f"must be an ExperimentPlan, got {type(plan).__name__}")
    train = plan.train
    own = getattr(train, "monitor", None)
    if monitor is not None:
        if not isinstance(monitor, MonitorSpec):
            raise ParamsError("search.monitor", f"must be a MonitorSpec, got {type(monitor).__name__}")
        if monitor.split != "val":
            raise ParamsError(
                "search.monitor", f"{monitor.key!r}: a search scores trials by a validation monitor "
                "(MonitorSpec(split='val')), never a training value; give the plan validation data and monitor it",
            )
        declared = tuple(getattr(train, "metrics", None) or ())
        if own is not None and own.resolve(declared) != monitor.resolve(declared, "search.monitor"):
            raise ParamsError(
                "search.monitor", f"the plan's NNTrainParams.monitor ({own.key!r}) must equal the search monitor "
                f"({monitor.key!r}), so each trial's BEST checkpoint is chosen by the same monitor and direction; "
                "drop one of them or make them equal",
            )
        if own is None and isinstance(train, NNTrainParams):
            plan = plan.with_monitor(monitor)
    plan.check()
    if plan.callbacks:
        raise ParamsError(
            "search.plan.callbacks", f"{len(plan.callbacks)} borrowed callback instance(s): each trial needs fresh "
            "callbacks, or one trial's callback state (counters, bests) would carry into the next; pass factories "
            "instead, plan.with_callbacks().with_callback_factories(lambda: MyCallback(...))",
        )
    if budget.updates_per_trial is not None and plan.train_step_fn is not None:
        raise ParamsError(
            "SearchBudget.updates_per_trial", "counts committed updates, which a train_step_fn reports only through "
            "ctx.report_update(): use the default step or an objective, or no update cap",
        )
    own = plan.train.monitor  # type: ignore[union-attr]  # check() refuses a plan without training params
    return plan, None if own is None else own.resolve(plan.train.metrics)  # type: ignore[union-attr]


def _plan_identity(plan: ExperimentPlan) -> str:
    """What a stored study is tied to: the plan's configuration (not its data or callbacks)."""
    parts = {name: getattr(getattr(plan, name), "state", lambda: None)() for name in ("net", "model", "train")}
    parts.update(seed=plan.seed, data=None if plan.data_identity in (None, INHERIT) else str(plan.data_identity))
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def _claim(study: Any, name: str, identity: dict[str, Any]) -> str:
    """Tie a new study to this search; refuse a stored one that belongs to another. Returns the
    study's own id, which names its trials' attempts, so that a study made anew under an old name
    (its database deleted) never meets the runs of the old one."""
    stored = study.user_attrs.get(STUDY_ATTR)
    if stored is None and not study.trials:
        study.set_user_attr(STUDY_ATTR, identity)
        stored = identity
    elif stored is None:  # trials, but no owner when read: a worker started beside this one may have claimed it since
        stored = study.user_attrs.get(STUDY_ATTR)
        if stored is None:
            raise ParamsError("search.study_name", f"study {name!r} holds trials this search did not run; use another name")
    if stored != identity:
        changed = ", ".join(sorted(k for k in identity if stored.get(k) != identity[k]))
        raise ParamsError("search.study_name", f"study {name!r} belongs to a different search ({changed} differ); use "
                          "another study_name, or search the same space, monitor and plan")
    if STUDY_ID_ATTR not in study.user_attrs:  # two workers making it at once may both set it: each trial keeps its attempt
        study.set_user_attr(STUDY_ID_ATTR, uuid.uuid4().hex[:6])
    return str(study.user_attrs[STUDY_ID_ATTR])


def _run_trial(  # noqa: ANN001
    trial, plan, space, apply, monitor, budget, deadline, clock, attempt, tried, resumed, study_name
) -> tuple[Any, str, float | None]:
    """Fit one trial (``resumed``: the frozen trial a dead worker left, whose run goes on from
    its LAST), recording what became of it in the trial's user attributes; ``(run or None,
    state, value)``. A configuration error (``apply`` raising or giving a plan the search cannot
    score) is recorded, then raised: it stops the search, as does ``KeyboardInterrupt`` (the trial
    failed, as NNx records it). A preemption (``TrainingPreempted``) leaves the trial running, to
    be resumed by the same command."""
    control = TrialControl(trial, budget.updates_per_trial, deadline=deadline, clock=clock)
    started = control.clock()
    if resumed is not None:
        control.resume(resumed)

    def record(**facts: Any) -> None:
        facts = {"attempt_id": attempt, "epochs": control.epochs, "updates": control.updates,
                 "seconds": control.clock() - started, "observations": [list(o) for o in control.observations],
                 "overrun_seconds": control.overrun, **facts}
        for key, value in facts.items():
            trial.set_user_attr(key, value)

    def failed(kind: str, exc: BaseException) -> None:
        record(reason=f"{kind}:{type(exc).__name__}", error=f"{type(exc).__name__}: {exc}")

    values = space.sample(trial)  # a resumed trial's own values: Optuna returns what it suggested before
    tried.add(repr(sorted(values.items())))
    workers.say(study_name, f"trial {trial.number} {'resumed from its LAST' if resumed else 'started'}: "
                f"{dict(values)} (attempt {attempt})")
    try:
        trial_plan = apply(plan, MappingProxyType(dict(values)))
        if not isinstance(trial_plan, ExperimentPlan):
            raise ParamsError("search.apply", f"must return an ExperimentPlan, got {type(trial_plan).__name__}")
        _scored_plan(trial_plan, monitor, budget)
    except BaseException as exc:
        failed("config_error" if isinstance(exc, Exception) else "error", exc)
        raise
    try:
        with_control = trial_plan.with_callback_factories(*trial_plan.callback_factories, lambda: control)
        run = with_control.fit(attempt=attempt, resume="auto" if resumed is not None else None).run
    except TrainingPreempted:
        workers.say(study_name, f"trial {trial.number} preempted: the same command resumes it from its LAST")
        raise
    except BaseException as exc:
        failed("error", exc)
        if not isinstance(exc, Exception):
            raise
        workers.say(study_name, f"trial {trial.number} failed: {type(exc).__name__}: {exc}")
        return None, "failed", None
    best = run.best()
    value = None if best is None or best.selection is None else best.selection.value
    files = run.files()
    on_disk = isinstance(files.storage, FileStorage) and best is not None
    checkpoint = os.path.join(files.storage.root, files.tag_path("best")) if on_disk else None
    facts = dict(run_id=run.id, value=value, best_epoch=None if best is None else best.epoch_idx,
                 epochs=len(run.epochs), checkpoint=checkpoint, updates=control.updates or _committed_updates(run))
    if control.reason in ("non_finite", "missing"):
        state, reason = "failed", control.reason
    elif control.pruned_at is not None:
        state, reason = "pruned", "pruned"
        facts["pruned_at_epoch"] = control.pruned_at
    elif value is None or not math.isfinite(value):
        state, reason = "failed", control.reason or "no_validated_epoch"
    else:
        state, reason = "completed", control.reason or "completed"
    record(**facts, reason=reason)
    workers.say(study_name, f"trial {trial.number} {state}: value {value} (run {run.id})")
    return run, state, value


def _committed_updates(run: Any) -> int:
    """The optimizer updates a run's LAST holds (a resumed trial whose run had already ended
    makes none in this process)."""
    point = NNCheckpoint.resume_point(run)
    return int((point or {}).get("committed_updates") or 0)


def _tell(optuna: Any, study: Any, trial: Any, state: str, value: float | None = None) -> bool:
    """Tell Optuna the trial's state; True when the sampler asked the study to stop. (Optuna
    records the trial before a sampler's stop request, which outside ``study.optimize`` arrives
    as this error.)"""
    states = optuna.trial.TrialState
    try:
        if state == "completed":
            study.tell(trial, value)
        else:
            study.tell(trial, state=states.PRUNED if state == "pruned" else states.FAIL)
    except RuntimeError as exc:
        if "Study.stop" not in str(exc):
            raise
        return True
    return False


def _best(outcomes: Sequence[TrialOutcome], direction: str) -> TrialOutcome | None:
    complete = [o for o in outcomes if o.state == "completed" and o.value is not None and math.isfinite(o.value)]
    if not complete:
        return None
    pick = min if direction == "minimize" else max
    return pick(complete, key=lambda o: o.value)  # the first of equal values wins, as in Optuna


__all__ = [
    "CategoricalParam",
    "FloatParam",
    "IntParam",
    "SearchBudget",
    "SearchError",
    "SearchResult",
    "SearchSpace",
    "StudyStorageError",
    "TrialControl",
    "TrialOutcome",
    "apply_params",
    "search",
]
