"""The shared update engine: window arithmetic with fakes (gradient exactness with torch:
``tests/adapters/test_engine_torch.py``)."""

from __future__ import annotations

import math

import pytest

from nnx_core.engine import TermReading, UpdateEngine
from nnx_core.update import MASKED, NONFINITE, announce
from nnx_core.errors import NonFiniteLossError, TrainingInputError


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
