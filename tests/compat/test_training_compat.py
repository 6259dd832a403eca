"""The training surface of NNx 0.4, written from its documentation (REFERENCE §3.5, §4, §6.3,
§7.2, §9.7, §9.9, §10.2, §12.2): the step contexts' fields, EarlyStopping's string monitors,
LRMonitor's update trace, ``kd_train_step_factory``, ``set_seed`` / ``dataloader_worker_init_fn``,
``ResumeStatus`` / ``ResumePointError``, ``NNRun.load(id=)`` / ``_repr_html_``,
``validate_response(provider=)``, and the warnings and error wording NNx documents."""

from __future__ import annotations

import copy
import os
import random
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import nnx_api as nnx
from nnx_api import decisions

from tests.api.tiny import batches, tiny_data


def model_for(seed=0, classes=3, hidden=(8,)):
    torch.manual_seed(seed)
    return nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=classes, hidden_dims=hidden), nnx.NNModelParams())


def sgd(lr=0.1, accumulate=1):
    return nnx.NNOptimParams(name=nnx.Optims.SGD, max_lr=lr, momentum=0.0, accumulate_grad_batches=accumulate)


def scripted(values, field="loss"):
    """An eval_step_fn whose epoch ``e`` validation record holds ``values[e]`` as ``field``."""
    return lambda ctx: nnx.EvaluationDataPoint(**{field: values[ctx.epoch_idx]})


def train(runs, n_epochs, callbacks=(), **kw):
    x, y = tiny_data(n=8)
    kw.setdefault("train_loader", [(x, y)])
    kw.setdefault("val_loader", [(x, y)])
    fit = {k: kw.pop(k) for k in ("eval_step_fn", "train_step_fn") if k in kw}
    return model_for().train(nnx.NNTrainParams(n_epochs=n_epochs, optim=sgd(), **kw), callbacks=list(callbacks),
                             root=runs, **fit)


# ----------------------------------------------------------------------------- step contexts
def test_train_step_context_fields(runs):
    x, y = tiny_data(n=24)
    seen = []

    def step(ctx):
        seen.append(ctx)
        return nnx.default_train_step(ctx)

    params = nnx.NNTrainParams(n_epochs=2, optim=sgd(accumulate=2), train_loader=batches(x, y, 8),
                               metrics=(nnx.MetricSpec("accuracy"),))
    model_for().train(params, train_step_fn=step, root=runs)
    assert len(seen) == 6
    assert all(ctx.scaler is None for ctx in seen)  # a GradScaler only under fp16
    assert all(ctx.extra_metrics is None for ctx in seen)
    states = [ctx.accumulation_state for ctx in seen]
    assert all(isinstance(s, nnx.GradientAccumulationState) for s in states)
    assert states[0] is states[1] is states[2] and states[3] is not states[0]  # one per epoch
    assert seen[0].epoch_summary is not None  # the whole-epoch summary's accumulator (metrics declared)


def test_default_train_step_keeps_the_accumulation_state_of_the_open_window(runs):
    x, y = tiny_data(n=24)
    y[[0, 1, 9]] = -100
    readings = []

    def step(ctx):
        record = nnx.default_train_step(ctx)
        s = ctx.accumulation_state
        readings.append((s.normalization_weight, s.loss_numerator > 0, s.normalization_required))
        return record

    params = nnx.NNTrainParams(n_epochs=1, optim=sgd(accumulate=2), train_loader=batches(x, y, 8))
    model = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(8,)),
                        nnx.NNModelParams(task=nnx.TaskSpec.categorical(ignore_index=-100)))
    model.train(params, train_step_fn=step, root=runs)
    # batch 0 opens a window with its 6 valid targets, batch 1 closes it, batch 2 (the last) too
    assert readings == [(6.0, True, True), (0.0, False, True), (0.0, False, True)]


def test_no_trainable_parameter_is_refused_with_nnx_wording(runs):
    model = model_for()
    for p in model.net.parameters():
        p.requires_grad_(False)
    x, y = tiny_data(n=8)
    with pytest.raises(ValueError, match=r"did you freeze\('\*'\)\?"):
        model.train(nnx.NNTrainParams(n_epochs=1, train_loader=[(x, y)]), root=runs)


# ----------------------------------------------------------------------------- EarlyStopping
def test_string_monitor_with_min_delta_uses_nnx_improvement_rule(runs):
    """min: improvement = value < best - min_delta. 1.0 (first) and 0.95 improve; 0.949 does not
    (> 0.95 - 0.02): with patience 1 the run stops after epoch 2."""
    es = nnx.EarlyStopping(monitor="val_edp.loss", min_delta=0.02, patience=1)
    run = train(runs, 5, [es], eval_step_fn=scripted([1.0, 0.95, 0.949, 0.9, 0.8]))
    assert es.own and es.selected_monitor == "val_edp.loss"
    assert es.stopped_epoch == 2 and max(run.epochs) == 2 and es.best == 0.95


def test_mode_max_on_an_error_monitor(runs):
    es = nnx.EarlyStopping(monitor="val_edp.error", mode="max", patience=1)
    train(runs, 4, [es], eval_step_fn=scripted([0.1, 0.2, 0.15, 0.3], "error"))
    assert es.stopped_epoch == 2 and es.best == 0.2


def test_train_edp_monitor_reads_the_epochs_last_batch_record(runs):
    x, y = tiny_data(n=16)
    losses = iter([9.0, 1.0, 0.5, 2.0, 0.1, 3.0])  # two batches per epoch: the last ones are 1.0, 2.0, 3.0

    def step(ctx):
        nnx.default_train_step(ctx)
        return nnx.EvaluationDataPoint(loss=next(losses))

    es = nnx.EarlyStopping(monitor="train_edp.loss", patience=2)
    train(runs, 3, [es], train_loader=batches(x, y, 8), val_loader=None, train_step_fn=step)
    assert es.best == 1.0 and es.stopped_epoch == 2  # 2.0 and 3.0 never beat 1.0 (0.5 and 0.1 are not last)


def test_missing_field_is_not_counted_and_warned_once_and_nan_never_becomes_best(runs):
    es = nnx.EarlyStopping(monitor="val_edp.error", patience=1)
    with pytest.warns(RuntimeWarning, match="val_edp.error") as caught:
        train(runs, 3, [es], eval_step_fn=scripted([1.0, 1.0, 1.0]))  # only a loss: no error
    assert es.stopped_epoch is None and es.wait == 0
    assert len([w for w in caught if "EarlyStopping" in str(w.message)]) == 1
    nan = nnx.EarlyStopping(monitor="val_edp.loss", patience=2)
    train(runs / "nan", 3, [nan], eval_step_fn=scripted([float("nan"), 1.0, 1.1]))
    assert nan.best == 1.0 and nan.wait == 1


def test_automatic_monitor_with_min_delta_selects_val_error_then_keeps_it(runs):
    es = nnx.EarlyStopping(min_delta=0.5, patience=3)  # its own comparator: a min_delta
    x, y = tiny_data(n=8)
    run = train(runs, 2, [es], val_loader=[(x, y)])
    assert es.own and es.selected_monitor == "val_edp.error" and es.best == run.epochs[0].val_edp.error


def test_the_automatic_monitor_following_the_runs_decision_reports_what_it_read(runs):
    """NNx 0.4.1 (the wheel): ``EarlyStopping(patience=3)`` after a classification run reports
    ``val_edp.error``; after a regression run (no error) ``val_edp.loss``; before training None."""
    es = nnx.EarlyStopping(patience=3)
    assert not es.own and es.selected_monitor is None
    x, y = tiny_data(n=8)
    train(runs, 2, [es], val_loader=[(x, y)])
    assert es.selected_monitor == "val_edp.error"
    regression = nnx.EarlyStopping(patience=3)
    train(runs / "regression", 2, [regression], eval_step_fn=scripted([1.0, 0.5]))  # a loss, no error
    assert regression.selected_monitor == "val_edp.loss"


def test_a_string_monitor_equal_to_the_runs_monitor_shares_its_one_decision(runs):
    shared = nnx.EarlyStopping(monitor="val_edp.loss", patience=5)
    own = nnx.EarlyStopping(monitor="val_edp.loss", min_delta=0.3, patience=2, name="coarse")
    run = train(runs, 4, [shared, own], eval_step_fn=scripted([1.0, 0.9, 0.85, 0.8]), monitor=nnx.MonitorSpec("loss"))
    assert not shared.own and own.own
    assert [run.epochs[e].selection.improved for e in range(3)] == [True, True, True]
    assert shared.wait == 0 and shared.best == 0.85  # it counts on the decision: every epoch improved
    assert own.stopped_epoch == 2 and max(run.epochs) == 2  # its own comparator: 0.9, 0.85 > 1.0 - 0.3


def test_early_stopping_refusals_and_a_resume_with_another_monitor():
    for bad, match in (
        (dict(monitor="val_edp.accuracy"), "monitor must be None, a MonitorSpec or one of"),
        (dict(mode="sideways", monitor="val_edp.loss"), "mode must be 'min' or 'max'"),
        (dict(mode="max"), "requires an explicit monitor"),
        (dict(monitor=nnx.MonitorSpec("loss"), min_delta=0.1), "leave mode and min_delta at their defaults"),
        (dict(patience=1.5), "patience"),
        (dict(min_delta=-0.1, monitor="val_edp.loss"), "min_delta"),
    ):
        with pytest.raises(ValueError, match=match):
            nnx.EarlyStopping(**bad)
    saved = nnx.EarlyStopping(monitor="val_edp.loss").component_state()
    assert nnx.EarlyStopping(monitor="val_edp.loss").check_component_state(saved) == []
    problems = nnx.EarlyStopping(monitor="val_edp.error").check_component_state(saved)
    assert problems and "val_edp.loss" in problems[0]


# ----------------------------------------------------------------------------- LRMonitor
def test_update_history_is_filled_only_on_the_update_clock(runs):
    x, y = tiny_data(n=16)
    loader = batches(x, y, 4)
    epoch_clock, update_clock = nnx.LRMonitor(), nnx.LRMonitor()
    step = dict(kind=nnx.Schedulers.STEP, step_size=1, factor=0.5)
    train(runs / "e", 2, [epoch_clock], train_loader=loader, scheduler=nnx.NNSchedulerParams(**step))
    train(runs / "u", 2, [update_clock], train_loader=loader,
          scheduler=nnx.NNSchedulerParams(**step, clock="optimizer_update"))
    assert epoch_clock.update_history == [] and epoch_clock.history == pytest.approx([0.05, 0.025])
    assert [i for i, _ in update_clock.update_history] == list(range(1, 9))
    assert [lr for _, lr in update_clock.update_history] == pytest.approx([0.1 * 0.5**k for k in range(1, 9)])


def test_update_history_stays_empty_when_the_trainer_step_owns_the_schedule(runs):
    x, y = tiny_data(n=16)
    lrs = nnx.LRMonitor()

    def step(ctx):
        loss = F.cross_entropy(ctx.model.net(ctx.batch[0]), ctx.batch[1])
        return nnx.EvaluationDataPoint(loss=nnx.finalize_step(loss, ctx, paradigm="plain", optimizer="main"))

    sched = nnx.NNSchedulerParams(kind=nnx.Schedulers.STEP, step_size=1, factor=0.5, clock="optimizer_update")
    params = nnx.NNTrainerParams(n_epochs=1, optims={"main": sgd()}, schedulers={"main": sched},
                                 auto_step_schedulers=False, train_loader=batches(x, y, 4))
    nnx.Trainer(model_for()).train(params, trainer_step_fn=step, callbacks=[lrs], root=runs)
    assert lrs.update_history == [] and lrs.history == [0.1]


# ----------------------------------------------------------------------------- paradigms
def test_kd_train_step_factory_freezes_the_teacher_and_trains_the_documented_loss(runs):
    teacher = model_for(seed=3)
    student = model_for(seed=4)
    initial = copy.deepcopy(student.net)
    step = nnx.kd_train_step_factory(teacher, alpha=0.3, temperature=2.0)
    assert not teacher.net.training and not any(p.requires_grad for p in teacher.net.parameters())
    x, y = tiny_data(n=16)
    run = student.train(nnx.NNTrainParams(n_epochs=1, optim=sgd(), train_loader=batches(x, y, 8)),
                        train_step_fn=step, root=runs)
    xb, yb = x[:8], y[:8]
    with torch.no_grad():  # L = α·KL(softmax(t/T) ‖ softmax(s/T))·T² (batch mean) + (1 − α)·CE, before the update
        s, t = initial(xb), teacher.net(xb)
        soft = F.kl_div(F.log_softmax(s / 2.0, -1), F.softmax(t / 2.0, -1), reduction="batchmean") * 4.0
        expected = 0.3 * soft + 0.7 * F.cross_entropy(s, yb)
    assert run.idps[0].train_edp.loss == pytest.approx(float(expected), rel=1e-5)
    assert run.checkpoint("last").payload()["update_count"] == 2  # finalize_step reported each update
    assert not any(p.requires_grad for p in teacher.net.parameters())


def test_kd_train_step_factory_refusals(runs):
    teacher = model_for(seed=3)
    with pytest.raises(ValueError, match="alpha"):
        nnx.kd_train_step_factory(teacher, alpha=1.5)
    with pytest.raises(ValueError, match="temperature"):
        nnx.kd_train_step_factory(teacher, temperature=0.0)
    x, y = tiny_data(n=16)
    with pytest.raises(ValueError, match="cannot accumulate"):
        model_for().train(nnx.NNTrainParams(n_epochs=1, optim=sgd(accumulate=2), train_loader=batches(x, y, 8)),
                          train_step_fn=nnx.kd_train_step_factory(teacher), root=runs)


# ----------------------------------------------------------------------------- seeding
@pytest.fixture
def restored_determinism():
    flags = (torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark)
    algorithms = torch.are_deterministic_algorithms_enabled()
    env = {k: os.environ.get(k) for k in ("PYTHONHASHSEED", "CUBLAS_WORKSPACE_CONFIG")}
    yield
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = flags
    torch.use_deterministic_algorithms(algorithms)
    for key, value in env.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def test_set_seed_pins_every_stream_and_cudnn(restored_determinism):
    def draws():
        return random.random(), float(np.random.rand()), float(torch.rand(()))

    nnx.set_seed(11)
    first = draws()
    nnx.set_seed(11, strict=False)
    assert draws() == first
    assert os.environ["PYTHONHASHSEED"] == "11"
    assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
    assert not torch.are_deterministic_algorithms_enabled()
    nnx.set_seed(11, strict=True)
    assert torch.are_deterministic_algorithms_enabled() and "CUBLAS_WORKSPACE_CONFIG" in os.environ
    with pytest.raises(ValueError):
        nnx.set_seed(1.5)


def test_dataloader_worker_init_fn_seeds_a_worker_from_its_torch_seed_and_id():
    torch.manual_seed(41)  # in a worker, torch.initial_seed() is the seed torch gave that worker
    nnx.dataloader_worker_init_fn(3)
    got = (random.random(), float(np.random.rand()))
    random.seed(44)
    expected = (random.random(), float(np.random.RandomState(44).rand()))
    assert got == expected


# ----------------------------------------------------------------------------- resume
def test_resume_status_says_how_each_session_started(runs):
    x, y = tiny_data(n=8)
    base = nnx.NNTrainParams(n_epochs=2, optim=sgd(), train_loader=[(x, y)], val_loader=[(x, y)])
    source = model_for().train(base, callbacks=[nnx.EarlyStopping()], root=runs)
    assert not source.resume_status  # a fresh session
    resumed = model_for().train(base.replace(n_epochs=1, resume_from_run_id=source.id), callbacks=[nnx.EarlyStopping()],
                                root=runs)
    status = resumed.resume_status
    assert isinstance(status, nnx.ResumeStatus) and status
    assert (status.mode, status.source_run_id, status.source_checkpoint, status.source_epoch) == (
        "stateful", source.id, "last", 1)
    assert status.restored_components == ("early_stopping",) and status.fresh_components == ()  # no monitor declared
    loaded = nnx.NNRun.load(id=resumed.id, root=runs)
    assert loaded.resume_status == status and dict(loaded.resume_status) == status.state()
    warm = model_for().train(base.replace(n_epochs=1, resume_from_run_id=source.id, resume_mode="weights_only", data_id="w"),
                             root=runs)
    assert warm.resume_status.mode == "weights_only" and warm.resume_status.fresh_components == ()
    legacy = nnx.ResumeStatus.from_state({"mode": "stateful", "source_run": source.id, "source_checkpoint": "last"})
    assert legacy.source_run_id == source.id
    with pytest.raises(ValueError):
        nnx.ResumeStatus(mode="sometimes")


def test_a_corrupted_resume_point_is_a_resume_point_error_before_anything_is_written(runs):
    x, y = tiny_data(n=8)
    base = nnx.NNTrainParams(n_epochs=1, optim=sgd(), train_loader=[(x, y)])
    source = model_for().train(base, root=runs)
    blob = source.checkpoint("last").manifest.blobs["state"]
    path = source.files().blob_path(blob.sha256)
    data = bytearray((runs / path).read_bytes())
    data[len(data) // 2] ^= 0xFF
    (runs / path).write_bytes(bytes(data))
    before = sorted(p.name for p in runs.iterdir())
    with pytest.raises(nnx.ResumePointError, match="SHA-256") as err:
        model_for().train(base.replace(resume_from_run_id=source.id), root=runs)
    assert isinstance(err.value, ValueError) and isinstance(err.value, nnx.CorruptRunError)
    assert sorted(p.name for p in runs.iterdir()) == before


def test_an_auto_resume_from_a_weights_only_checkpoint_warns(runs):
    x, y = tiny_data(n=8)
    base = nnx.NNTrainParams(n_epochs=1, optim=sgd(), train_loader=[(x, y)])
    source = model_for().train(base, callbacks=[nnx.ModelCheckpoint(epochs=[0], tag="snap")], root=runs)
    with pytest.warns(RuntimeWarning, match="weights only"):
        warm = model_for().train(base.replace(resume_from_run_id=source.id, resume_from_checkpoint="snap_e0"), root=runs)
    assert warm.resume_status.mode == "weights_only"
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # asked for explicitly: no warning
        model_for().train(base.replace(resume_from_run_id=source.id, resume_from_checkpoint="snap_e0",
                                       resume_mode="weights_only", data_id="explicit"), root=runs)


# ----------------------------------------------------------------------------- NNRun
def test_nnrun_load_by_id_keyword_and_its_notebook_html(runs):
    x, y = tiny_data(n=8)
    run = model_for().train(nnx.NNTrainParams(n_epochs=2, optim=sgd(), train_loader=[(x, y)], val_loader=[(x, y)],
                                              data_id="<digits & co>"), root=runs)
    loaded = nnx.NNRun.load(id=run.id, root=runs)
    assert loaded == run
    page = loaded._repr_html_()
    assert run.id in page and "train.optim.max_lr" in page and "val/loss" in page
    assert "&lt;digits &amp; co&gt;" in page and "<digits" not in page  # values are escaped
    assert page.count("★") == 1  # BEST is marked on its epoch's row
    assert nnx.NNRun(config=run.config, root=runs / "nowhere")._repr_html_().startswith("<div")


# ----------------------------------------------------------------------------- decisions
def test_validate_response_keeps_the_provider_and_a_scores_vendor_score():
    choice = decisions.Choice("pick", [("a", "A"), ("b", "B")])
    result = decisions.validate_response(choice, {"b": 0.25, "a": 0.75}, provider="fixed-head")
    assert result.provider == "fixed-head" and result.distribution == (("a", 0.75), ("b", 0.25))
    assert result.kind == "choice" and result.probabilities() == {"a": 0.75, "b": 0.25}
    assert result != decisions.validate_response(choice, {"a": 0.75, "b": 0.25})  # who answered is part of it
    assert decisions.validate_response(choice, result).provider == "fixed-head"
    boolean = decisions.validate_response(decisions.Boolean("rain?"), 0.2, provider="p")
    assert boolean.provider == "p" and boolean.p_false == pytest.approx(0.8)
    score = decisions.Score("how good", [("low", "L"), ("high", "H")])
    graded = decisions.validate_response(score, [("high", 0.5), ("low", 0.5)], provider="v", vendor_score=4)
    assert graded.vendor_score == 4.0 and graded.provider == "v"
    with pytest.raises(decisions.InvalidDecisionResponse, match="vendor_score"):
        decisions.validate_response(choice, result, vendor_score=1.0)
    with pytest.raises(decisions.InvalidDecisionResponse, match="vendor_score"):
        decisions.validate_response(score, graded, vendor_score=float("inf"))


def test_early_stopping_is_an_optional_component_on_resume(runs):
    """REFERENCE §6.3/§6.5: EarlyStopping is an *optional* checkpointed component — a resume
    refuses only missing or unknown *required* ones. Resuming without it ignores its saved state;
    adding it on a resume starts it fresh (and ResumeStatus says so)."""

    class Tally:  # required: its saved state must be restored
        def component_spec(self):
            return ("tally", 1)

        def component_state(self):
            return {"n": 1}

        def load_component_state(self, state, *, version=None):
            self.loaded = state

    x, y = tiny_data(n=8)
    base = nnx.NNTrainParams(n_epochs=2, optim=sgd(), train_loader=[(x, y)], val_loader=[(x, y)])
    with_es = model_for().train(base, callbacks=[nnx.EarlyStopping()], components=[Tally()], root=runs)
    without = model_for().train(base.replace(n_epochs=1, resume_from_run_id=with_es.id), components=[Tally()], root=runs)
    assert without.resume_status.mode == "stateful" and "early_stopping" not in without.resume_status.restored_components
    assert "tally" in without.resume_status.restored_components
    plain = model_for().train(base.replace(data_id="plain"), root=runs)
    added = model_for().train(base.replace(n_epochs=1, resume_from_run_id=plain.id), callbacks=[nnx.EarlyStopping()],
                              root=runs)
    assert "early_stopping" in added.resume_status.fresh_components and added.resume_status.mode == "stateful"
    with pytest.raises(nnx.ComponentRestoreError, match="tally"):  # a required one is still refused when unsaved
        model_for().train(base.replace(n_epochs=1, resume_from_run_id=plain.id, data_id="t"), components=[Tally()],
                          root=runs)
    with pytest.raises(nnx.ComponentRestoreError, match="tally"):  # and when saved but not registered
        model_for().train(base.replace(n_epochs=1, resume_from_run_id=with_es.id, data_id="u"), root=runs)
