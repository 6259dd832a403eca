"""Learning-rate schedule rules that do not depend on torch.

* ``PlateauRule`` — reduce-on-plateau as a rule over the epoch's monitor decision. It has no
  comparator of its own: an epoch is "bad" exactly when the run's one ``MonitorDecision`` did not
  improve (epochs whose value is missing are not counted; a non-finite value counts as bad).
  After more than ``patience`` bad epochs each group's learning rate is multiplied by ``factor``
  (not below ``min_lr``) and ``cooldown`` epochs follow in which bad epochs are not counted —
  torch's ``ReduceLROnPlateau`` semantics, fed by the shared decision. Because the decision
  already applies the monitor's direction and absolute ``min_delta``,
  ``NNSchedulerParams.threshold`` is not used by NNx (it stays in the params, and so in the run
  id, for compatibility). A step function sees it as ``PlateauView`` (``ctx.scheduler``): the
  rule's state to read; its ``step()`` is refused (NNx steps the rule on each epoch's decision).
* ``budget_problems`` / ``check_budgets`` — whether a budgeted schedule (one-cycle, linear
  warmup-decay) covers the ticks a run will make, over plain numbers (``Budget``); checked before
  any run folder is created. ``horizon`` is a schedule's length in ticks.
* ``ClockComponent`` — an update-clock schedule as the checkpointed component
  ``nnx.scheduler_clock``: a resume refuses a different clock, kind or budget.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from nnx_core.errors import ScheduleBudgetError, ScheduleResumeError, UpdateOwnerError

BUDGETED = ("one_cycle", "linear_warmup_decay", "warmup_cosine")


_LR_EPS = 1e-8


@attrs.define(kw_only=True)
class PlateauRule:
    """State and rule of a reduce-on-plateau schedule."""

    factor: float
    patience: int
    cooldown: int
    min_lr: float
    bad_epochs: int = 0
    cooldown_left: int = 0
    reductions: list[int] = attrs.field(factory=list)

    def step(self, epoch: int, improved: bool, status: str, lrs: list[float], set_lr: Callable[[int, float], None]) -> bool:
        """Account one epoch decision; return whether the learning rate was reduced."""
        if status == "missing":
            return False
        self.bad_epochs = 0 if improved else self.bad_epochs + 1
        if self.cooldown_left > 0:
            self.cooldown_left -= 1
            self.bad_epochs = 0
        if self.bad_epochs <= self.patience:
            return False
        reduced = False
        for i, lr in enumerate(lrs):
            new_lr = max(lr * self.factor, self.min_lr)
            if lr - new_lr > _LR_EPS:  # as torch: a change below eps (e.g. at min_lr) is no reduction
                set_lr(i, new_lr)
                reduced = True
        self.cooldown_left, self.bad_epochs = self.cooldown, 0
        if reduced:  # bounded: the LR can only fall to min_lr a finite number of times
            self.reductions.append(epoch)
        return reduced

    def state(self) -> dict[str, Any]:
        """Counters (for checkpoints)."""
        return {"bad_epochs": self.bad_epochs, "cooldown_left": self.cooldown_left, "reductions": list(self.reductions)}

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state`."""
        self.bad_epochs = int(state["bad_epochs"])
        self.cooldown_left = int(state["cooldown_left"])
        self.reductions = [int(e) for e in state["reductions"]]


class PlateauView:
    """What a step function sees as a reduce-on-plateau schedule (``ctx.scheduler``): the rule's
    state and settings to read (``bad_epochs``, ``reductions``, ``factor``...); ``step()`` is
    refused with ``UpdateOwnerError``, as a torch schedule NNx steps is (NNx steps the rule once at
    each epoch's end on the monitor's decision)."""

    __slots__ = ("rule",)

    def __init__(self, rule: PlateauRule) -> None:
        self.rule = rule

    def __getattr__(self, name: str) -> Any:
        return getattr(self.rule, name)

    def step(self, *args: Any, **kwargs: Any) -> None:
        """Refused: NNx steps the plateau rule (see the class docstring)."""
        raise UpdateOwnerError(
            "ctx.scheduler.step() was called on the reduce_lr_on_plateau schedule, which NNx steps once at each epoch's "
            "end on the monitor's decision (it takes no step from a step function); remove scheduler.step() from your "
            "step function. To step a schedule yourself, train with nnx.Trainer and auto_step_schedulers=False, with "
            "a torch schedule kind (step, cosine_annealing, ...)"
        )

    def __repr__(self) -> str:
        return f"PlateauView({self.rule!r})"


def ticks_per_epoch(clock: str, batches: int | None, accumulate: int, nnx_owns_windows: bool) -> int | None:
    """Scheduler ticks one epoch makes: 1 on the epoch clock; on the update clock the number of
    update windows when NNx owns them and the loader has a length (else unknown: None)."""
    if clock == "epoch":
        return 1
    if batches is None or not nnx_owns_windows:
        return None
    return math.ceil(batches / accumulate)


def budget_problems(
    *,
    kind: str,
    clock: str,
    total_steps: int | None,
    n_epochs: int,
    epochs_this_call: int,
    per_epoch: int | None,
    done: int = 0,
    name: str | None = None,
) -> list[str]:
    """Why a budgeted schedule cannot cover the run (empty when it can or cannot be known).
    ``name`` is the optimizer it belongs to, for the message.

    ``done`` ticks were already made (a resume); this call makes ``epochs_this_call × per_epoch``
    more. The budget is ``total_steps``, else the default horizon ``n_epochs × per_epoch``.
    """
    if kind not in BUDGETED or per_epoch is None:
        return []
    unit = "epochs" if clock == "epoch" else "optimizer updates"
    budget = total_steps if total_steps is not None else n_epochs * per_epoch
    needed = done + epochs_this_call * per_epoch
    if needed <= budget:
        return []
    where = f"total_steps={total_steps}" if total_steps is not None else f"the default horizon of {budget}"
    owner = f" for {name!r}" if name is not None else ""
    why = (f"total_steps ({total_steps}) must be >= the run's planned {unit} ({needed})" if total_steps is not None
           else f"resuming {kind}{owner} requires scheduler.total_steps covering the original and resumed {unit}")
    planned = "epochs" if clock == "epoch" else "updates"
    beyond = f", beyond scheduler.total_steps={total_steps}" if total_steps is not None else ""
    resumed = (f" ({done} already made before this resume: {done} with {needed - done} planned {planned} would pass "
               f"the scheduler's budget of {budget}; the resumed {kind}{owner} would reach {unit.rstrip('s')} "
               f"{needed})") if done else ""
    return [
        f"the {kind} schedule runs out: {where} {unit}, but the run makes {needed}{resumed}{beyond}: {why}; "
        f"set NNSchedulerParams(total_steps=...) to at least {needed}"
    ]


class ClockComponent:
    """An update-clock schedule's identity as the checkpointed component ``nnx.scheduler_clock``.

    Its position lives with the schedule's own state; this component makes a stateful resume
    refuse a checkpoint whose schedule ran on another clock, kind or budget (its ticks would mean
    something else). A cosine schedule has no budget to hold to: its period (``T_max``) is restored
    with its state and passing it warns (the learning rate rises again, as torch's formula goes on).
    """

    def __init__(self, clock: Any, name: str = "nnx.scheduler_clock") -> None:
        self.clock = clock
        self.name = name

    def component_spec(self) -> tuple[str, int]:
        """Name and schema version."""
        return (self.name, 1)

    def component_state(self) -> dict[str, Any]:
        """Clock, kind, budget and position."""
        c = self.clock
        return {"clock": c.clock, "kind": c.kind, "budget": c.budget, "ticks": c.ticks}

    def check_component_state(self, state: Mapping[str, Any]) -> list[str]:
        """Differences that make the saved position meaningless here."""
        mine = self.component_state()
        problems = [f"{self.name}: saved {key} {state.get(key)!r} != {mine[key]!r}"
                    for key in ("clock", "kind") if state.get(key) != mine[key]]
        if state.get("budget") != mine["budget"] and mine["kind"] in BUDGETED:  # a cosine's T_max is restored with it
            problems.append(f"{self.name}: the checkpoint's scheduler budget is {state.get('budget')} optimizer "
                            f"updates, this run's is {mine['budget']}; configure the same total_steps")
        return problems

    def load_component_state(self, state: Mapping[str, Any]) -> None:
        """Nothing to load: the schedule's own state (restored with the checkpoint) holds the position."""


@attrs.frozen(kw_only=True)
class Budget:
    """One schedule's budget question in plain numbers: its kind and clock, an explicit
    ``total_steps``, the ticks one epoch makes (None: unknown) and the ticks already made (a
    stateful resume). ``name`` is the optimizer it belongs to (None for a single optimizer)."""

    kind: str
    clock: str
    total_steps: int | None
    per_epoch: int | None
    done: int = 0
    name: str | None = None


def check_budgets(budgets: Sequence[Budget], *, n_epochs: int) -> None:
    """Refuse (``ScheduleBudgetError``) any budgeted schedule too short for the run, before
    anything is written; every schedule's problem is reported at once. When a resumed schedule
    (``done`` ticks restored) is among them, the saved clock cannot go on: ``ScheduleResumeError``,
    also a ``ComponentRestoreError``."""
    problems, resumed = [], False
    for b in budgets:
        found = budget_problems(
            kind=b.kind, clock=b.clock, total_steps=b.total_steps, n_epochs=n_epochs, epochs_this_call=n_epochs,
            per_epoch=b.per_epoch, done=b.done, name=b.name,
        )
        problems += [(f"optimizer {b.name!r}: " if b.name is not None else "") + p for p in found]
        resumed = resumed or bool(found and b.done)
    if problems and resumed:
        raise ScheduleResumeError(problems)
    if problems:
        raise ScheduleBudgetError("; ".join(problems))


def horizon(clock: str, *, n_epochs: int, batches: int | None, accumulate: int, explicit: int | None) -> int:
    """A schedule's length in ticks: ``n_epochs`` on the epoch clock; on the update clock the
    run's update windows (``n_epochs × ⌈batches / accumulate⌉``), or ``explicit`` (total_steps,
    T_max or step_size) when the loader has no length."""
    if clock == "epoch":
        return n_epochs
    if batches is None:
        if explicit is None:
            raise ScheduleBudgetError(
                "the train_loader has no len(), so the update-clock schedule needs an explicit total_steps "
                "(total_steps, T_max or step_size)"
            )
        return explicit
    return n_epochs * math.ceil(batches / accumulate)
