"""The run's committed updates (``nnx_api.training.epoch.Updates``): counted, and each commit
announced in the seed's order — every optimizer's ``on_optimizer_update`` event, then the
update-clock ticks, then the update listeners and the ``stop_at_update`` check. A skipped window
(all targets masked, a non-finite window dropped) announces nothing: it neither ticks an
update-clock schedule nor counts. An epoch whose step reported no update for an optimizer on the
update clock is warned of (``UnreportedUpdateWarning``).

Oracles: a fake clock and callbacks logging the order; hand computation of the learning rates a
halving schedule gives after k ticks; a plain torch loop with one ``StepLR`` per optimizer.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from nnx_core.errors import ScheduleBudgetError
from nnx_core.update import COMMITTED, MASKED, NONFINITE, OVERFLOW
from nnx_adapters.pytorch.optim import TorchClock
import nnx_api as nnx
from nnx_api.callbacks import CallbackContext
from nnx_api.training.epoch import Updates

from tests.api.tiny import UsedLR, batches, tiny_data, two_part_model

BASE_LR = 0.4
IGNORE = -100


def sgd(pattern=None, *, lr=BASE_LR, accumulate=1):
    groups = [nnx.NNParamGroupSpec(name_pattern=pattern)] if pattern else None
    return nnx.NNOptimParams(name=nnx.Optims.SGD, max_lr=lr, momentum=0.0, accumulate_grad_batches=accumulate,
                             param_groups=groups)


def split_optims():
    return {"encoder": sgd("encoder.*"), "head": sgd("head.*")}


def halving(clock="optimizer_update"):
    return nnx.NNSchedulerParams(kind=nnx.Schedulers.STEP, step_size=1, factor=0.5, clock=clock)


def loader(n_batches=4, size=4, seed=0, classes=2):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(size, 4, generator=g), torch.randint(0, classes, (size,), generator=g)) for _ in range(n_batches)]


def linear_model(classes=2, seed=0, **task):
    torch.manual_seed(seed)
    mp = nnx.NNModelParams(task=nnx.TaskSpec.categorical(**task)) if task else nnx.NNModelParams()
    return nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=classes), mp)


def model_for(seed=0):
    torch.manual_seed(seed)
    return nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(8,)), nnx.NNModelParams())


def params(n_epochs, **kw):
    kw.setdefault("train_loader", loader())
    kw.setdefault("val_loader", loader(1))
    kw.setdefault("optim", sgd(lr=0.1))
    return nnx.NNTrainParams(n_epochs=n_epochs, **kw)


class Events(nnx.Callback):
    def __init__(self, log):
        self.log = log

    def on_optimizer_update(self, ctx, event):
        self.log.append(f"event:{event.optimizer}:{event.update_idx}")


# ---------------------------------------------------------------------------- the announcement, alone
class LoggedScheduler:
    """A torch scheduler stand-in inside a real ``TorchClock``: each step is logged."""

    def __init__(self, log, name):
        self.log, self.name = log, name

    def step(self):
        self.log.append(f"tick:{self.name}")


def updates_of(log, *, auto_step=True, clocks=("optimizer_update", "optimizer_update")):
    """``Updates`` over optimizers ``a`` (the primary) and ``b``, two callbacks and one update listener."""
    ctx = CallbackContext(model=None, run=None)
    names = ("a", "b")
    optimizers = {n: SimpleNamespace(optimizer=SimpleNamespace(param_groups=[{"lr": 0.1}])) for n in names}
    schedules = {n: TorchClock(LoggedScheduler(log, n), clock, "step") for n, clock in zip(names, clocks, strict=True)}

    def callback(which):
        return lambda ctx, event: log.append(f"{which}:{event.optimizer}:{event.update_idx}:{ctx.update_count}")

    ctx.update_listeners.append(lambda ctx: log.append(f"listener:{ctx.update_count}"))
    return Updates(ctx=ctx, hooks=[callback("first"), callback("second")], optimizers=optimizers, schedules=schedules,
                   primary="a", auto_step=auto_step)


def test_announce_delivers_every_optimizers_event_before_any_update_clock_tick_then_the_listeners():
    log: list[str] = []
    updates = updates_of(log)
    updates.announce([updates.event("a", 0, 3, 2), updates.event("b", 0, 3, 2)])
    assert log == [
        "first:a:1:2", "second:a:1:2", "first:b:1:2", "second:b:1:2",  # every callback, every optimizer, counted
        "tick:a", "tick:b",  # then the update clocks
        "listener:2",  # then the listeners
    ]
    assert (updates.count, updates.counts, updates.ctx.update_count) == (2, {"a": 1, "b": 1}, 2)
    assert updates.ctx.update_lrs == [(2, 0.1)]  # the primary's trace
    assert not updates.stopped

    log.clear()  # a skipped window, whatever skipped it, announces nothing and counts nothing
    for status in (MASKED, NONFINITE, OVERFLOW):
        updates.after_window(status, [updates.event("a", 0, 5, 2)])
    assert log == [] and updates.count == 2 and updates.ctx.update_count == 2

    updates.ctx.update_listeners.append(lambda ctx: setattr(ctx, "stop_at_update", True))
    updates.after_window(COMMITTED, [updates.event("a", 0, 7, 2)])
    assert log == ["first:a:2:3", "second:a:2:3", "tick:a", "listener:3"] and updates.stopped

    log.clear()  # no auto-step, or a schedule on the epoch clock: events and listeners, no tick
    for quiet in (updates_of(log, auto_step=False), updates_of(log, clocks=("epoch", "epoch"))):
        quiet.announce([quiet.event("a", 0, 0, 1)])
    assert log == ["first:a:1:1", "second:a:1:1", "listener:1"] * 2


# ---------------------------------------------------------------------------- skipped windows, in a run
@pytest.mark.parametrize("owner", ["built-in step", "train_step_fn", "objective"])
def test_a_masked_window_neither_ticks_the_update_clock_nor_counts_an_update(runs, owner):
    parts = loader(10, size=2)
    for i in (3, 4, 5):  # the second window of three: every target ignored
        parts[i] = (parts[i][0], torch.full((2,), IGNORE))
    seen, listened, ended = [], [], []

    class Probe(nnx.Callback):
        def on_train_begin(self, ctx):
            ctx.update_listeners.append(lambda ctx: listened.append(ctx.update_count))

        def on_optimizer_update(self, ctx, event):  # the lr its update used: read before the clock ticks
            seen.append((event.update_idx, event.batch_idx, event.microbatches, ctx.update_count,
                         ctx.optimizer.param_groups[0]["lr"]))

        def on_epoch_end(self, ctx):
            ended.append((ctx.update_count, ctx.optimizer.param_groups[0]["lr"]))

    lrm = nnx.LRMonitor()
    call = {"built-in step": {}, "train_step_fn": {"train_step_fn": nnx.default_train_step},
            "objective": {"objective": nnx.supervised_objective()}}[owner]
    run = linear_model(ignore_index=IGNORE).train(
        params(1, train_loader=parts, optim=sgd(lr=0.1, accumulate=3), scheduler=halving()), callbacks=[Probe(), lrm],
        root=runs, **call,
    )
    # windows 0-2, 3-5 (masked), 6-8 and 9: three committed updates, three ticks
    assert seen == [(1, 2, 3, 1, 0.1), (2, 8, 3, 2, 0.05), (3, 9, 1, 3, 0.025)]
    assert listened == [1, 2, 3]  # the update listeners too: once per committed update
    assert ended == [(3, 0.1 * 0.5**3)] and lrm.history == pytest.approx([0.1 * 0.5**3])
    assert run.checkpoint("last").payload()["update_count"] == 3
    assert [i.lr for i in run.idps] == pytest.approx([0.1] * 3 + [0.05] * 6 + [0.025])  # no tick after batch 5


def test_every_optimizers_event_precedes_every_update_clock_tick_and_masked_windows_tick_nothing(runs, monkeypatch):
    x, y = tiny_data(n=24)
    y[8:16] = -100  # the second window is fully masked
    log = []
    tick = TorchClock.tick
    monkeypatch.setattr(TorchClock, "tick", lambda self, value=None: (log.append("tick"), tick(self, value))[1])
    step = nnx.NNSchedulerParams(kind=nnx.Schedulers.STEP, step_size=1, factor=0.5, clock="optimizer_update")
    model = two_part_model(ignore_index=-100)
    run = nnx.Trainer(model).train(
        nnx.NNTrainerParams(n_epochs=1, optims=split_optims(), schedulers={"encoder": step, "head": step},
                            train_loader=batches(x, y, 8)),
        objective=nnx.supervised_objective(), callbacks=[Events(log)], root=runs,
    )
    assert log == [
        "event:encoder:1", "event:head:1", "tick", "tick",
        "event:encoder:2", "event:head:2", "tick", "tick",
    ]
    assert run.idps[-1].update_count == 4  # two commits × two optimizers
    payload = run.checkpoint("last").payload()
    assert payload["update_counts"] == {"encoder": 2, "head": 2}
    assert payload["components"]["nnx.update_engine"]["update_counts"] == {"encoder": 2, "head": 2}
    assert {"nnx.scheduler_clock.encoder", "nnx.scheduler_clock.head"} <= set(payload["components"])


def test_a_skipped_nonfinite_window_does_not_tick_the_update_clock(runs):
    x, y = tiny_data(n=24)
    loader = batches(x, y, 4)  # 6 windows of one batch
    loader[2] = (loader[2][0] * float("nan"), loader[2][1])
    lrm = nnx.LRMonitor()
    torch.manual_seed(0)
    model = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(8,)))
    params = nnx.NNTrainParams(n_epochs=1, optim=sgd(), scheduler=halving("optimizer_update"), train_loader=loader)
    run = model.train(params, objective=nnx.supervised_objective(nonfinite="skip"), callbacks=[lrm], root=runs)
    assert run.epochs[0].update_count == 5  # the NaN window was dropped
    assert [i for i, _ in lrm.update_history] == [1, 2, 3, 4, 5]
    assert lrm.history == pytest.approx([BASE_LR * 0.5**5])  # five ticks, not six


# ---------------------------------------------------------------------------- once per committed update
def test_update_clock_ticks_once_per_committed_update_not_per_microbatch(tmp_path):
    """accumulate_grad_batches=3 over 10 batches: windows 3+3+3+1 → exactly 4 ticks per epoch."""
    lrm, used = nnx.LRMonitor(), UsedLR()
    p = params(2, train_loader=loader(10, size=2), optim=sgd(lr=0.1, accumulate=3), scheduler=halving())
    run = linear_model().train(p, callbacks=[lrm, used], root=tmp_path)
    assert [i for i, _ in lrm.update_history] == list(range(1, 9))
    assert run.checkpoint("last").payload()["update_count"] == 8
    assert lrm.history == pytest.approx([0.1 * 0.5**4, 0.1 * 0.5**8])
    assert used.used == pytest.approx([0.1 * 0.5**k for k in range(8)])
    assert len(run.idps) == 20  # the default step's records carry no update count (as NNx: objective runs only)
    assert [i.update_count for i in run.idps] == [None] * 20
    assert [i.lr for i in run.idps][:4] == pytest.approx([0.1] * 3 + [0.05])  # the lr each batch's update used
    # the epoch clock, for contrast, ticks once per epoch
    lrm = nnx.LRMonitor()
    linear_model().train(params(2, train_loader=loader(10, size=2), optim=sgd(lr=0.1, accumulate=3),
                                scheduler=halving("epoch")), callbacks=[lrm], root=tmp_path)
    assert lrm.history == pytest.approx([0.05, 0.025])


def test_update_clock_budget_is_enforced_when_the_loader_has_no_length(tmp_path):
    class NoLen:
        def __init__(self, batches):
            self.batches = batches

        def __iter__(self):
            return iter(self.batches)

    sched = nnx.NNSchedulerParams(kind=nnx.Schedulers.ONE_CYCLE, total_steps=5, clock="optimizer_update")
    p = params(2, train_loader=NoLen(loader(4)), scheduler=sched)
    with pytest.raises(ScheduleBudgetError, match="budget of 5 updates"):
        linear_model().train(p, root=tmp_path)
    (run_dir,) = [d for d in tmp_path.iterdir() if not d.name.startswith(".")]
    run = nnx.NNRun.load(run_dir.name, tmp_path)
    assert run.checkpoint("last").epoch == 0  # the past-budget update is not scheduled nor committed


# ---------------------------------------------------------------------------- reported updates
def test_report_update_from_an_nnmodel_step_counts_on_the_update_clock(runs):
    """A train_step_fn that steps its optimizer itself and calls ctx.report_update() once."""
    x, y = tiny_data(n=24)
    lrm = nnx.LRMonitor()

    def step(ctx):
        bx, by = ctx.batch
        loss = F.cross_entropy(ctx.model.net(bx), by)
        ctx.optimizer.zero_grad()
        loss.backward()
        ctx.optimizer.step()
        ctx.report_update()
        return nnx.EvaluationDataPoint(loss=loss.item())

    torch.manual_seed(0)
    model = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(8,)))
    params = nnx.NNTrainParams(n_epochs=2, optim=sgd(), scheduler=halving("optimizer_update"), train_loader=batches(x, y, 8))
    run = model.train(params, train_step_fn=step, callbacks=[lrm], root=runs)
    assert run.checkpoint("last").payload()["update_count"] == 6  # 3 reported updates per epoch
    assert all(i.update_count is None for i in run.idps)  # a step function's run: records carry no count (as NNx)
    assert [i for i, _ in lrm.update_history] == list(range(1, 7))
    assert lrm.history == pytest.approx([BASE_LR * 0.5**3, BASE_LR * 0.5**6])


def test_a_non_primary_optimizer_on_its_own_cadence_ticks_its_update_clock_once_per_own_commit(runs):
    """Each optimizer's update-clock schedule ticks exactly once per committed update of its own
    optimizer, whatever the others do. Oracle: a plain torch loop with one StepLR per optimizer,
    each stepped right after its own optimizer.step(); the learning rates every batch sees agree."""
    x, y = tiny_data(n=48)
    loader = batches(x, y, 8)  # 6 batches: the head commits on every one, the encoder (the primary) on every other
    seen: list[tuple[float, float]] = []

    def step(ctx):
        seen.append((ctx.optimizers["encoder"].param_groups[0]["lr"], ctx.optimizers["head"].param_groups[0]["lr"]))
        names = ["encoder", "head"] if ctx.batch_idx % 2 else ["head"]
        for name in names:
            opt = ctx.optimizers[name]
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(ctx.model.net(ctx.batch[0]), ctx.batch[1])
            loss.backward()
            opt.step()
            ctx.report_update(name)
        return nnx.EvaluationDataPoint(loss=float(loss))

    halve = nnx.NNSchedulerParams(kind=nnx.Schedulers.STEP, step_size=1, factor=0.5, clock="optimizer_update")
    params = nnx.NNTrainerParams(n_epochs=2, optims=split_optims(), schedulers={"encoder": halve, "head": halve},
                                 train_loader=loader)
    run = nnx.Trainer(two_part_model()).train(params, trainer_step_fn=step, root=runs)

    net = two_part_model().net  # the plain loop
    opts = {n: torch.optim.SGD([p for k, p in net.named_parameters() if k.startswith(n)], lr=0.4) for n in ("encoder", "head")}
    scheds = {n: torch.optim.lr_scheduler.StepLR(o, step_size=1, gamma=0.5) for n, o in opts.items()}
    expected = []
    for _epoch in range(2):
        for batch_idx in range(6):
            expected.append((opts["encoder"].param_groups[0]["lr"], opts["head"].param_groups[0]["lr"]))
            for name in (["encoder", "head"] if batch_idx % 2 else ["head"]):
                opts[name].step()
                scheds[name].step()
    assert seen == expected
    payload = run.checkpoint("last").payload()
    assert payload["update_counts"] == {"encoder": 6, "head": 12}
    assert payload["schedules"]["encoder"]["ticks"] == 6 and payload["schedules"]["head"]["ticks"] == 12


def test_per_optimizer_counts_unknown_names_and_a_silent_optimizer_on_the_update_clock(runs):
    x, y = tiny_data()
    loader = batches(x, y, 16)

    def encoder_only(ctx):
        opt = ctx.optimizers["encoder"]
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(ctx.model.net(ctx.batch[0]), ctx.batch[1])
        return nnx.EvaluationDataPoint(loss=nnx.finalize_step(loss, ctx, paradigm="probe", optimizer="encoder"))

    cosine = nnx.NNSchedulerParams(kind=nnx.Schedulers.COSINE_ANNEALING, clock="optimizer_update")
    params = nnx.NNTrainerParams(n_epochs=1, optims=split_optims(), schedulers={"encoder": cosine, "head": cosine},
                                 train_loader=loader)
    with pytest.warns(RuntimeWarning, match=r"optimizer 'head'.*report_update\('head'\)"):
        run = nnx.Trainer(two_part_model()).train(params, trainer_step_fn=encoder_only, root=runs)
    payload = run.checkpoint("last").payload()
    assert payload["update_counts"] == {"encoder": 3, "head": 0} and payload["update_count"] == 3
    assert run.idps[-1].update_count is None  # a step function's run: records carry no count (as NNx)
    assert payload["schedules"]["encoder"]["ticks"] == 3 and payload["schedules"]["head"]["ticks"] == 0

    def typo(ctx):
        ctx.report_update("decoder")
        return nnx.EvaluationDataPoint(loss=0.0)

    with pytest.raises(nnx.ParamsError, match=r"report_update\('decoder'\): no optimizer of that name"):
        nnx.Trainer(two_part_model()).train(params, trainer_step_fn=typo, salt="typo", root=runs)


def test_a_step_that_never_reports_on_the_update_clock_is_warned(runs):
    x, y = tiny_data()

    def silent(ctx):
        ctx.optimizer.zero_grad()
        loss = F.cross_entropy(ctx.model.net(ctx.batch[0]), ctx.batch[1])
        loss.backward()
        ctx.optimizer.step()  # but no ctx.report_update()
        return nnx.EvaluationDataPoint(loss=float(loss.detach()))

    sched = nnx.NNSchedulerParams(kind=nnx.Schedulers.COSINE_ANNEALING, T_max=10, clock="optimizer_update")
    with pytest.warns(RuntimeWarning, match="report_update"):
        run = model_for().train(
            nnx.NNTrainParams(n_epochs=1, scheduler=sched, train_loader=batches(x, y, 16)), train_step_fn=silent, root=runs
        )
    assert run.checkpoint("last").payload()["update_count"] == 0


# -- NNx owns the schedules it steps --------------------------------------------------------------


def _stepping(root, clock: str):
    """A step function that also steps ``ctx.scheduler`` (a plain-loop habit)."""
    x, y = tiny_data()

    def step(ctx):
        xb, yb = ctx.batch
        ctx.optimizer.zero_grad()
        loss = F.cross_entropy(ctx.model.net(xb), yb)
        loss.backward()
        ctx.optimizer.step()
        ctx.report_update()
        ctx.scheduler.step()
        return nnx.EvaluationDataPoint(loss=loss.item())

    model = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3))
    params = nnx.NNTrainParams(n_epochs=2, train_loader=batches(x, y, 16), progress=False,
                               scheduler=nnx.NNSchedulerParams(kind="cosine_annealing", clock=clock))
    return model.train(params, train_step_fn=step, root=root)


@pytest.mark.parametrize(("clock", "where"), [("optimizer_update", "after each committed update"),
                                              ("epoch", "once at each epoch's end")])
def test_a_step_that_also_steps_a_schedule_nnx_steps_is_refused(tmp_path, clock, where):
    with pytest.raises(nnx.UpdateOwnerError, match=rf"stepped \d+ time\(s\) outside NNx .* {where}, so remove scheduler.step"):
        _stepping(tmp_path, clock)


def test_a_clock_restored_from_a_checkpoint_counts_from_its_restored_state():
    """load_state puts the scheduler's own count back: the next tick is NNx's, not a stranger's."""
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
    clock = TorchClock(torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5), "optimizer_update", "step")
    for _ in range(3):
        clock.tick()
    saved = clock.state()
    fresh_opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
    restored = TorchClock(torch.optim.lr_scheduler.StepLR(fresh_opt, step_size=1, gamma=0.5), "optimizer_update", "step")
    restored.load_state(saved)
    restored.tick()  # not refused
    restored.scheduler.step()  # someone else's step
    with pytest.raises(nnx.UpdateOwnerError, match="stepped 1 time"):
        restored.tick()
