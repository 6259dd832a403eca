"""``ExperimentPlan`` as NNx documents it (REFERENCE §11): the empty constructor, every ``with_*``
branch returning a new plan, ``validate()`` as a ``PlanValidation``, the plan's seed overriding
the training params' own, ``with_data(train, val, identity=)`` keeping what is not given,
``resuming(run_id, checkpoint=, mode=, epochs=)``, and ``fit()`` passing the borrowed step
functions, objective, components and extra metrics to ``NNModel.train``."""

from __future__ import annotations

import pytest
import torch

import nnx_api as nnx
from nnx_api.plans import ExperimentPlan, PlanError, PlanValidation, SplitMetrics

from tests.api.tiny import batches, tiny_data

NET = nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(8,))


def data(n=16):
    x, y = tiny_data(n=n)
    return batches(x, y, 8), [(x, y)]


def base(tmp_path, epochs=1):
    train, val = data()
    optim = nnx.NNOptimParams(name=nnx.Optims.SGD, max_lr=0.1, momentum=0.0)
    return (ExperimentPlan().with_net(NET).with_model(nnx.NNModelParams())
            .with_train(nnx.NNTrainParams(n_epochs=epochs, optim=optim)).with_data(train, val).with_root(tmp_path))


def test_the_empty_plan_reports_what_it_still_needs():
    validation = ExperimentPlan().validate()
    assert isinstance(validation, PlanValidation) and not validation.ok
    assert validation.paths == ("train", "net", "data.train") and validation.diagnostics == tuple(validation)
    with pytest.raises(PlanError) as err:
        validation.raise_for_errors()
    assert isinstance(err.value, ValueError) and isinstance(err.value, TypeError)
    with pytest.raises(PlanError, match="with_train"):
        ExperimentPlan().with_epochs(3)  # nothing to edit yet


def test_with_methods_branch_and_never_change_the_source(tmp_path):
    plan = base(tmp_path)
    nll = nnx.MetricSpec("nll")
    fn = lambda t, p: 0.0  # noqa: E731
    branch = (plan.with_epochs(4).with_metrics([nll], monitor=nnx.MonitorSpec("nll")).with_extra_metrics({"zero": fn})
              .with_seed(7).with_step_fns(eval_step_fn=None).with_components().with_callbacks(nnx.LRMonitor()))
    assert plan.train.n_epochs == 1 and plan.train.metrics == () and plan.train.extra_metrics is None
    assert branch.train.n_epochs == 4 and branch.train.metrics == (nll,) and branch.train.monitor.metric == "nll"
    assert dict(branch.train.extra_metrics) == {"zero": fn} and branch.seed == 7 and plan.seed is None
    assert plan.with_metrics(nll).train.metrics == (nll,)  # specs given one by one read the same
    assert branch.with_metrics(monitor=None).train.monitor is None and branch.with_metrics(monitor=None).train.metrics == branch.train.metrics
    assert plan.validate().ok and branch.validate().ok


def test_with_data_keeps_what_is_not_given_and_identity_becomes_the_data_id(tmp_path):
    plan = base(tmp_path)
    train, _ = data()
    other_val = [tiny_data(n=8, seed=5)]
    changed = plan.with_data(val=other_val)
    assert changed.data.train is plan.data.train and changed.data.val is other_val
    assert plan.with_data(val=None).train_params().val_loader is None  # train-only: no validation invented
    named = plan.with_data(identity="digits-v2")
    assert named.train_params().data_id == "digits-v2" and plan.train_params().data_id is None
    from_params = (ExperimentPlan().with_net(NET).with_train(nnx.NNTrainParams(n_epochs=1, train_loader=train)))
    assert from_params.validate().ok and from_params.train_params().train_loader is train


def test_the_plans_seed_overrides_the_training_params_seed(tmp_path):
    plan = base(tmp_path).with_train(n_epochs=1, seed=3)
    assert plan.train_params().seed == 3  # no plan seed: the params' own
    assert plan.with_seed(9).train_params().seed == 9
    assert plan.with_seed(9).with_seed(None).train_params().seed == 3


def test_fit_passes_steps_objective_components_and_extra_metrics(tmp_path):
    calls = {"train": 0, "eval": 0, "objective": 0}

    def train_step(ctx):
        calls["train"] += 1
        return nnx.default_train_step(ctx)

    def eval_step(ctx):
        calls["eval"] += 1
        return ctx.model.evaluate(ctx.val_loader, extra_metrics=ctx.extra_metrics)

    class Counter:
        def __init__(self):
            self.saved = 0

        def component_spec(self):
            return ("test.counter", 1)

        def component_state(self):
            self.saved += 1
            return {"saved": self.saved}

        def load_component_state(self, state, *, version=None):
            self.saved = state["saved"]

    counter = Counter()
    plan = base(tmp_path, epochs=2).with_extra_metrics({"n": lambda t, p: len(t)})
    result = plan.with_step_fns(train_step, eval_step).with_components(counter).fit(attempt="steps")
    assert calls == {"train": 4, "eval": 2, "objective": 0}
    assert result.run.epochs[1].val_edp.extra == {"n": 16.0} and result.run.idps[0].train_edp.extra == {"n": 8.0}
    assert result.run.checkpoint("last").payload()["components"]["test.counter"]["saved"] >= 1

    def objective(ctx):
        calls["objective"] += 1
        return nnx.supervised_objective()(ctx)

    fitted = base(tmp_path).with_objective(objective).fit(attempt="objective")
    assert calls["objective"] == 2 and fitted.run.idps[-1].update_count == 2
    both = base(tmp_path).with_step_fns(train_step_fn=train_step).with_objective(objective)
    assert "objective" in both.validate().paths


def test_resuming_warm_starts_a_new_run_from_the_source(tmp_path):
    source = base(tmp_path, epochs=2).fit(attempt="source")
    plan = base(tmp_path).resuming(source.run.id, checkpoint=nnx.Checkpoints.LAST, mode="weights_only")
    assert plan.with_resuming(source.run.id).resume.mode is None  # the same method, under NNx's other name
    resumed = plan.fit(attempt="warm")
    assert resumed.run.id != source.run.id and resumed.run.config["train"]["parent_run_id"] == source.run.id
    assert resumed.run.resume_status.mode == "weights_only" and list(resumed.run.epochs) == [2]
    assert plan.without_resume().resume is None
    assert base(tmp_path).resuming(source.run.id, epochs="planned").validate().ok  # NNx's resume_epochs
    assert base(tmp_path).resuming(source.run.id, epochs="sometimes").validate().paths == ("resume.epochs",)
    assert base(tmp_path).resuming("../escape").validate().paths == ("resume.run_id",)


def test_out_of_scope_provenance_is_refused_by_name(tmp_path):
    with pytest.raises(nnx.OutOfScopeError, match="out of scope"):
        base(tmp_path).with_provenance(object())


def test_probe_reports_nnx_fields():
    x, y = tiny_data(n=5)
    result = ExperimentPlan().with_net(NET).probe((x, y))
    assert result.output_shape == (5, 3) and result.output_dtype == "float32" and result.target_shape == (5,)
    expected = sum(p.numel() for p in nnx.NNModel(NET, nnx.NNModelParams()).net.parameters())
    assert result.n_parameters == result.n_trainable == expected
    assert torch.isfinite(torch.tensor(result.loss))


def test_fit_metrics_hold_a_train_and_a_val_split_as_nnx_gives_them(tmp_path):
    """NNx 0.4.1 (the wheel): ``fit().metrics["val"]`` is a ``SplitMetrics(split, available,
    epoch, source, values, reason)``; the flat scalars stay beside them."""
    fitted = base(tmp_path, epochs=2).fit(attempt="splits")
    val, train = fitted.metrics["val"], fitted.metrics["train"]
    assert isinstance(val, SplitMetrics) and val.split == "val" and val.available and val.source == "epoch"
    final = fitted.run.epochs[max(fitted.run.epochs)]  # the splits describe the final epoch, as NNx's do
    assert val.epoch == final.epoch_idx and val.values["loss"] == final.val_edp.loss
    assert set(val.values) >= {"loss", "error", "accuracy"} and val.reason is None
    assert train.split == "train" and train.available and train.values["loss"] > 0
    blind = base(tmp_path / "no-val", epochs=1).with_data(data()[0], None).fit(attempt="no-val")
    assert not blind.metrics["val"].available and blind.metrics["val"].reason == "the plan has no validation data"
