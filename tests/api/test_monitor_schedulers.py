"""One monitor decision per epoch, schedulers on two clocks, built-in callbacks, and resume.

Worked examples follow REFERENCE §6–§9; values are scripted through ``eval_step_fn`` so every
decision is known in advance, and training itself runs for real (tiny model, few batches).
"""

from __future__ import annotations

import math

import pytest
import torch

from nnx_core.commit import phase_tags
from nnx_core.errors import ComponentRestoreError, ParamsError, ResumeMismatchError, ScheduleBudgetError
from nnx_core.monitor import Monitor
from nnx_core.monitor_spec import improves
from nnx_core.records import EvaluationDataPoint, IterationDataPoint
from nnx_core.schedules import PlateauRule
import nnx_api as nnx

from tests.api.tiny import UsedLR


@pytest.fixture(autouse=True)
def _quiet(monkeypatch):
    monkeypatch.setenv("NNX_PROGRESS", "0")


def loader(n_batches: int = 4, size: int = 4, seed: int = 0, classes: int = 2):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(size, 4, generator=g), torch.randint(0, classes, (size,), generator=g)) for _ in range(n_batches)]


def model(classes: int = 2, seed: int = 0, **task):
    torch.manual_seed(seed)
    mp = nnx.NNModelParams(task=nnx.TaskSpec.categorical(**task)) if task else nnx.NNModelParams()
    return nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=classes), mp)


def sgd(lr: float = 0.1, accumulate: int = 1) -> nnx.NNOptimParams:
    return nnx.NNOptimParams(name=nnx.Optims.SGD, max_lr=lr, momentum=0.0, accumulate_grad_batches=accumulate)


def scripted(values, metric: str | None = None):
    """An eval_step_fn returning ``values[epoch]`` as val loss (or as declared ``metric``);
    None leaves the value missing."""

    def eval_step(ctx):
        v = values[ctx.epoch_idx]
        if metric is None:
            return EvaluationDataPoint(loss=v)
        return EvaluationDataPoint(loss=1.0, metrics={} if v is None else {metric: v})

    return eval_step


def params(n_epochs, **kw) -> nnx.NNTrainParams:
    kw.setdefault("train_loader", loader())
    kw.setdefault("val_loader", loader(1))
    kw.setdefault("optim", sgd())
    return nnx.NNTrainParams(n_epochs=n_epochs, **kw)


def decisions(run):
    return [(e, idp.selection.status, idp.selection.improved) for e, idp in run.epochs.items()]


def improved_epochs(run):
    return [e for e, idp in run.epochs.items() if idp.selection.improved]


def epoch_lrs(run):
    """The LR each epoch's batches trained with (the first record of each epoch)."""
    first: dict[int, float] = {}
    for idp in run.idps:
        first.setdefault(idp.epoch_idx, idp.lr)
    return [first[e] for e in sorted(first)]


def no_runs(root) -> bool:
    return not root.exists() or not any(p.name for p in root.iterdir() if not p.name.startswith("."))


# =========================================================================== worked examples
def test_worked_example_nll_monitor_improves_at_epochs_0_and_1_only(tmp_path):
    values = [0.8, 0.7, 0.695, 0.71]
    spec = nnx.MonitorSpec(metric="nll", min_delta=0.01)
    monitor = Monitor(spec, "min")
    got = []
    for epoch, v in enumerate(values):
        idp = IterationDataPoint(
            iter_idx=epoch, epoch_idx=epoch, batch_idx=0, lr=0.1,
            train_edp=EvaluationDataPoint(loss=1.0), val_edp=EvaluationDataPoint(metrics={"nll": v}),
        )
        got.append(monitor.decide(epoch, idp).improved)
    assert got == [True, True, False, False] and monitor.best == 0.7 and monitor.best_epoch == 1

    # the same through a real run: decisions stored per epoch, BEST on disk at epoch 1
    p = params(4, metrics=(nnx.MetricSpec(id="nll"),), monitor=spec)
    run = model().train(p, eval_step_fn=scripted(values, "nll"), root=tmp_path)
    assert improved_epochs(run) == [0, 1]
    assert [idp.selection.best for idp in run.epochs.values()] == [0.8, 0.7, 0.7, 0.7]
    assert run.checkpoint("best").epoch == 1 and run.best().selection.value == 0.7
    assert run.checkpoint("best").payload()["components"]["nnx.monitor"]["best"] == 0.7
    reloaded = nnx.NNRun.load(run.id, tmp_path)
    assert [idp.selection for idp in reloaded.epochs.values()] == [idp.selection for idp in run.epochs.values()]


def test_improvement_rule_edges():
    assert improves(1.0, None, "min", 0.5)  # the first finite value improves
    assert not improves(float("nan"), None, "min", 0.0) and not improves(float("inf"), 1.0, "min", 0.0)
    assert not improves(1.0, 1.0, "min", 0.0) and not improves(1.0, 1.0, "max", 0.0)  # ties never improve
    assert improves(0.89, 1.0, "min", 0.1) and not improves(0.9, 1.0, "min", 0.1)  # by more than min_delta
    assert improves(1.11, 1.0, "max", 0.1) and not improves(1.1, 1.0, "max", 0.1)


def test_missing_and_nonfinite_statuses_and_error_policies():
    def idp(v):
        return IterationDataPoint(
            iter_idx=0, epoch_idx=0, batch_idx=0, lr=0.1, train_edp=EvaluationDataPoint(loss=1.0),
            val_edp=EvaluationDataPoint(metrics={} if v is None else {"nll": v}),
        )

    m = Monitor(nnx.MonitorSpec(metric="nll"), "min")
    assert [m.decide(e, idp(v)).status for e, v in enumerate([None, float("nan"), 0.5])] == ["missing", "nonfinite", "ok"]
    with pytest.raises(nnx.MonitorUnavailableError):
        Monitor(nnx.MonitorSpec(metric="nll", on_missing="error"), "min").decide(0, idp(None))
    with pytest.raises(nnx.MonitorUnavailableError):
        Monitor(nnx.MonitorSpec(metric="nll", on_nonfinite="error"), "min").decide(0, idp(float("inf")))


def test_fallback_signal_without_a_monitor_is_val_error_then_val_loss_then_training(tmp_path):
    run = model().train(params(2), root=tmp_path)  # built-in validation: error is finite → it is the signal
    last = run.epochs[1]
    assert last.selection.metric == "fallback" and last.selection.value == last.val_edp.error
    run = model().train(params(2), eval_step_fn=scripted([0.5, 0.4]), salt="loss", root=tmp_path)
    assert [i.selection.value for i in run.epochs.values()] == [0.5, 0.4]
    run = model().train(params(2, val_loader=None), salt="train", root=tmp_path)  # no validation: training signal
    assert run.epochs[1].selection.value == run.epochs[1].train_edp.error


def test_worked_example_warmup_decay_on_the_update_clock(tmp_path):
    """Base LR 0.12, warmup 3, total 8: the first four updates use 0.04, 0.08, 0.12, 0.12."""
    lrm, used = nnx.LRMonitor(), UsedLR()
    sched = nnx.NNSchedulerParams(
        kind=nnx.Schedulers.LINEAR_WARMUP_DECAY, warmup_steps=3, total_steps=8, clock="optimizer_update"
    )
    p = params(2, optim=sgd(0.12), scheduler=sched)
    run = model().train(p, callbacks=[used, lrm], root=tmp_path)
    expected = [0.04, 0.08, 0.12, 0.12, 0.096, 0.072, 0.048, 0.024]
    assert used.used[:4] == pytest.approx([0.04, 0.08, 0.12, 0.12])
    assert used.used == pytest.approx(expected)
    assert [i.lr for i in run.idps] == pytest.approx(expected)  # a record's lr is the one its update used (NNx)
    assert run.checkpoint("last").payload()["update_count"] == 8
    # update_history: the LR after each update's scheduler step; history: per epoch end
    assert [i for i, _ in lrm.update_history] == list(range(1, 9))
    assert [lr for _, lr in lrm.update_history] == pytest.approx(expected[1:] + [0.0])
    assert lrm.history == pytest.approx([0.096, 0.0])


def test_worked_example_phase_tags_for_eight_epochs(tmp_path):
    assert [phase_tags(e, 8) for e in range(8)] == [("first",), ("q1",), (), ("q2",), (), ("q3",), (), ()]
    assert [phase_tags(e, 4) for e in range(4)] == [("first",), ("q2",), ("q3",), ()]  # Q1 collides with FIRST
    run = model().train(params(8, train_loader=loader(1)), root=tmp_path)
    assert {t: run.checkpoint(t).epoch for t in ("first", "q1", "q2", "q3", "last")} == {
        "first": 0, "q1": 1, "q2": 3, "q3": 5, "last": 7}


@pytest.mark.parametrize(
    "values, patience, stop",
    [
        ([1.0, 0.9, 0.95, 0.96, 0.8, 0.85, 0.86, 0.87, 0.5, 0.4], 3, 7),
        ([1.0, 0.9, 0.95, 0.96, 0.8, 0.85, 0.86, 0.87, 0.5, 0.4], 0, 2),  # patience 0: first non-improvement
        ([1.0, None, None, 1.1, 1.2, 0.1], 1, 3),  # missing epochs are not counted
        ([1.0, float("nan"), 0.9, 0.95], 1, 1),  # a non-finite value counts as no improvement
        ([1.0, 0.9, 0.8, 0.7], 1, None),  # always improving: runs to the end
    ],
)
def test_worked_example_early_stopping_patience(tmp_path, values, patience, stop):
    es = nnx.EarlyStopping(patience=patience)
    p = params(len(values), monitor=nnx.MonitorSpec(), train_loader=loader(1))
    run = model().train(p, callbacks=[es], eval_step_fn=scripted(values), root=tmp_path)
    last = len(values) - 1 if stop is None else stop
    assert max(run.epochs) == last and run.checkpoint("last").epoch == last
    assert es.stopped_epoch == stop


def test_worked_example_plateau_reductions_follow_the_decision(tmp_path):
    """patience 1, cooldown 1, factor 0.5 over scripted val losses: reductions at epochs 3 and 8."""
    values = [1.0, 0.9, 0.95, 0.97, 0.99, 0.98, 0.5, 0.6, 0.7, 0.8]
    sched = nnx.NNSchedulerParams(patience=1, cooldown=1, factor=0.5, min_lr=0.0, threshold=0.5)  # threshold unused
    lrm = nnx.LRMonitor()
    run = model().train(
        params(10, scheduler=sched, train_loader=loader(1)), callbacks=[lrm], eval_step_fn=scripted(values), root=tmp_path
    )
    assert lrm.history == pytest.approx([0.1] * 3 + [0.05] * 5 + [0.025] * 2)
    assert epoch_lrs(run) == pytest.approx([0.1] * 4 + [0.05] * 5 + [0.025])  # the next epoch trains with it
    # torch's ReduceLROnPlateau, with the monitor's comparator (absolute min_delta 0), agrees
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
    oracle = torch.optim.lr_scheduler.ReduceLROnPlateau(
        opt, mode="min", factor=0.5, patience=1, cooldown=1, threshold=0.0, threshold_mode="abs"
    )
    expected = []
    for v in values:
        oracle.step(v)
        expected.append(opt.param_groups[0]["lr"])
    assert lrm.history == pytest.approx(expected)


def test_plateau_follows_a_max_monitor_with_absolute_min_delta(tmp_path):
    """accuracy (max) with min_delta 0.01: 0.605 and a tie at 0.61 are both bad epochs."""
    values = [0.5, 0.6, 0.605, 0.61, 0.7]
    spec = nnx.MonitorSpec(metric="accuracy", min_delta=0.01)
    sched = nnx.NNSchedulerParams(patience=1, cooldown=0, factor=0.5, threshold=1e-3)
    lrm = nnx.LRMonitor()
    p = params(5, metrics=(nnx.MetricSpec(id="accuracy"),), monitor=spec, scheduler=sched, train_loader=loader(1))
    run = model().train(p, callbacks=[lrm], eval_step_fn=scripted(values, "accuracy"), root=tmp_path)
    assert improved_epochs(run) == [0, 1, 4] and run.epochs[0].selection.mode == "max"
    assert lrm.history == pytest.approx([0.1, 0.1, 0.1, 0.05, 0.05])
    assert run.checkpoint("best").epoch == 4


def test_plateau_rule_skips_missing_and_counts_nonfinite():
    rule = PlateauRule(factor=0.5, patience=0, cooldown=0, min_lr=0.0)
    lrs = [1.0]

    def step(epoch, improved, status):
        return rule.step(epoch, improved, status, list(lrs), lambda i, lr: lrs.__setitem__(i, lr))

    assert not step(0, True, "ok") and not step(1, False, "missing") and step(2, False, "nonfinite")
    assert lrs == [0.5] and rule.reductions == [2]
    assert PlateauRule(factor=0.5, patience=0, cooldown=0, min_lr=0.0).state() != rule.state()


# =========================================================================== update clock
def step_schedule(clock="optimizer_update"):
    return nnx.NNSchedulerParams(kind=nnx.Schedulers.STEP, step_size=1, factor=0.5, clock=clock)


# =========================================================================== refusals
def _regression_model():
    torch.manual_seed(0)
    return nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=1), nnx.NNModelParams(loss=nnx.Losses.MEAN_SQUARED_ERROR))


BAD = {
    "unknown metric id": (lambda: params(2, metrics=(nnx.MetricSpec(id="auroc"),)), model, ParamsError, "not registered"),
    "monitor of an undeclared metric": (lambda: params(2, monitor=nnx.MonitorSpec(metric="nll")), model, ParamsError,
                                        "does not compute"),
    "f1 is not in the training summary": (lambda: params(2, monitor=nnx.MonitorSpec(metric="f1", split="train")), model,
                                          ParamsError, "does not compute"),
    "regression has no error": (
        lambda: params(2, train_loader=[(torch.randn(4, 4), torch.randn(4, 1))], val_loader=None,
                       monitor=nnx.MonitorSpec(metric="error", split="train")),
        _regression_model, ParamsError, "does not compute"),
    "val monitor without a val loader": (lambda: params(2, val_loader=None, monitor=nnx.MonitorSpec()), model,
                                         ParamsError, "val_loader"),
    "early stopping on another monitor": (lambda: params(2, monitor=nnx.MonitorSpec()), model, ParamsError, "differs"),
    "one-cycle budget on the update clock": (
        lambda: params(2, scheduler=nnx.NNSchedulerParams(kind=nnx.Schedulers.ONE_CYCLE, total_steps=5,
                                                          clock="optimizer_update")),
        model, ScheduleBudgetError, "at least 8"),
    "warmup-decay budget on the epoch clock": (
        lambda: params(3, scheduler=nnx.NNSchedulerParams(kind=nnx.Schedulers.LINEAR_WARMUP_DECAY, total_steps=2)),
        model, ScheduleBudgetError, "at least 3"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_is_refused_before_any_run_folder_exists(tmp_path, case):
    make_params, make_model, error, match = BAD[case]
    callbacks = [nnx.EarlyStopping(monitor=nnx.MonitorSpec(metric="error"))] if "early" in case else []
    with pytest.raises(error, match=match):
        make_model().train(make_params(), callbacks=callbacks, root=tmp_path)
    assert no_runs(tmp_path)


def test_plateau_on_the_update_clock_is_refused_by_the_params():
    for kind in (None, nnx.Schedulers.REDUCE_LR_ON_PLATEAU):
        with pytest.raises(ParamsError, match="optimizer_update"):
            nnx.NNSchedulerParams(kind=kind, clock="optimizer_update")


def test_early_stopping_with_a_monitor_spec_takes_mode_and_min_delta_from_it():
    with pytest.raises(ParamsError, match="MonitorSpec"):
        nnx.EarlyStopping(monitor=nnx.MonitorSpec(), min_delta=0.1)
    with pytest.raises(ParamsError, match="MonitorSpec"):
        nnx.EarlyStopping(monitor=nnx.MonitorSpec(), mode="max")
    with pytest.raises(ParamsError, match="explicit monitor"):
        nnx.EarlyStopping(mode="max")  # the automatic choice (error, then loss) improves by decreasing
    with pytest.raises(ParamsError):
        nnx.EarlyStopping(patience=-1)


def test_a_resume_whose_budget_would_run_out_is_refused_before_its_folder(tmp_path):
    sched = nnx.NNSchedulerParams(kind=nnx.Schedulers.LINEAR_WARMUP_DECAY, total_steps=8, clock="optimizer_update")
    source = model().train(params(2, scheduler=sched), root=tmp_path)  # 8 of 8 updates used
    with pytest.raises(ScheduleBudgetError, match="8 already made"):
        model().train(params(1, scheduler=sched, resume_from_run_id=source.id), root=tmp_path)
    assert [d.name for d in tmp_path.iterdir() if not d.name.startswith(".")] == [source.id]
    # without an explicit budget a resume cannot be covered either (the default horizon is this call's)
    default = nnx.NNSchedulerParams(kind=nnx.Schedulers.ONE_CYCLE)
    source = model().train(params(2, scheduler=default), root=tmp_path)
    with pytest.raises(ScheduleBudgetError, match="total_steps"):
        model().train(params(2, scheduler=default, resume_from_run_id=source.id), root=tmp_path)


def test_a_resume_with_another_monitor_is_refused_before_anything_is_restored(tmp_path):
    source = model().train(params(2, monitor=nnx.MonitorSpec(min_delta=0.1)), root=tmp_path)
    with pytest.raises(ComponentRestoreError, match="nnx.monitor"):
        model().train(params(2, monitor=nnx.MonitorSpec(), resume_from_run_id=source.id), root=tmp_path)


# =========================================================================== callbacks
def test_callback_context_fields_and_hook_order(tmp_path):
    log: list = []

    class Probe(nnx.Callback):
        def on_train_begin(self, ctx):
            log.append(("begin", ctx.epoch))

        def on_epoch_begin(self, ctx):
            log.append(("epoch_begin", ctx.epoch))

        def on_optimizer_update(self, ctx, event):
            assert isinstance(event, nnx.UpdateEvent) and event.update_idx == ctx.update_count
            log.append(("update", ctx.update_count))

        def on_epoch_end(self, ctx):
            assert isinstance(ctx.idp, nnx.IterationDataPoint) and ctx.idp is ctx.idps[-1]
            assert ctx.idp.epoch_idx == ctx.epoch and ctx.idp.val_edp is not None
            assert isinstance(ctx.decision, nnx.MonitorDecision) and ctx.decision.epoch == ctx.epoch
            assert ctx.idp.selection.improved == ctx.decision.improved and ctx.idp.selection.value == ctx.decision.value
            assert ctx.should_stop is False and ctx.deferred_checkpoint_writes == []
            assert ctx.update_count == 2 * (ctx.epoch + 1) and ctx.idp.update_count is None  # default step (NNx)
            assert len(ctx.idps) == 2 * (ctx.epoch + 1) and ctx.model is not None and ctx.run is not None
            log.append(("epoch_end", ctx.epoch))

        def on_train_end(self, ctx):
            log.append(("end", ctx.epoch))

    model().train(params(2, train_loader=loader(2)), callbacks=[Probe()], root=tmp_path)
    assert log == [
        ("begin", 0),  # the first epoch this call trains, as NNx has it
        ("epoch_begin", 0), ("update", 1), ("update", 2), ("epoch_end", 0),
        ("epoch_begin", 1), ("update", 3), ("update", 4), ("epoch_end", 1),
        ("end", 1),
    ]


def test_legacy_function_callbacks_get_the_growing_history(tmp_path):
    lengths: list[int] = []
    model().train(params(3, train_loader=loader(2)), callbacks=[lambda idps: lengths.append(len(idps))], root=tmp_path)
    assert lengths == [2, 4, 6]


@pytest.mark.parametrize("async_commits", [False, True])
def test_model_checkpoint_writes_weights_only_tags_after_the_epoch_commits(tmp_path, async_commits):
    on_disk: dict = {}

    class Observe(nnx.Callback):
        def on_epoch_begin(self, ctx):
            on_disk[("begin", ctx.epoch)] = "snap_e1" in ctx.run.tags()

        def on_epoch_end(self, ctx):
            on_disk[("end", ctx.epoch)] = "snap_e1" in ctx.run.tags()

    saver = nnx.ModelCheckpoint(epochs=[1, 4], tag="snap")
    run = model().train(params(8, train_loader=loader(1), async_commits=async_commits), callbacks=[saver, Observe()],
                        root=tmp_path)
    assert saver.written == ["snap_e1", "snap_e4"] and {"snap_e1", "snap_e4"} <= set(run.tags())
    assert on_disk[("end", 1)] is False  # deferred until epoch 1 committed
    assert on_disk[("begin", 2)] is True or async_commits  # written in the background: maybe not yet
    snap = run.checkpoint("snap_e1")
    assert snap.epoch == 1 and "optimizer" not in snap.payload()
    loaded = nnx.NNModel.from_checkpoint(run.id, "snap_e1", root=tmp_path)
    q1 = run.checkpoint("q1").weights()  # epoch 1 is also Q1 of 8: the same weights
    assert all(torch.equal(v, q1[k]) for k, v in loaded.net.state_dict().items())
    with pytest.raises(ValueError, match="tag"):
        nnx.ModelCheckpoint(epochs=[1], tag="bad tag!")
    # the stem is a weights-only resume point; a stateful resume from it is refused
    with pytest.raises(ResumeMismatchError):
        model().train(params(1, resume_from_run_id=run.id, resume_from_checkpoint="snap_e1",
                             resume_mode="stateful"), root=tmp_path)
    warm = model().train(params(1, resume_from_run_id=run.id, resume_from_checkpoint="snap_e1"), root=tmp_path)
    assert list(warm.epochs) == [2] and warm.resume_status["mode"] == "weights_only"


def test_several_early_stoppings_get_numbered_component_names(tmp_path):
    a, b, c = nnx.EarlyStopping(patience=1), nnx.EarlyStopping(patience=5), nnx.EarlyStopping(patience=9, name="slow")
    run = model().train(params(3, train_loader=loader(1)), callbacks=[a, b, c], eval_step_fn=scripted([1, 2, 3]),
                        root=tmp_path)
    assert set(run.checkpoint("last").payload()["components"]) == {
        "nnx.monitor", "early_stopping", "early_stopping.2", "early_stopping.slow"}
    assert max(run.epochs) == 1 and a.stopped_epoch == 1 and b.wait == 1
    with pytest.raises(ParamsError, match=r"duplicate component name 'x' \(checkpointed as 'early_stopping.x'\)"):
        model().train(params(1), callbacks=[nnx.EarlyStopping(name="x"), nnx.EarlyStopping(name="x")], root=tmp_path)


# =========================================================================== resume
PLATEAU_VALUES = [1.0, 0.9, 0.95, 0.97, 0.99, 0.8, 0.85, 0.86, 0.87, 0.88, 0.89, 0.9]


def _plateau_run(root, crash_at=None, resume="auto"):
    spec = nnx.MonitorSpec(min_delta=0.01)
    sched = nnx.NNSchedulerParams(patience=1, cooldown=1, factor=0.5)
    p = params(12, monitor=spec, scheduler=sched, train_loader=loader(2), resume=resume, seed=3)
    es, lrm = nnx.EarlyStopping(monitor=spec, patience=4), nnx.LRMonitor()

    class Crash(nnx.Callback):
        def on_epoch_begin(self, ctx):
            if ctx.epoch == crash_at:
                raise RuntimeError("power cut")

    m = model(seed=1)
    cbs = [es, lrm] + ([Crash()] if crash_at is not None else [])
    run = m.train(p, callbacks=cbs, eval_step_fn=scripted(PLATEAU_VALUES), root=root)
    return run, es, lrm


def test_resume_auto_mid_run_gives_the_same_decisions_lrs_and_stop_epoch(tmp_path):
    straight, es, lrm = _plateau_run(tmp_path / "a")
    assert es.stopped_epoch == 9 and improved_epochs(straight) == [0, 1, 5]

    with pytest.raises(RuntimeError, match="power cut"):
        _plateau_run(tmp_path / "b", crash_at=4)  # epochs 0-3 committed; wait=2, plateau in cooldown
    partial = nnx.NNRun.load(straight.id, tmp_path / "b")
    assert max(partial.epochs) == 3
    saved = partial.checkpoint("last").payload()
    assert saved["components"]["early_stopping"]["wait"] == 2 and saved["schedule"]["cooldown_left"] == 1
    assert saved["components"]["nnx.monitor"]["best"] == 0.9

    resumed, es2, lrm2 = _plateau_run(tmp_path / "b")  # fresh callbacks: state comes from the checkpoint
    assert resumed.id == straight.id and resumed.resume_status["mode"] == "stateful"
    assert decisions(resumed) == decisions(straight)
    assert [i.selection for i in resumed.epochs.values()] == [i.selection for i in straight.epochs.values()]
    assert epoch_lrs(resumed) == epoch_lrs(straight)
    assert lrm2.history == lrm.history[4:]
    assert es2.stopped_epoch == es.stopped_epoch == max(resumed.epochs)
    assert resumed.checkpoint("best").epoch == straight.checkpoint("best").epoch == 5
    for k, v in straight.checkpoint("last").weights().items():
        torch.testing.assert_close(resumed.checkpoint("last").weights()[k], v, rtol=0, atol=0)


def test_an_early_stopped_run_is_complete_for_resume_auto(tmp_path):
    """Calling train() again with resume="auto" returns the stopped run; it does not train on."""
    for _ in range(2):
        es = nnx.EarlyStopping(patience=2)
        run = model().train(params(8, monitor=nnx.MonitorSpec(), resume="auto", train_loader=loader(1)),
                            callbacks=[es], eval_step_fn=scripted([1.0, 0.9, 0.95, 0.96, 0.97, 0.98, 0.99, 1.0]),
                            root=tmp_path)
        assert max(run.epochs) == 3 and run.checkpoint("last").epoch == 3


UPDATE_VALUES = [1.0, 0.8, 0.85, 0.9, 0.7, 0.75, 0.76, 0.77]


def _update_clock_params(n_epochs, **kw):
    sched = nnx.NNSchedulerParams(
        kind=nnx.Schedulers.LINEAR_WARMUP_DECAY, warmup_steps=5, total_steps=8 * 3, clock="optimizer_update"
    )
    return params(n_epochs, monitor=nnx.MonitorSpec(), scheduler=sched, optim=sgd(0.12, accumulate=2),
                  train_loader=loader(5), seed=2, **kw)


def test_stateful_resume_from_run_id_continues_update_clock_early_stopping_and_monitor(tmp_path):
    es, lrm = nnx.EarlyStopping(patience=3), nnx.LRMonitor()
    straight = model(seed=1).train(_update_clock_params(8), callbacks=[es, lrm],
                                   eval_step_fn=scripted(UPDATE_VALUES), root=tmp_path)
    assert es.stopped_epoch == 7 and improved_epochs(straight) == [0, 1, 4]

    src_es = nnx.EarlyStopping(patience=3)
    source = model(seed=1).train(_update_clock_params(3), callbacks=[src_es, nnx.LRMonitor()],
                                 eval_step_fn=scripted(UPDATE_VALUES), root=tmp_path)
    state = source.checkpoint("last").payload()["components"]
    assert state["nnx.scheduler_clock"] == {"clock": "optimizer_update", "kind": "linear_warmup_decay",
                                            "budget": 24, "ticks": 9}
    assert state["early_stopping"]["wait"] == 1

    es2, lrm2 = nnx.EarlyStopping(patience=3), nnx.LRMonitor()
    resumed = model(seed=5).train(  # other initial weights: everything must come from the checkpoint
        _update_clock_params(5, resume_from_run_id=source.id), callbacks=[es2, lrm2],
        eval_step_fn=scripted(UPDATE_VALUES), root=tmp_path,
    )
    assert resumed.id != source.id and resumed.resume_status["source_epoch"] == 2
    assert list(resumed.epochs) == [3, 4, 5, 6, 7]
    assert [i.selection for i in resumed.epochs.values()] == [straight.epochs[e].selection for e in range(3, 8)]
    assert lrm2.update_history == lrm.update_history[9:]  # update indices and LRs continue exactly
    assert [i.lr for i in resumed.idps] == [i.lr for i in straight.idps if i.epoch_idx >= 3]
    assert es2.stopped_epoch == es.stopped_epoch == 7
    assert resumed.checkpoint("best").epoch == 4
    for k, v in straight.checkpoint("last").weights().items():
        torch.testing.assert_close(resumed.checkpoint("last").weights()[k], v)


def test_resume_refuses_a_schedule_on_another_clock(tmp_path):
    source = model().train(params(2, scheduler=step_schedule("epoch")), root=tmp_path)
    with pytest.raises(ComponentRestoreError, match="nnx.scheduler_clock"):
        model().train(params(1, scheduler=step_schedule(), resume_from_run_id=source.id), root=tmp_path)


def test_weights_only_resume_restarts_the_monitor(tmp_path):
    source = model().train(params(2), eval_step_fn=scripted([0.5, 0.4, 0.9]), root=tmp_path)
    warm = model().train(params(1, resume_from_run_id=source.id, resume_mode="weights_only"),
                         eval_step_fn=scripted([0.5, 0.4, 0.9]), root=tmp_path)
    sel = warm.epochs[2].selection
    assert sel.improved and sel.best == 0.9 and not math.isnan(sel.value)


def files_under(folder) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_refused_resume_auto_writes_nothing(tmp_path):
    """A continuation whose checkpoint does not fit this run's components is refused before any
    byte of the run changes (metadata.yaml included)."""
    with pytest.raises(RuntimeError, match="power cut"):
        _plateau_run(tmp_path, crash_at=4)  # epochs 0-3 committed, with an EarlyStopping's state
    (folder,) = [p for p in tmp_path.iterdir() if not p.name.startswith(".")]
    before = files_under(folder)
    p = params(12, monitor=nnx.MonitorSpec(min_delta=0.01), scheduler=nnx.NNSchedulerParams(patience=1, cooldown=1, factor=0.5),
               train_loader=loader(2), resume="auto", seed=3)
    with pytest.raises(ComponentRestoreError, match="tally"):  # the same run id, a required component unsaved
        model(seed=1).train(p, callbacks=[nnx.LRMonitor()], eval_step_fn=scripted(PLATEAU_VALUES), components=[Tally()],
                            root=tmp_path)
    assert files_under(folder) == before


class Tally:
    """A required checkpointed component (``component_required`` not declared)."""

    def component_spec(self):
        return ("tally", 1)

    def component_state(self):
        return {"n": 0}

    def load_component_state(self, state, *, version=None):
        pass


class Overlong:
    """A loader whose len() says 2 batches but which yields 4 (a streaming source miscounting)."""

    def __init__(self, batches):
        self.batches = batches

    def __len__(self):
        return 2

    def __iter__(self):
        return iter(self.batches)


def test_an_update_clock_cosine_past_its_default_period_warns_once_and_runs_torchs_formula(tmp_path):
    """The default T_max is the planned updates (2 epochs × len 2 = 4); the loader yields 4 a
    epoch, so the schedule passes it: NNx warns once and goes on, the LRs torch's own."""
    cosine = nnx.NNSchedulerParams(kind=nnx.Schedulers.COSINE_ANNEALING, clock="optimizer_update")
    lrs = nnx.LRMonitor()
    with pytest.warns(UserWarning, match=r"passed its T_max of 4 optimizer updates") as caught:
        model().train(params(2, train_loader=Overlong(loader()), val_loader=None, optim=sgd(), scheduler=cosine),
                      root=tmp_path, callbacks=[lrs])
    assert len([w for w in caught if "T_max" in str(w.message)]) == 1
    reference = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    plain = torch.optim.lr_scheduler.CosineAnnealingLR(reference, T_max=4, eta_min=cosine.min_lr)
    expected = []
    for _ in range(8):
        reference.step()
        plain.step()
        expected.append(reference.param_groups[0]["lr"])
    assert [lr for _, lr in lrs.update_history] == pytest.approx(expected)  # it rises again after update 4


def test_a_resumed_cosine_keeps_the_checkpoints_period_whatever_this_run_configures(tmp_path):
    cosine = nnx.NNSchedulerParams(kind=nnx.Schedulers.COSINE_ANNEALING, clock="optimizer_update")
    parent = model().train(params(1, val_loader=None, optim=sgd(), scheduler=cosine), root=tmp_path)
    longer = nnx.NNSchedulerParams(kind=nnx.Schedulers.COSINE_ANNEALING, clock="optimizer_update", T_max=10)
    with pytest.warns(UserWarning, match="T_max of 4 .*stateful resume keeps the checkpoint's T_max"):
        resumed = model(seed=9).train(params(1, val_loader=None, optim=sgd(), scheduler=longer,
                                             resume_from_run_id=parent.id), root=tmp_path)
    assert resumed.resume_status.mode == "stateful"
