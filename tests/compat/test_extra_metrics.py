"""``extra_metrics={name: fn(y_true, y_pred)}`` as NNx documents them (REFERENCE §3.5, §3.6, §4,
§8.1, §9.1): called with NumPy arrays, truth first and decoded predictions second, ignored targets
removed; once on the whole concatenated pass in validation and ``evaluate`` (never a mean of
batch values), once per batch in the default training step; values land in the records' ``extra``
as floats; never part of the run id; visible to every step context as ``ctx.extra_metrics``."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import nnx_api as nnx

from tests.api.tiny import batches, tiny_data

IGNORE = -100


def model_for(seed=0, classes=3, task=None, loss=nnx.Losses.CROSS_ENTROPY, out=None):
    torch.manual_seed(seed)
    params = nnx.NNModelParams(task=task, loss=loss)
    return nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=out or classes, hidden_dims=(8,)), params)


def sgd(lr=0.1, accumulate=1):
    return nnx.NNOptimParams(name=nnx.Optims.SGD, max_lr=lr, momentum=0.0, accumulate_grad_batches=accumulate)


def masked_data(n=30, seed=0):
    x, y = tiny_data(n=n, seed=seed)
    y[[1, 4, 5, 11, 20]] = IGNORE
    return x, y


def by_hand(model, x, y):
    """The oracle: decoded predictions of the whole set, ignored targets removed, as NumPy."""
    with torch.no_grad():
        pred = model.net(x).argmax(-1)
    keep = y != IGNORE
    return y[keep].numpy(), pred[keep].numpy()


def weighted_hits(y_true, y_pred):
    """Order-sensitive: it tells a concatenation from a mean of batch values and from a reorder."""
    return float(np.sum((y_true == y_pred) * np.arange(1, len(y_true) + 1)))


# ------------------------------------------------------------------------------------ evaluate
def test_evaluate_calls_each_function_once_on_every_valid_target_and_decoded_prediction():
    model = model_for(task=nnx.TaskSpec.categorical(ignore_index=IGNORE))
    x, y = masked_data()
    seen = []

    def spy(y_true, y_pred):
        seen.append((type(y_true), type(y_pred), y_true.copy(), y_pred.copy()))
        return np.float32(len(y_true))  # a NumPy scalar: stored as a float

    edp = model.evaluate(batches(x, y, 7), extra_metrics={"rows": spy, "hits": weighted_hits})
    truth, pred = by_hand(model, x, y)
    assert len(seen) == 1  # once for the whole pass
    assert seen[0][:2] == (np.ndarray, np.ndarray)
    np.testing.assert_array_equal(seen[0][2], truth)  # truth first, ignored targets removed
    np.testing.assert_array_equal(seen[0][3], pred)  # decoded predictions second
    assert edp.extra == {"hits": weighted_hits(truth, pred), "rows": 25.0}
    assert type(edp.extra["rows"]) is float
    whole = model.evaluate([(x, y)], extra_metrics={"hits": weighted_hits})
    assert whole.extra == {"hits": edp.extra["hits"]}  # uneven batches: the same as one batch
    assert model.evaluate([(x, y)]).extra == {}  # none asked, none computed


def test_evaluate_decodes_like_the_task_for_regression_and_multilabel():
    torch.manual_seed(0)
    x = torch.randn(12, 4)
    reg = model_for(task=nnx.TaskSpec.regression(), loss=nnx.Losses.MEAN_SQUARED_ERROR, out=2)
    target = torch.randn(12, 2)
    got = {}
    reg.evaluate([(x, target)], extra_metrics={"mae": lambda t, p: got.setdefault("reg", (t, p)) and 0.0})
    with torch.no_grad():
        np.testing.assert_allclose(got["reg"][1], reg.net(x).numpy(), rtol=0, atol=0)  # the outputs themselves
    np.testing.assert_array_equal(got["reg"][0], target.numpy())
    multi = model_for(task=nnx.TaskSpec.multilabel(threshold=0.5), loss=nnx.Losses.BINARY_CROSS_ENTROPY, out=3)
    labels = (torch.rand(12, 3) > 0.5).float()
    edp = multi.evaluate([(x, labels)], extra_metrics={"ones": lambda t, p: float(p.sum())})
    with torch.no_grad():
        expected = float((torch.sigmoid(multi.net(x)) >= 0.5).sum())  # thresholded 0/1 labels
    assert edp.extra == {"ones": expected}


def test_a_failing_function_is_named_and_keeps_its_error_as_the_cause():
    """NNx 0.4.1 raises the function's own error unnamed; here it is an ``ExtraMetricError`` (a
    ``ValueError``) naming the metric, the function's error its ``__cause__`` (docs/nnx-compat.md)."""
    model = model_for()
    x, y = tiny_data(n=8)

    def broken(y_true, y_pred):
        raise ZeroDivisionError("boom")

    with pytest.raises(nnx.ExtraMetricError, match=r"extra_metrics\['broken'\] raised ZeroDivisionError: boom") as err:
        model.evaluate([(x, y)], extra_metrics={"broken": broken})
    assert isinstance(err.value.__cause__, ZeroDivisionError)
    with pytest.raises(nnx.ParamsError, match="extra_metrics"):
        model.evaluate([(x, y)], extra_metrics={"bad": 3})


# ------------------------------------------------------------------------------------ training
class EvaluateAtEpochEnd(nnx.Callback):
    """The oracle for in-fit validation: ``evaluate`` on the same weights, at the same moment."""

    def __init__(self, loader, fns):
        self.loader, self.fns, self.seen = loader, fns, []

    def on_epoch_end(self, ctx):
        self.seen.append((ctx.idp.val_edp.extra, ctx.model.evaluate(self.loader, extra_metrics=self.fns).extra))


def test_validation_records_carry_the_extra_metrics_of_the_whole_validation_pass(runs):
    x, y = masked_data(n=36)
    fns = {"hits": weighted_hits, "n": lambda t, p: len(t)}
    val = batches(x, y, 5)
    oracle = EvaluateAtEpochEnd(val, fns)
    params = nnx.NNTrainParams(n_epochs=3, optim=sgd(), train_loader=batches(x, y, 12), val_loader=val, extra_metrics=fns)
    run = model_for(task=nnx.TaskSpec.categorical(ignore_index=IGNORE)).train(params, callbacks=[oracle], root=runs)
    assert len(oracle.seen) == 3
    for recorded, expected in oracle.seen:
        assert recorded == expected and recorded["n"] == 31.0
    assert [run.epochs[e].val_edp.extra for e in range(3)] == [r for r, _ in oracle.seen]
    loaded = nnx.NNRun.load(run.id, runs)  # the history on disk keeps them
    assert [loaded.epochs[e].val_edp.extra for e in range(3)] == [r for r, _ in oracle.seen]


def test_the_default_step_scores_each_batch_on_its_own_valid_targets(runs):
    x, y = masked_data(n=30)
    fns = {"n": lambda t, p: len(t), "total": lambda t, p: float(t.sum()), "shape": lambda t, p: float(p.shape == t.shape)}
    params = nnx.NNTrainParams(n_epochs=2, optim=sgd(accumulate=2), train_loader=batches(x, y, 8), extra_metrics=fns)
    run = model_for(task=nnx.TaskSpec.categorical(ignore_index=IGNORE)).train(params, root=runs)
    for idp in run.idps:
        _, yb = batches(x, y, 8)[idp.batch_idx]
        valid = yb[yb != IGNORE]
        assert idp.train_edp.extra == {"n": float(len(valid)), "total": float(valid.sum()), "shape": 1.0}


def test_per_batch_predictions_are_the_batch_outputs_before_its_update(runs):
    """With a learning rate far too small to move any argmax, each batch's decoded predictions are
    the initial model's: the per-batch extra equals that model's accuracy on the batch."""
    x, y = tiny_data(n=24)
    model = model_for()
    with torch.no_grad():
        initial = model.net(x).argmax(-1)
    params = nnx.NNTrainParams(n_epochs=1, optim=sgd(lr=1e-12), train_loader=batches(x, y, 8),
                               extra_metrics={"hits": lambda t, p: float((t == p).sum())})
    run = model.train(params, root=runs)
    assert [i.train_edp.extra["hits"] for i in run.idps] == [
        float((initial[b : b + 8] == y[b : b + 8]).sum()) for b in (0, 8, 16)
    ]


def test_extra_metrics_are_never_part_of_the_run_id(runs):
    x, y = tiny_data(n=16)
    plain = nnx.NNTrainParams(n_epochs=1, train_loader=[(x, y)], val_loader=[(x, y)])
    first = model_for().train(plain, root=runs)
    with_extras = plain.replace(extra_metrics={"n": lambda t, p: len(t)}, overwrite_existing=True)
    second = model_for().train(with_extras, root=runs)
    assert first.id == second.id and second.idps[-1].val_edp.extra == {"n": 16.0}
    assert "extra_metrics" not in str(second.config)


# ------------------------------------------------------------------------------------ contexts
def test_every_step_context_carries_the_runs_extra_metrics(runs):
    x, y = tiny_data(n=16)
    fns = {"n": lambda t, p: len(t)}
    seen = {}

    def train_step(ctx):
        seen["train"] = ctx.extra_metrics
        return nnx.default_train_step(ctx)  # the default step computes them on the batch

    def eval_step(ctx):
        seen["eval"] = ctx.extra_metrics
        return ctx.model.evaluate(ctx.val_loader, extra_metrics=ctx.extra_metrics)

    params = nnx.NNTrainParams(n_epochs=1, optim=sgd(), train_loader=batches(x, y, 8), val_loader=[(x, y)], extra_metrics=fns)
    run = model_for().train(params, train_step_fn=train_step, eval_step_fn=eval_step, root=runs)
    assert dict(seen["train"]) == fns and dict(seen["eval"]) == fns
    assert [i.train_edp.extra for i in run.idps] == [{"n": 8.0}, {"n": 8.0}]
    assert run.idps[-1].val_edp.extra == {"n": 16.0}

    def objective(ctx):
        seen["objective"] = ctx.extra_metrics
        return nnx.supervised_objective()(ctx)

    model_for().train(params.replace(overwrite_existing=True), objective=objective, root=runs)
    assert dict(seen["objective"]) == fns


def test_a_trainer_step_sees_them_and_trainer_validation_records_them(runs):
    x, y = tiny_data(n=16)
    seen = []

    def step(ctx):
        seen.append(ctx.extra_metrics)
        return nnx.EvaluationDataPoint(loss=nnx.finalize_step(
            torch.nn.functional.cross_entropy(ctx.model.net(ctx.batch[0]), ctx.batch[1]), ctx, paradigm="plain",
            optimizer="main",
        ))

    params = nnx.NNTrainerParams(
        n_epochs=1, optims={"main": sgd()}, train_loader=batches(x, y, 8), val_loader=[(x, y)],
        extra_metrics={"n": lambda t, p: len(t)},
    )
    run = nnx.Trainer(model_for()).train(params, trainer_step_fn=step, root=runs)
    assert len(seen) == 2 and all(dict(s) == {"n": params.extra_metrics["n"]} for s in seen)
    assert run.idps[-1].val_edp.extra == {"n": 16.0}
