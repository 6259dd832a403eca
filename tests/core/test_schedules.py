"""Learning-rate schedule rules without torch (``nnx_core.schedules``): reduce-on-plateau over the
run's one monitor decision with torch's ``ReduceLROnPlateau`` counting, the budget a budgeted
schedule must cover, a schedule's horizon, and the update clock as a checkpointed component.
Oracles are the module docstring's rules, worked by hand below."""

from __future__ import annotations

import pytest

from nnx_core.errors import ScheduleBudgetError
from nnx_core.schedules import Budget, ClockComponent, PlateauRule, budget_problems, check_budgets, horizon, ticks_per_epoch


class Groups:
    """Param-group learning rates the rule reads and sets (set_lr records each call)."""

    def __init__(self, *lrs):
        self.lrs, self.calls = list(lrs), []

    def set_lr(self, i, lr):
        self.calls.append((i, lr))
        self.lrs[i] = lr


def feed(rule, groups, improved, start=0, status="ok"):
    return [rule.step(start + e, ok, status, list(groups.lrs), groups.set_lr) for e, ok in enumerate(improved)]


def test_worked_example_patience_cooldown_and_min_lr():
    # patience 1: the 2nd bad epoch in a row reduces; cooldown 1: the epoch after a reduction is not
    # counted; group 1 stops at min_lr 0.1 while group 0 keeps halving.
    rule = PlateauRule(factor=0.5, patience=1, cooldown=1, min_lr=0.1)
    groups = Groups(1.0, 0.15)
    reduced = feed(rule, groups, [True, False, False, False, False, False])
    #              epoch:         0     1      2      3 (cooldown) 4  5
    assert reduced == [False, False, True, False, False, True]
    assert groups.calls == [(0, 0.5), (1, 0.1), (0, 0.25)]  # 0.1 is min_lr: no second call for group 1
    assert groups.lrs == [0.25, 0.1] and rule.reductions == [2, 5]
    assert (rule.bad_epochs, rule.cooldown_left) == (0, 1)


def test_an_improvement_resets_the_bad_epochs():
    rule = PlateauRule(factor=0.1, patience=2, cooldown=0, min_lr=0.0)
    groups = Groups(1.0)
    assert feed(rule, groups, [False, False, True, False, False]) == [False] * 5
    assert rule.bad_epochs == 2
    assert feed(rule, groups, [False], start=5) == [True] and groups.lrs == [pytest.approx(0.1)]


def test_patience_zero_reduces_on_every_bad_epoch_without_cooldown():
    rule = PlateauRule(factor=0.5, patience=0, cooldown=0, min_lr=0.0)
    groups = Groups(1.0, 2.0)
    assert feed(rule, groups, [False, True, False]) == [True, False, True]
    assert groups.lrs == [0.25, 0.5] and rule.reductions == [0, 2]


def test_a_missing_value_is_not_counted_and_changes_nothing():
    rule = PlateauRule(factor=0.5, patience=1, cooldown=2, min_lr=0.0)
    groups = Groups(1.0)
    feed(rule, groups, [False])
    before = rule.state()
    assert feed(rule, groups, [False, False, False], start=1, status="missing") == [False] * 3
    assert rule.state() == before and groups.calls == []
    assert feed(rule, groups, [False], start=4, status="nonfinite") == [True]  # non-finite counts as bad
    assert rule.reductions == [4] and rule.cooldown_left == 2


def test_cooldown_counts_down_once_per_counted_epoch_and_discards_bad_epochs():
    rule = PlateauRule(factor=0.5, patience=0, cooldown=2, min_lr=0.0)
    groups = Groups(1.0)
    assert feed(rule, groups, [False, False, False, False]) == [True, False, False, True]
    assert rule.reductions == [0, 3] and groups.lrs == [0.25]


def test_no_reduction_at_min_lr_still_restarts_cooldown_and_counting():
    rule = PlateauRule(factor=0.5, patience=0, cooldown=1, min_lr=0.5)
    groups = Groups(0.5)
    assert feed(rule, groups, [False]) == [False]  # already at min_lr: no change, not a reduction
    assert groups.calls == [] and rule.reductions == []
    assert (rule.bad_epochs, rule.cooldown_left) == (0, 1)


def test_a_change_smaller_than_eps_is_no_reduction_and_a_larger_one_is():
    tiny = PlateauRule(factor=0.5, patience=0, cooldown=0, min_lr=1.0)
    groups = Groups(1.0 + 5e-9)
    assert feed(tiny, groups, [False]) == [False] and groups.calls == []
    groups = Groups(1.0 + 5e-8)
    assert feed(tiny, groups, [False]) == [True] and groups.calls == [(0, 1.0)]
    exact = PlateauRule(factor=0.0, patience=0, cooldown=0, min_lr=0.0)
    groups = Groups(1e-8)  # a change of exactly eps is no reduction either (torch: old - new > eps)
    assert feed(exact, groups, [False]) == [False] and groups.calls == []


def test_state_round_trips_through_plain_values():
    rule = PlateauRule(factor=0.5, patience=1, cooldown=3, min_lr=0.0)
    groups = Groups(1.0)
    feed(rule, groups, [False, False, False])
    state = rule.state()
    assert state == {"bad_epochs": 0, "cooldown_left": 2, "reductions": [1]}
    state["reductions"].append(99)  # the state is a copy
    assert rule.reductions == [1]
    other = PlateauRule(factor=0.5, patience=1, cooldown=3, min_lr=0.0)
    other.load_state({"bad_epochs": "1", "cooldown_left": 2.0, "reductions": ["1", 4]})
    assert other.state() == {"bad_epochs": 1, "cooldown_left": 2, "reductions": [1, 4]}
    assert all(type(v) is int for v in (other.bad_epochs, other.cooldown_left, *other.reductions))


def test_ticks_per_epoch():
    assert ticks_per_epoch("epoch", None, 3, False) == 1
    assert ticks_per_epoch("epoch", 10, 3, True) == 1
    assert ticks_per_epoch("optimizer_update", 10, 3, True) == 4  # windows 3+3+3+1
    assert ticks_per_epoch("optimizer_update", 9, 3, True) == 3
    assert ticks_per_epoch("optimizer_update", 7, 1, True) == 7
    assert ticks_per_epoch("optimizer_update", None, 3, True) is None  # no len()
    assert ticks_per_epoch("optimizer_update", 10, 3, False) is None  # a step function owns the windows


def _problems(**kw):
    args = {"kind": "one_cycle", "clock": "optimizer_update", "total_steps": None, "n_epochs": 2,
            "epochs_this_call": 2, "per_epoch": 4, "done": 0}
    args.update(kw)
    return budget_problems(**args)


def test_budgets_that_cover_the_run_or_cannot_be_known_have_no_problem():
    assert _problems() == []  # default horizon 2 × 4 = the 8 ticks made
    assert _problems(total_steps=8) == []  # exactly enough
    assert _problems(kind="linear_warmup_decay", total_steps=8) == []
    assert _problems(per_epoch=None, total_steps=1) == []  # unknown ticks per epoch
    assert _problems(kind="cosine", total_steps=1) == []  # not a budgeted kind
    assert _problems(kind="step", total_steps=1, epochs_this_call=5) == []


def test_a_fresh_run_has_made_no_ticks_yet():
    assert budget_problems(kind="one_cycle", clock="epoch", total_steps=3, n_epochs=3, epochs_this_call=3, per_epoch=1) == []


def test_an_explicit_budget_one_short_is_refused_with_what_to_set():
    assert _problems(total_steps=7) == [(
        "the one_cycle schedule runs out: total_steps=7 optimizer updates, but the run makes 8, beyond "
        "scheduler.total_steps=7: total_steps (7) "
        "must be >= the run's planned optimizer updates (8); set NNSchedulerParams(total_steps=...) to at least 8"
    )]


def test_the_default_horizon_on_the_epoch_clock_and_a_resume():
    assert _problems(kind="linear_warmup_decay", clock="epoch", per_epoch=1, n_epochs=3, epochs_this_call=3, done=2) == [(
        "the linear_warmup_decay schedule runs out: the default horizon of 3 epochs, but the run makes 5 "
        "(2 already made before this resume: 2 with 3 planned epochs would pass the scheduler's budget of 3; "
        "the resumed linear_warmup_decay would reach epoch 5): resuming "
        "linear_warmup_decay requires scheduler.total_steps covering the original and resumed epochs; "
        "set NNSchedulerParams(total_steps=...) to at least 5"
    )]
    # done ticks plus this call's: 3 + 1 × 4 = 7 ≤ 7
    assert _problems(total_steps=7, done=3, epochs_this_call=1) == []
    assert _problems(total_steps=6, done=3, epochs_this_call=1)[0].endswith("to at least 7")


def test_check_budgets_reports_every_schedule_at_once_naming_its_optimizer():
    check_budgets([Budget(kind="one_cycle", clock="optimizer_update", total_steps=6, per_epoch=3)], n_epochs=2)
    with pytest.raises(ScheduleBudgetError) as info:
        check_budgets(
            [
                Budget(kind="one_cycle", clock="optimizer_update", total_steps=5, per_epoch=3, name="gen"),
                Budget(kind="one_cycle", clock="optimizer_update", total_steps=None, per_epoch=3, name="ok"),
                Budget(kind="linear_warmup_decay", clock="epoch", total_steps=1, per_epoch=1, done=1),
            ],
            n_epochs=2,
        )
    assert str(info.value) == (
        "optimizer 'gen': the one_cycle schedule runs out: total_steps=5 optimizer updates, but the run makes 6, "
        "beyond scheduler.total_steps=5: "
        "total_steps (5) must be >= the run's planned optimizer updates (6); "
        "set NNSchedulerParams(total_steps=...) to at least 6; "
        "the linear_warmup_decay schedule runs out: total_steps=1 epochs, but the run makes 3 "
        "(1 already made before this resume: 1 with 2 planned epochs would pass the scheduler's budget of 1; "
        "the resumed linear_warmup_decay would reach epoch 3), beyond scheduler.total_steps=1: total_steps (1) "
        "must be >= the run's planned epochs (3); set NNSchedulerParams(total_steps=...) to at least 3"
    )


def test_check_budgets_counts_this_call_as_n_epochs():
    # n_epochs 3 × 2 per epoch = 6 ticks: a budget of 5 falls short, 6 covers
    with pytest.raises(ScheduleBudgetError, match="makes 6"):
        check_budgets([Budget(kind="one_cycle", clock="optimizer_update", total_steps=5, per_epoch=2)], n_epochs=3)
    check_budgets([Budget(kind="one_cycle", clock="optimizer_update", total_steps=6, per_epoch=2)], n_epochs=3)


def test_horizon():
    assert horizon("epoch", n_epochs=5, batches=None, accumulate=2, explicit=None) == 5
    assert horizon("epoch", n_epochs=5, batches=10, accumulate=2, explicit=99) == 5
    assert horizon("optimizer_update", n_epochs=3, batches=10, accumulate=4, explicit=99) == 9  # 3 × ⌈10/4⌉
    assert horizon("optimizer_update", n_epochs=2, batches=8, accumulate=4, explicit=None) == 4
    assert horizon("optimizer_update", n_epochs=2, batches=None, accumulate=4, explicit=7) == 7
    with pytest.raises(ScheduleBudgetError) as info:
        horizon("optimizer_update", n_epochs=2, batches=None, accumulate=1, explicit=None)
    assert str(info.value) == (
        "the train_loader has no len(), so the update-clock schedule needs an explicit total_steps "
        "(total_steps, T_max or step_size)"
    )


class Clock:
    def __init__(self, clock="optimizer_update", kind="one_cycle", budget=12, ticks=5):
        self.clock, self.kind, self.budget, self.ticks = clock, kind, budget, ticks


def test_clock_component_refuses_another_clock_kind_or_budget_but_not_another_position():
    comp = ClockComponent(Clock())
    assert comp.component_spec() == ("nnx.scheduler_clock", 1)
    assert ClockComponent(Clock(), "nnx.scheduler_clock.gen").component_spec() == ("nnx.scheduler_clock.gen", 1)
    state = comp.component_state()
    assert state == {"clock": "optimizer_update", "kind": "one_cycle", "budget": 12, "ticks": 5}
    assert comp.check_component_state({**state, "ticks": 11}) == []
    assert comp.check_component_state({"clock": "epoch", "kind": "one_cycle", "budget": 10, "ticks": 0}) == [
        "nnx.scheduler_clock: saved clock 'epoch' != 'optimizer_update'",
        "nnx.scheduler_clock: the checkpoint's scheduler budget is 10 optimizer updates, this run's is 12; "
        "configure the same total_steps",
    ]
    named = ClockComponent(Clock(), "nnx.scheduler_clock.gen")
    assert named.check_component_state({"clock": "optimizer_update", "budget": 12}) == [
        "nnx.scheduler_clock.gen: saved kind None != 'one_cycle'"
    ]
    assert comp.load_component_state(state) is None and comp.component_state() == state



def test_a_cosine_clock_holds_no_budget_on_resume_its_period_comes_back_with_its_state():
    """A stateful resume restores a cosine schedule's own T_max with its state (torch's
    CosineAnnealingLR.state_dict holds it), so another configured T_max is no reason to refuse:
    only the clock and kind must match. A budgeted kind still refuses another budget."""
    cosine = ClockComponent(Clock(kind="cosine_annealing", budget=10))
    saved = {"clock": "optimizer_update", "kind": "cosine_annealing", "budget": 5, "ticks": 5}
    assert cosine.check_component_state(saved) == []
    assert cosine.check_component_state({**saved, "clock": "epoch"}) == [
        "nnx.scheduler_clock: saved clock 'epoch' != 'optimizer_update'"]
    assert ClockComponent(Clock(budget=10)).check_component_state({**saved, "kind": "one_cycle"}) != []
