"""The one update tail (``nnx_core.update``) over scripted optimizers: its order is the contract.

Oracle (seed §2/§3): W == 0 skips; otherwise unscale → normalise by 1/W → finite check → clip →
step, every optimizer once; a non-finite window raises before any step ("fail"), is dropped
("skip"), or shrinks a loss scale (an overflow skip); a skipped window is no committed update.
"""

from __future__ import annotations

import pytest

from nnx_core.errors import NonFiniteLossError
from nnx_core.ports import Clock, Optimizer
from nnx_core.update import COMMITTED, MASKED, NONFINITE, OVERFLOW, UpdateWindow, announce, commit_window
from nnx_adapters.scripted import ScriptedClock, ScriptedOptimizer


class Scale:
    def __init__(self, log):
        self.log = log

    def update(self):
        self.log.append("scale.update")


def opts(log, **kw):
    return {"a": ScriptedOptimizer("a", log, **kw), "b": ScriptedOptimizer("b", log, **kw)}


def test_the_fakes_are_ports():
    assert isinstance(ScriptedOptimizer(), Optimizer) and isinstance(ScriptedClock(), Clock)


def test_the_order_is_unscale_normalise_finite_clip_step_then_clear():
    log: list[str] = []
    status = commit_window(opts(log), 4.0, max_norms={"a": 1.0, "b": None})
    assert status == COMMITTED
    assert log == [
        "unscale:a", "unscale:b", "scale(0.25):a", "scale(0.25):b", "finite?:a", "finite?:b",
        "clip(1):a", "step:a", "step:b", "zero_grad:a", "zero_grad:b",
    ]


def test_a_masked_window_commits_nothing_and_clears():
    log: list[str] = []
    assert commit_window(opts(log), 0.0) == MASKED
    assert log == ["zero_grad:a", "zero_grad:b"]


def test_additive_and_unit_windows_are_not_rescaled():
    for weight in (None, 1.0):
        log: list[str] = []
        commit_window(opts(log), weight)
        assert not any(entry.startswith("scale") for entry in log)


def test_a_non_finite_window_fails_before_any_step_or_is_dropped():
    log: list[str] = []
    with pytest.raises(NonFiniteLossError):
        commit_window(opts(log, finite=False), 2.0)
    assert "step:a" not in log and "step:b" not in log and log[-2:] == ["zero_grad:a", "zero_grad:b"]
    log.clear()
    assert commit_window(opts(log, finite=False), 2.0, nonfinite="skip") == NONFINITE
    assert not any(entry.startswith("step") for entry in log)


def test_with_a_loss_scale_an_overflow_shrinks_it_and_skips():
    log: list[str] = []
    assert commit_window(opts(log, finite=False), 2.0, loss_scale=Scale(log)) == OVERFLOW
    assert log[-1] == "scale.update" and not any(entry.startswith("step") for entry in log)
    log.clear()
    assert commit_window(opts(log), 2.0, loss_scale=Scale(log)) == COMMITTED
    assert log.index("step:b") < log.index("scale.update")  # the scale adapts after every optimizer stepped


def test_a_step_the_scaler_skips_is_no_committed_update():
    assert commit_window({"a": ScriptedOptimizer("a", steps=False)}, 1.0) == OVERFLOW


def test_the_caller_supplied_finite_check_replaces_the_gradient_check():
    log: list[str] = []
    assert commit_window(opts(log), 1.0, finite=lambda: False, nonfinite="skip") == NONFINITE
    assert "finite?:a" not in log


def test_every_event_of_a_commit_before_any_tick_then_the_listeners():
    log: list[str] = []
    clocks = {"gen": ScriptedClock("optimizer_update"), "disc": ScriptedClock("optimizer_update")}

    def tick(event):
        clocks[event].tick()
        log.append(f"tick:{event}")

    announce(["gen", "disc"], deliver=lambda e: log.append(f"event:{e}"), tick=tick, after=lambda: log.append("after"))
    assert log == ["event:gen", "event:disc", "tick:gen", "tick:disc", "after"]
    assert clocks["gen"].ticks == clocks["disc"].ticks == 1


def test_a_window_closes_after_accumulate_microbatches_or_the_last_batch():
    window = UpdateWindow(accumulate=3)
    window.add(4)
    assert not window.ends(is_last_batch=False) and window.closes(is_last_batch=True)
    window.add(0)
    window.add(2)
    assert window.ends(is_last_batch=False)
    assert window.close() == (6.0, 3)
    window.add(None)  # a sum-reduced loss: additive, no normalisation
    assert window.close() == (None, 1)


def test_a_window_closes_with_its_accumulate_th_microbatch_not_before():
    window = UpdateWindow(accumulate=3)
    closes = []
    for denominator in (1, 1, 1):
        closes.append(window.closes(is_last_batch=False))
        window.add(denominator)
    assert closes == [False, False, True]


def test_a_closed_window_starts_the_next_from_nothing():
    window = UpdateWindow(accumulate=1)
    window.add(None)  # additive
    window.close()
    window.add(2)
    assert window.close() == (2.0, 1)  # neither additive nor carrying weight from before


def test_a_non_finite_window_says_what_to_do():
    with pytest.raises(NonFiniteLossError, match="no parameter was updated. Lower the learning rate"):
        commit_window(opts([], finite=False), 2.0)
