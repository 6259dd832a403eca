"""The shared update engine: window arithmetic with fakes (gradient exactness with torch:
``tests/adapters/test_engine_torch.py``)."""

from __future__ import annotations

import math

import pytest

from nnx_core.engine import TermReading, UpdateEngine, reading_problems
from nnx_core.errors import NonFiniteLossError, TrainingInputError
from nnx_core.update import COMMITTED, MASKED, NONFINITE, OVERFLOW, announce


class FakeGradients:
    """Records what the engine asks of the gradient port."""

    def __init__(self, log=None):
        self.plans, self.factors, self.discards = [], [], 0
        self.log = log if log is not None else []

    def backward(self, plan):
        self.plans.append([(slot, list(parts)) for slot, parts in plan])
        self.log.append("backward")

    def combine(self, factors):
        self.factors.append(list(factors))
        self.log.append("combine")

    def discard(self):
        self.discards += 1


class FakeOptimizer:
    """A scripted Optimizer port: logs every call; ``finite`` scripts the gradient check."""

    def __init__(self, name, log, finite=True):
        self.name, self.log, self.finite = name, log, finite

    def zero_grad(self):
        self.log.append(f"zero_grad:{self.name}")

    def scale_grads(self, factor):
        self.log.append(f"scale:{self.name}")

    def unscale(self):
        self.log.append(f"unscale:{self.name}")

    def grads_finite(self):
        self.log.append(f"finite?:{self.name}")
        return self.finite

    def clip(self, max_norm):
        self.log.append(f"clip:{self.name}")
        return 1.0

    def step(self):
        self.log.append(f"step:{self.name}")
        return True

    def state(self):
        return {}

    def load_state(self, state):
        pass

    @property
    def lrs(self):
        return [0.1]


def mean(name, num, den, weight=1.0):
    return TermReading(name=name, numerator=num, denominator=den, weight=weight)


def total(name, num, weight=1.0):
    return TermReading(name=name, numerator=num, reduction="sum", weight=weight)


def engine(accumulate=2, log=None, **kw):
    log = [] if log is None else log
    grads = FakeGradients(log)
    opts = kw.pop("optimizers", None) or {"default": FakeOptimizer("default", log)}
    return UpdateEngine(opts, grads, accumulate=accumulate, **kw), grads, log


def test_worked_example_numerators_8_and_1_over_counts_2_and_1():
    eng, grads, _ = engine()
    assert eng.add([mean("loss", 8.0, 2)], is_last_batch=False) is None
    commit = eng.add([mean("loss", 1.0, 1)], is_last_batch=False)
    assert commit.committed and commit.loss == 3.0 and commit.losses == {"loss": 3.0}
    assert grads.factors == [[1 / 3]]  # one mean term: everything in slot 0, divided by Σden once

    eng, grads, _ = engine()
    eng.add([total("loss", 8.0)], is_last_batch=False)
    commit = eng.add([total("loss", 1.0)], is_last_batch=False)
    assert commit.loss == 9.0 and grads.factors == [[1.0]]


def test_update_order_is_unscale_finite_clip_step_once_per_optimizer():
    log = []
    opts = {"a": FakeOptimizer("a", log), "b": FakeOptimizer("b", log)}
    eng, _, _ = engine(accumulate=1, log=log, optimizers=opts, max_norms={"a": 1.0, "b": None})
    commit = eng.add([mean("loss", 2.0, 2)], is_last_batch=False)
    assert commit.update_idx == {"a": 1, "b": 1}
    assert log == [
        "backward", "combine", "unscale:a", "unscale:b", "finite?:a", "finite?:b", "clip:a", "step:a", "step:b",
        "zero_grad:a", "zero_grad:b",
    ]


def test_one_microbatch_window_backpropagates_the_final_weighted_loss_once():
    eng, grads, _ = engine(accumulate=1)
    eng.add([mean("a", 4.0, 4, weight=0.5), mean("b", 1.0, 2, weight=2.0), total("c", 3.0, weight=3.0)], is_last_batch=False)
    assert grads.plans == [[(0, [(0, 0.5 / 4), (1, 2.0 / 2), (2, 3.0)])]]
    assert grads.factors == [[1.0]]


def test_several_scale_classes_use_one_slot_each_and_combine_with_window_denominators():
    eng, grads, _ = engine(accumulate=2)
    eng.add([mean("a", 4.0, 4, weight=0.5), mean("b", 1.0, 0, weight=2.0), total("c", 3.0)], is_last_batch=False)
    commit = eng.add([mean("a", 2.0, 2, weight=0.5), mean("b", 6.0, 3, weight=2.0), total("c", 1.0)], is_last_batch=False)
    # slots in first-seen order: a → 0, b → 1, the sum terms → 2; b is masked in the first microbatch
    assert grads.plans == [[(0, [(0, 0.5)]), (2, [(2, 1.0)])], [(0, [(0, 0.5)]), (1, [(1, 2.0)]), (2, [(2, 1.0)])]]
    assert grads.factors == [[1 / 6, 1 / 3, 1.0]]
    assert commit.losses == {"a": 1.0, "b": 2.0, "c": 4.0}
    assert commit.loss == pytest.approx(0.5 * 1.0 + 2.0 * 2.0 + 4.0)


def test_all_masked_window_commits_nothing_and_trailing_window_closes_at_epoch_end():
    log = []
    eng, grads, _ = engine(accumulate=3, log=log)
    eng.add([mean("loss", 0.0, 0)], is_last_batch=False)
    commit = eng.add([mean("loss", 0.0, 0)], is_last_batch=True)  # the epoch's last batch closes the window
    assert commit.status == MASKED and not commit.committed and commit.microbatches == 2
    assert not any(entry.startswith("step") for entry in log) and grads.plans == [] and grads.factors == []
    assert eng.commits == 0 and eng.skipped == 1 and eng.update_counts == {"default": 0}


def test_nonfinite_term_fails_before_backward_or_drops_the_window_when_skipping():
    eng, grads, _ = engine(accumulate=2)
    eng.add([mean("loss", 1.0, 1)], is_last_batch=False)
    with pytest.raises(NonFiniteLossError, match="not finite"):
        eng.add([mean("loss", math.nan, 1)], is_last_batch=False)
    assert len(grads.plans) == 1 and not eng.window_open  # the NaN microbatch never reached backward

    eng, grads, log = engine(accumulate=2, nonfinite="skip")
    eng.add([mean("loss", math.inf, 1)], is_last_batch=False)
    commit = eng.add([mean("loss", 1.0, 1)], is_last_batch=False)
    assert commit.status == NONFINITE and grads.plans == [] and "step:default" not in log
    assert eng.add([mean("loss", 1.0, 1)], is_last_batch=True).committed  # the next window is clean


def test_nonfinite_gradients_of_a_finite_loss_fail_or_skip():
    log = []
    eng, _, _ = engine(accumulate=1, log=log, optimizers={"default": FakeOptimizer("default", log, finite=False)})
    with pytest.raises(NonFiniteLossError):
        eng.add([mean("loss", 1.0, 1)], is_last_batch=False)
    assert "step:default" not in log


def test_refusals_name_the_term():
    eng, _, _ = engine()
    with pytest.raises(TrainingInputError, match="'x'.*denominator"):
        eng.add([TermReading(name="x", numerator=1.0, denominator=None)], is_last_batch=False)
    with pytest.raises(TrainingInputError, match="sum term takes no denominator"):
        eng.add([TermReading(name="x", numerator=1.0, denominator=2.0, reduction="sum")], is_last_batch=False)
    eng.add([mean("a", 1.0, 1)], is_last_batch=False)
    with pytest.raises(TrainingInputError, match="changed inside an update window"):
        eng.add([mean("b", 1.0, 1)], is_last_batch=False)


def test_announce_delivers_every_event_before_any_tick():
    log = []
    announce(
        ["gen", "disc"],
        deliver=lambda e: log.append(f"event:{e}"),
        tick=lambda e: log.append(f"tick:{e}"),
        after=lambda: log.append("listeners"),
    )
    assert log == ["event:gen", "event:disc", "tick:gen", "tick:disc", "listeners"]


def test_engine_counters_are_a_component():
    eng, _, _ = engine(accumulate=1)
    eng.add([mean("loss", 1.0, 1)], is_last_batch=False)
    eng.add([mean("loss", 0.0, 0)], is_last_batch=False)
    state = eng.component_state()
    assert state == {"commits": 1, "skipped": 1, "update_counts": {"default": 1}}
    other, _, _ = engine()
    assert other.check_component_state(state) == []
    other.load_component_state(state)
    assert other.component_state() == state
    assert other.check_component_state({"update_counts": {"gen": 1}})


class FakeLossScale:
    """A loss-scale port that counts its updates."""

    def __init__(self, log):
        self.log = log

    def update(self):
        self.log.append("scale.update")


def test_reading_problems_refuse_each_bad_field_naming_the_term():
    assert reading_problems(mean("ok", 1.0, 0)) == [] and reading_problems(total("ok", 1.0)) == []
    for den in (-1.0, -1e-9, math.inf, math.nan, None):
        assert reading_problems(mean("m", 1.0, den)) == [
            f"term 'm': a mean term needs a finite denominator ≥ 0 (its sample count; 0 = fully masked), got {den!r}"
        ]
    assert reading_problems(TermReading(name="s", numerator=1.0, denominator=2.0, reduction="sum")) == [
        "term 's': a sum term takes no denominator, got 2.0"
    ]
    both = reading_problems(TermReading(name="r", numerator=1.0, reduction="max", weight=math.inf))
    assert both == ["term 'r': reduction must be 'mean' or 'sum', got 'max'", "term 'r': weight must be finite, got inf"]
    eng, _, _ = engine()
    with pytest.raises(TrainingInputError, match="got 'max'; term 'r': weight must be finite"):
        eng.add([TermReading(name="r", numerator=1.0, reduction="max", weight=math.inf)], is_last_batch=False)


def test_bad_microbatches_are_refused_before_anything_is_accounted():
    eng, grads, _ = engine()
    with pytest.raises(TrainingInputError, match="^an objective must return at least one LossTerm$"):
        eng.add([], is_last_batch=False)
    with pytest.raises(TrainingInputError, match=r"term names must be unique within a microbatch, got \['a', 'a'\]"):
        eng.add([mean("a", 1.0, 1), total("a", 1.0)], is_last_batch=False)
    assert grads.plans == [] and not eng.window_open


def test_a_window_keeps_its_reductions_and_weights():
    for changed, then in ((total("a", 1.0), "['a']"), (mean("a", 1.0, 1, weight=2.0), "['a']"), (mean("b", 1.0, 1), "['b']")):
        eng, _, _ = engine(accumulate=3)
        eng.add([mean("a", 1.0, 1)], is_last_batch=False)
        with pytest.raises(TrainingInputError) as info:
            eng.add([changed], is_last_batch=False)
        assert str(info.value) == (
            f"the loss terms changed inside an update window: ['a'] (reductions ['mean'], weights [1.0]) then {then}; "
            "keep names, reductions and weights fixed across the microbatches of a window"
        )
    eng, _, _ = engine(accumulate=3)
    eng.add([mean("a", 1.0, 1, weight=2)], is_last_batch=False)
    assert eng.add([mean("a", 1.0, 1, weight=2.0)], is_last_batch=False) is None  # 2 and 2.0 are one weight


def test_the_engine_refuses_a_bad_configuration():
    log = []
    opts = {"default": FakeOptimizer("default", log)}
    with pytest.raises(ValueError, match="^the update engine needs at least one optimizer$"):
        UpdateEngine({}, FakeGradients())
    for bad in (0, -1, True, 2.0, "2"):
        with pytest.raises(ValueError, match=f"accumulate must be an integer ≥ 1, got {bad!r}"):
            UpdateEngine(opts, FakeGradients(), accumulate=bad)
    with pytest.raises(ValueError, match="nonfinite must be 'fail' or 'skip', got 'drop'"):
        UpdateEngine(opts, FakeGradients(), nonfinite="drop")
    eng = UpdateEngine(opts, FakeGradients())
    assert (eng.accumulate, eng.max_norms, eng.nonfinite, eng.loss_scale) == (1, {}, "fail", None)
    assert (eng.commits, eng.skipped, eng.update_counts) == (0, 0, {"default": 0})


def test_windows_end_every_accumulate_microbatches_or_at_the_last_batch():
    eng, _, _ = engine(accumulate=3)
    closed = [eng.add([mean("loss", 1.0, 1)], is_last_batch=i == 4) for i in range(5)]
    assert [c is not None for c in closed] == [False, False, True, False, True]
    assert [c.microbatches for c in closed if c] == [3, 2]
    assert [c.update_idx for c in closed if c] == [{"default": 1}, {"default": 2}]
    assert eng.commits == 2 and eng.update_counts == {"default": 2} and not eng.window_open
    eng.add([mean("loss", 1.0, 1)], is_last_batch=False)
    assert eng.window_open


def test_a_term_masked_over_the_whole_window_is_left_out_and_the_others_commit():
    eng, grads, _ = engine(accumulate=2)
    eng.add([mean("a", 0.0, 0), mean("b", 3.0, 1, weight=2.0)], is_last_batch=False)
    commit = eng.add([mean("a", 0.0, 0), mean("b", 0.0, 0, weight=2.0)], is_last_batch=False)
    assert commit.committed and commit.microbatches == 2
    assert commit.losses == {"b": 3.0} and commit.loss == 6.0
    assert grads.plans == [[(1, [(1, 2.0)])]]  # a has nothing to back-propagate; the all-masked microbatch no call
    assert grads.factors[0][1] == 1.0  # b: 1 / W_b, W_b = 1


def test_a_zero_weight_or_masked_term_is_not_back_propagated_and_the_others_are():
    eng, grads, _ = engine(accumulate=1)
    commit = eng.add([mean("b", 4.0, 2, weight=0.0), mean("a", 2.0, 2)], is_last_batch=False)
    assert grads.plans == [[(0, [(1, 0.5)])]]
    assert commit.losses == {"a": 1.0, "b": 2.0} and commit.loss == 1.0
    eng.add([mean("m", 0.0, 0), mean("a", 2.0, 2)], is_last_batch=False)
    assert grads.plans[-1] == [(0, [(1, 0.5)])]


def test_masked_windows_are_counted_as_skipped_with_no_losses():
    eng, _, log = engine(accumulate=1)
    for expected in (1, 2):
        commit = eng.add([mean("loss", 0.0, 0)], is_last_batch=False)
        assert (commit.status, commit.microbatches, commit.losses, commit.loss) == (MASKED, 1, {}, None)
        assert eng.skipped == expected
    assert eng.commits == 0 and "step:default" not in log


def test_a_dropped_nonfinite_window_reports_its_microbatches_and_is_counted():
    eng, grads, log = engine(accumulate=3, nonfinite="skip")
    eng.add([mean("loss", 1.0, 1)], is_last_batch=False)
    eng.add([mean("loss", math.nan, 1)], is_last_batch=False)
    commit = eng.add([mean("loss", 1.0, 1)], is_last_batch=False)
    assert commit.status == NONFINITE and commit.microbatches == 3 and eng.skipped == 1
    assert len(grads.plans) == 1 and grads.factors == [] and "step:default" not in log
    assert "zero_grad:default" in log and grads.discards >= 1  # the first microbatch's gradients are dropped


def test_a_nonfinite_loss_under_fail_discards_the_open_window_and_names_the_terms():
    eng, grads, log = engine(accumulate=2)
    eng.add([mean("a", 1.0, 1), total("b", 1.0)], is_last_batch=False)
    with pytest.raises(NonFiniteLossError) as info:
        eng.add([mean("a", 1.0, 1), total("b", math.inf)], is_last_batch=False)
    assert str(info.value) == (
        "non-finite training loss: loss term(s) ['b'] are not finite; no parameter was updated. Lower the learning "
        "rate, check the inputs for NaN/inf, or use an Objective with nonfinite='skip' to drop such windows"
    )
    assert grads.discards == 1 and log[-1] == "zero_grad:default" and not eng.window_open


def test_nonfinite_gradients_under_skip_drop_the_window_with_its_losses():
    log = []
    opt = FakeOptimizer("default", log, finite=False)
    eng, grads, _ = engine(accumulate=1, log=log, optimizers={"default": opt}, nonfinite="skip")
    for expected in (1, 2):
        commit = eng.add([mean("loss", 2.0, 1)], is_last_batch=False)
        assert (commit.status, commit.microbatches, commit.losses, commit.loss) == (NONFINITE, 1, {"loss": 2.0}, 2.0)
        assert commit.update_idx == {} and eng.skipped == expected
    assert eng.commits == 0 and eng.update_counts == {"default": 0} and "step:default" not in log
    opt.finite = True
    assert eng.add([mean("loss", 2.0, 1)], is_last_batch=False).update_idx == {"default": 1}
    assert grads.discards == 3  # the side buffers go after every closed window


def test_the_loss_scale_is_updated_after_each_window_and_an_overflow_is_skipped():
    log = []
    opt = FakeOptimizer("default", log)
    eng, _, _ = engine(accumulate=2, log=log, optimizers={"default": opt}, loss_scale=FakeLossScale(log))
    eng.add([mean("loss", 1.0, 1)], is_last_batch=False)
    commit = eng.add([mean("loss", 3.0, 1)], is_last_batch=False)
    assert commit.status == COMMITTED and commit.microbatches == 2 and log.count("scale.update") == 1
    assert log.index("step:default") < log.index("scale.update")
    opt.finite = False
    commit = eng.add([mean("loss", 1.0, 1)], is_last_batch=True)
    assert (commit.status, commit.microbatches, commit.losses, commit.loss) == (OVERFLOW, 1, {"loss": 1.0}, 1.0)
    assert log.count("scale.update") == 2 and log.count("step:default") == 1
    assert (eng.commits, eng.skipped, eng.update_counts) == (1, 1, {"default": 1})


def test_engine_component_spec_and_refusal_text():
    eng, _, _ = engine()
    assert eng.component_spec() == ("nnx.update_engine", 1)
    assert eng.check_component_state({"update_counts": {"gen": 1, "disc": 2}}) == [
        "nnx.update_engine: saved optimizers ['disc', 'gen'] != ['default']"
    ]
    assert eng.check_component_state({}) == ["nnx.update_engine: saved optimizers [] != ['default']"]
    assert eng.check_component_state({"update_counts": {"default": 3}}) == []
