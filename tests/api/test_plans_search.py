"""ExperimentPlan (immutable, validate/probe/fit) and nnx_api.experiments.search over Optuna on digits."""

from __future__ import annotations

import dataclasses
import math
import os
import random

import numpy as np
import pytest
import torch

import nnx_api as nnx
from nnx_api.experiments.plans import Diagnostic, ExperimentPlan, PlanData, PlanError
from nnx_api.experiments.search import CategoricalParam, FloatParam, IntParam, SearchBudget, SearchSpace, search

from tests.api.ecosystem_helpers import digits_loaders, run_doc

NLL = nnx.MetricSpec(id="nll")


def digits_plan(root, epochs=3, **train):
    train_loader, val_loader = digits_loaders()
    return ExperimentPlan(
        net=nnx.NNParams(input_dim=64, output_dim=10, hidden_dims=(32,)),
        train=nnx.NNTrainParams(n_epochs=epochs, optim=nnx.NNOptimParams(max_lr=1e-2), **train),
        data=PlanData(train=train_loader, val=val_loader),
        root=root,
    )


# -- plans ----------------------------------------------------------------------------------------


def test_plans_are_immutable_and_branch_with_with_methods(tmp_path):
    base = digits_plan(tmp_path)
    with pytest.raises(dataclasses.FrozenInstanceError):
        base.seed = 3
    wide = base.with_net(hidden_dims=(64, 32)).with_optim(max_lr=3e-3).with_epochs(7).with_seed(5)
    assert (wide.net.hidden_dims, wide.train.optim.max_lr, wide.train.n_epochs, wide.seed) == ((64, 32), 3e-3, 7, 5)
    assert (base.net.hidden_dims, base.train.optim.max_lr, base.train.n_epochs, base.seed) == ((32,), 1e-2, 3, None)
    assert base.effective_seed == 0  # no seed anywhere: fits are seeded with 0
    monitored = base.with_metrics(NLL).with_monitor(nnx.MonitorSpec(metric="nll"))
    assert monitored.train.monitor.metric == "nll" and base.train.monitor is None
    with pytest.raises(nnx.ParamsError, match="max_lr"):
        base.with_optim(max_lr=-1.0)  # each branch is validated like the params themselves


def test_validate_is_pure_and_names_each_problem_by_field_path(tmp_path):
    calls = []

    def factory():
        calls.append(1)
        return []

    bad = ExperimentPlan(
        net=nnx.NNParams(input_dim=64, output_dim=10),
        model=nnx.NNModelParams(task=nnx.TaskSpec.categorical(n=7)),
        train=nnx.NNTrainParams(
            n_epochs=2, metrics=(nnx.MetricSpec(id="mse"),), monitor=nnx.MonitorSpec(metric="loss")
        ),
        data=PlanData(train=iter([(torch.zeros(1, 64), torch.zeros(1, dtype=torch.long))])),
        seed=-1,
        callbacks=[42],
        callback_factories=[factory, "nope"],
    )
    problems = bad.validate()
    assert all(isinstance(p, Diagnostic) for p in problems)
    assert {p.path for p in problems} == {
        "model.task", "train.metrics", "train.monitor", "data.train", "seed", "callbacks[0]", "callback_factories[1]",
    }
    assert calls == []  # pure: no factory was called, nothing was built
    assert not (tmp_path / "runs").exists()
    with pytest.raises(PlanError) as err:
        bad.fit()
    assert err.value.diagnostics == tuple(problems)
    assert digits_plan(tmp_path).validate().ok
    assert [p.path for p in ExperimentPlan(train=nnx.NNTrainParams(n_epochs=1)).validate()] == ["net", "data.train"]


def test_refused_optimizer_schedule_and_extra_metric_edits_are_held_until_validate(tmp_path):
    # NNx 0.4.1's plans (the wheel) hold these three edits and report them at validate(), every
    # problem at once, while a refused epoch count is a PlanError at the call
    plan = digits_plan(tmp_path)
    held = plan.with_optim("adam").with_scheduler("plateau").with_extra_metrics([("acc", len)])
    assert held.train == plan.train and held != plan  # the last accepted params, and the held problems
    assert held.validate().paths == ("train.optim", "train.scheduler", "train.extra_metrics")
    assert "NNOptimParams" in held.validate()[0].message
    with pytest.raises(PlanError) as err:
        held.fit()
    assert err.value.diagnostics == tuple(held.validate())
    fixed = held.with_optim(nnx.NNOptimParams(max_lr=1e-3)).with_train(extra_metrics={"acc": len})
    assert fixed.validate().paths == ("train.scheduler",) and fixed.train.optim.max_lr == 1e-3
    assert held.with_train(plan.train).validate().ok  # whole params replace whatever was held
    with pytest.raises(PlanError, match="train.n_epochs"):
        plan.with_epochs(0)
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_validate_names_the_streaming_step_for_a_metric_it_cannot_score(tmp_path):
    regression = nnx.NNModelParams(loss="mean_squared_error")
    plan = digits_plan(tmp_path).with_model(regression).with_metrics([NLL])
    streamed = plan.with_step_fns(eval_step_fn=nnx.streaming_eval_step).validate()
    assert streamed.paths == ("train.metrics",) and "streaming_eval_step()" in streamed[0].message
    assert "streaming_eval_step()" not in plan.validate()[0].message  # the default step is not named


def test_probe_runs_one_forward_and_restores_every_rng_and_the_environment(tmp_path):
    plan = digits_plan(tmp_path)
    batch = digits_loaders()[0][0]
    torch.manual_seed(123), random.seed(123), np.random.seed(123)
    env = dict(os.environ)
    result = plan.probe(batch)
    after = (torch.rand(3), random.random(), np.random.rand())
    torch.manual_seed(123), random.seed(123), np.random.seed(123)
    expected = (torch.rand(3), random.random(), np.random.rand())
    assert torch.equal(after[0], expected[0]) and after[1:] == expected[1:]
    assert dict(os.environ) == env
    assert result.output_shape == (100, 10) and result.count == 100
    nnx.set_seed(plan.effective_seed)  # the same throw-away model, built by hand
    model = plan.build_model()
    with torch.no_grad():
        loss = torch.nn.functional.cross_entropy(model.net(batch[0]), batch[1]).item()
    assert result.loss == pytest.approx(loss, rel=1e-6)
    assert not (tmp_path / "runs").exists()  # nothing written


def test_each_fit_is_a_distinct_attempt_with_its_own_run(tmp_path):
    made = []

    def fresh_lr_monitor():
        made.append(nnx.LRMonitor())
        return made[-1]

    plan = digits_plan(tmp_path, epochs=2).with_callback_factories(fresh_lr_monitor)
    first, second = plan.fit(), plan.fit(attempt="second")
    assert first.attempt_id != second.attempt_id and second.attempt_id == "second"
    assert first.run.id != second.run.id
    assert second.run.config["salt"] == "plan-attempt:second"
    assert len(made) == 2 and all(len(cb.history) == 2 for cb in made)  # a fresh callback per fit
    # same seed, same data: the two attempts train identical weights into different runs
    for a, b in zip(first.model.net.parameters(), second.model.net.parameters(), strict=True):
        assert torch.equal(a, b)
    best = second.run.best()
    assert second.metrics["epoch"] == best.epoch_idx and second.value == best.selection.value
    assert second.metrics["val/loss"] == best.val_edp.loss
    with pytest.raises(FileExistsError):
        plan.fit(attempt="second")


# -- search ---------------------------------------------------------------------------------------


def test_six_trial_digits_search_prunes_and_its_best_value_is_the_best_checkpoints(tmp_path):
    import optuna

    plan = digits_plan(tmp_path, epochs=4, metrics=(NLL,))
    space = SearchSpace(
        FloatParam("train.optim.max_lr", 1e-5, 3e-2, log=True),
        CategoricalParam("net.hidden_dims", [(16,), (32,), (64, 32)]),
    )
    result = search(plan, space, budget=SearchBudget(trials=6), monitor=nnx.MonitorSpec(metric="nll"), seed=0,
                    pruner=optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=1))
    assert result.stop_reason == "budget" and result.asked == 6 and len(result.outcomes) == 6
    counts = result.counts()
    assert counts["pruned"] >= 1 and counts["completed"] >= 1 and sum(counts.values()) == 6
    assert len({o.run_id for o in result.outcomes}) == 6  # every trial is its own run
    for outcome in result.outcomes:
        run = nnx.NNRun.load(outcome.run_id, tmp_path)
        assert run.config["salt"] == f"plan-attempt:{outcome.attempt_id}"
        if outcome.state == "pruned":  # stopped right after the epoch the pruner saw; that epoch committed
            assert max(run.epochs) == outcome.pruned_at_epoch
            assert outcome.reason == "pruned" and outcome.observations[-1][0] == outcome.pruned_at_epoch
    best = result.best
    assert best.state == "completed" and best.reason == "completed" and best.monitor_value == best.value
    assert best.value == min(o.value for o in result.outcomes if o.state == "completed")
    assert result.study.best_value == best.value and result.study.best_trial.number == best.number
    run = nnx.NNRun.load(best.run_id, tmp_path)
    checkpoint = run.checkpoint("best")
    assert best.value == run.best().selection.value == checkpoint.manifest.meta["selection"]["value"]
    assert best.best_epoch == checkpoint.epoch
    assert best.value == min(idp.selection.value for idp in run.epochs.values())  # nll: lower is better
    assert best.value == run.epochs[checkpoint.epoch].val_edp.metrics["nll"]
    restored = nnx.NNModel.from_checkpoint(best.run_id, "best", root=tmp_path)  # the winner reloads
    assert restored.evaluate(digits_loaders()[1], metrics=(NLL,)).metrics["nll"] == pytest.approx(best.value, rel=1e-5)


def test_update_cap_stops_a_trial_at_an_update_boundary(tmp_path):
    plan = digits_plan(tmp_path, epochs=5)
    result = search(plan, SearchSpace(IntParam("seed", 0, 3)), budget=SearchBudget(trials=1, updates_per_trial=14))
    (outcome,) = result.outcomes
    run = nnx.NNRun.load(outcome.run_id, tmp_path)
    assert sorted(run.epochs) == [0, 1]  # 6 updates per epoch: the stop in epoch 2 keeps epochs 0-1
    assert nnx.NNCheckpoint.resume_point(run.id, root=tmp_path)["committed_updates"] == 12


def test_stop_reasons_exhausted_and_deadline_and_failed_trials_count(tmp_path):
    import optuna

    plan = digits_plan(tmp_path, epochs=1)
    grid = optuna.samplers.GridSampler({"seed": [0, 1]})
    exhausted = search(plan, SearchSpace(CategoricalParam("seed", [0, 1])), budget=SearchBudget(trials=5), sampler=grid)
    assert exhausted.stop_reason == "exhausted" and exhausted.asked == 2
    assert sorted(o.params["seed"] for o in exhausted.outcomes) == [0, 1]

    late = search(plan, SearchSpace(IntParam("seed", 0, 9)), budget=SearchBudget(trials=3, deadline_seconds=1e-9))
    assert late.stop_reason == "deadline" and late.asked == 0 and late.best is None

    def apply(p, values):
        if values["train.n_epochs"] == 2:
            raise ValueError("not this one")
        return p.with_epochs(values["train.n_epochs"])

    with pytest.raises(ValueError, match="not this one"):  # a configuration error stops the search, as in NNx
        search(plan, SearchSpace(CategoricalParam("train.n_epochs", [2])), apply=apply, budget=SearchBudget(trials=2))

    def apply(p, values):  # noqa: F811  # a fit that raises fails its trial; the search goes on
        if values["train.n_epochs"] == 2:
            return p.with_data(lambda: [(torch.zeros(2, 3), torch.zeros(2, dtype=torch.long))])
        return p.with_epochs(values["train.n_epochs"])

    mixed = search(plan, SearchSpace(CategoricalParam("train.n_epochs", [1, 2])), apply=apply,
                   budget=SearchBudget(trials=2), sampler=optuna.samplers.GridSampler({"train.n_epochs": [1, 2]}))
    assert sorted(o.state for o in mixed.outcomes) == ["completed", "failed"]
    failed = next(o for o in mixed.outcomes if o.state == "failed")
    assert failed.reason.startswith("error:") and failed.error and mixed.asked == 2 and mixed.best.params == {"train.n_epochs": 1}


def test_a_search_refuses_borrowed_callbacks_before_any_trial(tmp_path):
    import optuna

    # a callback instance keeps its state from one trial into the next: NNx 0.4.1 refuses it too
    plan = digits_plan(tmp_path, epochs=1)
    space = SearchSpace(IntParam("seed", 0, 3))
    with pytest.raises(nnx.ParamsError, match="search.plan.callbacks.*fresh callbacks"):
        search(plan.with_callbacks(nnx.EarlyStopping(patience=1)), space, budget=SearchBudget(trials=2))
    assert not (tmp_path / "runs").exists()
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    with pytest.raises(nnx.ParamsError, match="fresh callbacks"):  # apply adding one: a configuration error
        search(plan, space, apply=lambda p, v: p.with_callbacks(nnx.EarlyStopping(patience=1)),
               budget=SearchBudget(trials=3), storage=storage, study_name="borrowed")
    (trial,) = optuna.load_study(study_name="borrowed", storage=storage).trials
    assert trial.state.name == "FAIL" and trial.user_attrs["reason"] == "config_error:ParamsError"
    made = search(plan.with_callback_factories(lambda: nnx.EarlyStopping(patience=1)), space,
                  budget=SearchBudget(trials=1))
    assert [o.state for o in made.outcomes] == ["completed"]


def test_search_maximizes_a_max_metric_and_names_its_extra(tmp_path, monkeypatch):
    import sys

    plan = digits_plan(tmp_path, epochs=2)
    result = search(plan, SearchSpace(FloatParam("train.optim.max_lr", 1e-3, 1e-2, log=True)),
                    budget=SearchBudget(trials=2), monitor=nnx.MonitorSpec(metric="accuracy"))
    assert result.direction == "maximize" and result.study.direction.name == "MAXIMIZE"
    assert result.best.value == max(o.value for o in result.outcomes if o.state == "completed")
    assert all(math.isfinite(o.value) for o in result.outcomes)
    monkeypatch.setitem(sys.modules, "optuna", None)
    with pytest.raises(ImportError, match=r'pip install "nnx\[search\]"'):
        search(plan, SearchSpace(IntParam("seed", 0, 1)), budget=SearchBudget(trials=1))


def test_docs_plans_search_snippets_run(tmp_path, monkeypatch):
    ns = run_doc("plans-search.md", tmp_path, monkeypatch)
    assert ns["result"].best is not None


def test_search_digits_example_runs(tmp_path, monkeypatch, capsys):
    import runpy
    import sys

    from tests.api.ecosystem_helpers import ROOT

    monkeypatch.setattr(sys, "argv", ["search_digits.py", "--root", str(tmp_path), "--trials", "2", "--epochs", "2"])
    result = runpy.run_path(str(ROOT / "examples" / "search_digits.py"), run_name="example")["main"]()
    assert result.asked == 2 and result.best is not None
    assert f"run {result.best.run_id}" in capsys.readouterr().out
