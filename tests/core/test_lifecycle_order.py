"""The seed's lifecycle order, recorded hook by hook on a fake run (no torch)."""

from __future__ import annotations

import warnings

import pytest

from nnx_core.lifecycle import CleanupWarning, run_lifecycle


class Recorder:
    def __init__(self, name, log, fail_on=None, fail_end=False):
        self.name, self.log, self.fail_on, self.fail_end = name, log, fail_on, fail_end

    def _hit(self, hook, ctx):
        self.log.append(f"{self.name}.{hook}" + (f"@{ctx.epoch}" if hook.startswith("on_epoch") else ""))
        if self.fail_on == (hook, getattr(ctx, "epoch", None)):
            raise RuntimeError(f"{self.name} failed in {hook}")

    def on_train_begin(self, ctx):
        self._hit("on_train_begin", ctx)

    def on_epoch_begin(self, ctx):
        self._hit("on_epoch_begin", ctx)

    def on_epoch_end(self, ctx):
        self._hit("on_epoch_end", ctx)

    def on_train_end(self, ctx):
        self.log.append(f"{self.name}.on_train_end")
        if self.fail_end:
            raise ValueError(f"{self.name} cleanup failed")


class Ctx:
    epoch = -1
    deferred_checkpoint_writes: list = []


class FakeDriver:
    def __init__(self, log, n=2, fail=None, stop_after=None):
        self.log, self.n, self.fail, self.stop_after = log, n, fail, stop_after

    def _step(self, name, epoch):
        self.log.append(f"{name}@{epoch}")
        if self.fail == (name, epoch):
            raise KeyError(f"{name} broke")

    def epochs(self):
        return range(self.n)

    def train_epoch(self, e):
        self._step("batches", e)

    def validate(self, e):
        self._step("validation", e)

    def decide(self, e):
        self._step("decision", e)

    def tick_epoch_clocks(self, e):
        self._step("epoch_clock_tick", e)

    def commit(self, e):
        self._step("commit", e)

    def should_stop(self):
        return self.stop_after is not None and self.log[-1] == f"commit@{self.stop_after}"

    def stopped_at_update(self):
        return False

    def settle(self, error):
        self.log.append("settled" if error is None else f"settled after {type(error).__name__}")

    def finalize(self):
        self.log.append("refresh_last")


EPOCH = ["{a}.on_epoch_begin@{e}", "{b}.on_epoch_begin@{e}", "batches@{e}", "validation@{e}", "decision@{e}",
         "epoch_clock_tick@{e}", "{a}.on_epoch_end@{e}", "{b}.on_epoch_end@{e}", "commit@{e}"]


def expected_epoch(e):
    return [s.format(a="A", b="B", e=e) for s in EPOCH]


def test_full_run_follows_the_seed_order():
    log = []
    cbs = [Recorder("A", log), Recorder("B", log)]
    run_lifecycle(FakeDriver(log, n=2), cbs, Ctx())
    assert log == [
        "A.on_train_begin", "B.on_train_begin",
        *expected_epoch(0), *expected_epoch(1),
        "settled",  # every commit durable (one in the background included) before on_train_end
        "B.on_train_end", "A.on_train_end",  # reverse order
        "refresh_last",  # LAST refreshed after finalization
    ]


def test_stop_after_commit_still_finalizes():
    log = []
    run_lifecycle(FakeDriver(log, n=5, stop_after=0), [Recorder("A", log), Recorder("B", log)], Ctx())
    assert log[-4:] == ["settled", "B.on_train_end", "A.on_train_end", "refresh_last"]
    assert "batches@1" not in log


def test_failure_mid_epoch_finalizes_begun_callbacks_in_reverse_and_reraises():
    log = []
    cbs = [Recorder("A", log), Recorder("B", log, fail_end=True), Recorder("C", log)]
    with pytest.warns(CleanupWarning, match="B cleanup failed"):
        with pytest.raises(KeyError, match="validation broke"):
            run_lifecycle(FakeDriver(log, n=3, fail=("validation", 1)), cbs, Ctx())
    tail = log[log.index("validation@1") + 1 :]
    # the commit in flight ends first; then all attempted, no refresh
    assert tail == ["settled after KeyError", "C.on_train_end", "B.on_train_end", "A.on_train_end"]
    assert "commit@1" not in log


def test_only_callbacks_whose_begin_completed_are_finalized():
    log = []
    cbs = [Recorder("A", log), Recorder("B", log, fail_on=("on_train_begin", -1)), Recorder("C", log)]
    with pytest.raises(RuntimeError, match="B failed"):
        run_lifecycle(FakeDriver(log), cbs, Ctx())
    assert log == ["A.on_train_begin", "B.on_train_begin", "settled after RuntimeError", "A.on_train_end"]


def test_cleanup_error_without_training_error_is_raised_and_others_warned():
    log = []
    cbs = [Recorder("A", log, fail_end=True), Recorder("B", log, fail_end=True)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(ValueError, match="B cleanup failed"):
            run_lifecycle(FakeDriver(log, n=1), cbs, Ctx())
    assert any("A cleanup failed" in str(w.message) for w in caught)
    assert "refresh_last" not in log


class Base:
    """A callback base class whose hooks are no-ops: the lifecycle must not call them."""

    calls: list[str] = []

    def on_train_begin(self, ctx):
        Base.calls.append("base.on_train_begin")

    def on_epoch_begin(self, ctx):
        Base.calls.append("base.on_epoch_begin")

    def on_epoch_end(self, ctx):
        Base.calls.append("base.on_epoch_end")

    def on_train_end(self, ctx):
        Base.calls.append("base.on_train_end")


class EndsOnly(Base):
    def __init__(self, name, log):
        self.name, self.log = name, log

    def on_train_end(self, ctx):
        self.log.append((f"{self.name}.on_train_end", ctx))


class Idle(Base):
    """Overrides nothing."""


class Defers(Base):
    def on_epoch_end(self, ctx):
        ctx.deferred_checkpoint_writes.append(f"write@{ctx.epoch}")  # a list, fresh every epoch
        assert ctx.deferred_checkpoint_writes == [f"write@{ctx.epoch}"]


def test_hooks_inherited_from_the_base_are_not_called_and_every_end_gets_the_context():
    Base.calls = []
    log: list = []
    ctx = Ctx()
    callbacks = [EndsOnly("a", log), Idle(), Defers(), EndsOnly("c", log)]
    run_lifecycle(FakeDriver([], n=2), callbacks, ctx, base=Base)
    assert Base.calls == []  # the base's no-ops were skipped, not dispatched
    assert log == [("c.on_train_end", ctx), ("a.on_train_end", ctx)]  # reverse order, past a callback without one


def test_a_second_failing_cleanup_is_a_cleanup_warning():
    log: list = []
    callbacks = [Recorder("a", log, fail_end=True), Recorder("b", log, fail_end=True)]
    with pytest.warns(CleanupWarning, match="another on_train_end also failed"):
        with pytest.raises(ValueError, match="b cleanup failed"):  # the first one raised (reverse order: b)
            run_lifecycle(FakeDriver(log, n=1), callbacks, Ctx())


class StopsAtUpdate(FakeDriver):
    """``ctx.stop_at_update`` during epoch ``at``'s batches."""

    def __init__(self, log, at, n=3):
        super().__init__(log, n=n)
        self.at = at

    def stopped_at_update(self):
        return f"batches@{self.at}" in self.log


def test_an_update_boundary_stop_finalizes_without_refreshing_last():
    log = []
    run_lifecycle(StopsAtUpdate(log, at=1), [Recorder("A", log), Recorder("B", log)], Ctx())
    assert log == [
        "A.on_train_begin", "B.on_train_begin", *expected_epoch(0),
        "A.on_epoch_begin@1", "B.on_epoch_begin@1", "batches@1",  # epoch 1 is neither validated nor committed
        "settled", "B.on_train_end", "A.on_train_end",  # LAST stays at epoch 0: no refresh_last
    ]


def test_a_cleanup_error_after_an_update_boundary_stop_is_raised():
    log = []
    with pytest.raises(ValueError, match="A cleanup failed"):
        run_lifecycle(StopsAtUpdate(log, at=0), [Recorder("A", log, fail_end=True)], Ctx())
    assert log[-1] == "A.on_train_end" and "refresh_last" not in log


def test_every_group_of_callback_hooks_is_agreed_under_its_name():
    wheres = []

    def agree(where, error):
        wheres.append((where, error))
        if error is not None:
            raise error

    run_lifecycle(FakeDriver([], n=2), [Recorder("A", [])], Ctx(), agree=agree)
    assert wheres == [
        ("on_train_begin callbacks", None),
        ("epoch 0 on_epoch_begin callbacks", None), ("epoch 0 on_epoch_end callbacks", None),
        ("epoch 1 on_epoch_begin callbacks", None), ("epoch 1 on_epoch_end callbacks", None),
        ("on_train_end callbacks", None),
    ]
    wheres.clear()
    with pytest.raises(ValueError, match="A cleanup failed"):
        run_lifecycle(FakeDriver([], n=1), [Recorder("A", [], fail_end=True)], Ctx(), agree=agree)
    assert wheres[-1][0] == "on_train_end callbacks" and isinstance(wheres[-1][1], ValueError)


class Narrow:
    """A base class that declares only some hooks: a callback's own others are still dispatched."""

    def on_epoch_end(self, ctx):
        Base.calls.append("narrow.on_epoch_end")


class BeginsAndEnds(Narrow):
    def __init__(self, log):
        self.log = log

    def on_train_begin(self, ctx):
        self.log.append("on_train_begin")

    def on_train_end(self, ctx):
        self.log.append("on_train_end")


def test_a_hook_the_base_does_not_declare_is_the_callbacks_own():
    Base.calls = []
    log = []
    run_lifecycle(FakeDriver([], n=1), [BeginsAndEnds(log)], Ctx(), base=Narrow)
    assert log == ["on_train_begin", "on_train_end"] and Base.calls == []
