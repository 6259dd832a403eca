"""NNModel training end to end: exact normalisation, persistence, refusals that write nothing."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import nnx_api as nnx

from tests.api.tiny import batches, sgd_step_tolerance, tiny_data
from tests.numerics import across_orders


def model_for(seed=0, classes=3, ignore_index=None, hidden=(8,)):
    torch.manual_seed(seed)
    task = nnx.TaskSpec.categorical(ignore_index=ignore_index) if ignore_index is not None else None
    return nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=classes, hidden_dims=hidden), nnx.NNModelParams(task=task))


def sgd(accumulate=1, lr=0.5):
    return nnx.NNOptimParams(name=nnx.Optims.SGD, max_lr=lr, momentum=0.0, accumulate_grad_batches=accumulate)


def test_accumulating_unequal_masked_batches_equals_one_batch_of_their_union(runs):
    x, y = tiny_data(n=23)
    y[[1, 5, 6, 17]] = -100  # ignored targets, unevenly spread
    sizes = [3, 9, 4, 7]
    cuts = torch.tensor(sizes).cumsum(0).tolist()
    parts = [(x[a:b], y[a:b]) for a, b in zip([0, *cuts[:-1]], cuts, strict=True)]
    accumulated, union = model_for(ignore_index=-100), model_for(ignore_index=-100)
    assert all(torch.equal(a, b) for a, b in zip(accumulated.net.parameters(), union.net.parameters(), strict=True))
    valid = int((y != -100).sum())

    def share(net, i):  # row i's cross-entropy over the window's valid count (0 if ignored)
        return F.cross_entropy(net(x[i : i + 1].double()), y[i : i + 1], ignore_index=-100, reduction="sum") / valid

    tol = sgd_step_tolerance(union.net, share, x, lr=0.5)
    before = [p.detach().clone() for p in union.net.parameters()]
    accumulated.train(nnx.NNTrainParams(n_epochs=1, optim=sgd(accumulate=4), train_loader=parts), root=runs)
    union.train(nnx.NNTrainParams(n_epochs=1, optim=sgd(accumulate=1), train_loader=[(x, y)]), root=runs)
    moved = max(float((p.detach() - b).abs().max()) for p, b in zip(union.net.parameters(), before, strict=True))
    assert moved > 100 * tol  # a mis-weighted microbatch would show far above the rounding
    for a, b in zip(accumulated.net.parameters(), union.net.parameters(), strict=True):
        torch.testing.assert_close(a, b, atol=tol, rtol=0)


def test_run_folder_layout_and_reload(runs):
    x, y = tiny_data()
    params = nnx.NNTrainParams(n_epochs=3, train_loader=batches(x, y, 16), val_loader=batches(x, y, 24), seed=1)
    run = model_for().train(params, root=runs)
    assert sorted(p.name for p in run.path.iterdir()) == [
        "attempt.json", "checkpoints", "idps.csv", "metadata.yaml", "run.yaml"]
    loaded = nnx.NNRun.load(run.id, root=runs)
    assert loaded == run
    assert loaded.idps == run.idps and len(loaded.idps) == 9
    last = loaded.idps[-1]
    assert last.val_edp is not None and last.val_edp.accuracy is not None and last.selection is not None
    assert all(idp.val_edp is None for idp in loaded.idps if idp.batch_idx != 2)
    assert {"last", "best", "first"} <= set(loaded.tags())
    restored = nnx.NNModel.from_checkpoint(run.id, "last", root=runs)
    x_probe = torch.randn(5, 4)
    assert np.array_equal(restored.predict(x_probe).logits, run_model_logits(params, runs, run.id, x_probe))


def run_model_logits(params, runs, run_id, x):
    return nnx.NNModel.from_checkpoint(run_id, root=runs).predict(x).logits


def test_nnrun_save_load_round_trip(runs):
    x, y = tiny_data()
    run = model_for().train(nnx.NNTrainParams(n_epochs=2, train_loader=batches(x, y, 16)), root=runs)
    run.save()  # rewriting its files keeps everything readable and equal
    assert nnx.NNRun.load(run.id, runs) == run
    assert nnx.NNRun.load(run.id, runs).idps == run.idps
    assert [r.id for r in nnx.NNRun.all(runs)] == [run.id]


def test_custom_module_trains_and_reloads(runs):
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 3))

        def forward(self, x):
            return self.body(x)

    x, y = tiny_data()
    torch.manual_seed(0)
    model = nnx.NNModel(module=Net())
    run = model.train(nnx.NNTrainParams(n_epochs=2, train_loader=batches(x, y, 16)), root=runs)
    assert "module" in run.config and "net" not in run.config
    with pytest.raises(nnx.MissingModelFactoryError, match="module="):  # as NNx: no factory rebuilds it
        nnx.NNModel.from_checkpoint(run.id, root=runs)
    again = nnx.NNModel.from_checkpoint(run.id, root=runs, module=Net())
    assert np.array_equal(again.predict(x).logits, model.predict(x).logits)


def test_predict_proba_restores_modes_and_decodes():
    model = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(8,), dropout_prob=0.5))
    model.net.train()
    result = model.predict_proba(torch.randn(7, 4), nnx.ProbabilitySpec("categorical"))
    assert model.net.training and all(m.training for m in model.net.modules())
    np.testing.assert_allclose(result.probabilities.sum(-1), np.ones(7), rtol=1e-6)
    assert np.array_equal(result.decoded, result.logits.argmax(-1)) and result.sample_ids.tolist() == list(range(7))


def test_evaluate_uses_whole_pass_sums(runs):
    """Loss and accuracy over uneven batches are whole-pass sums over counts, never a mean of
    batch means. The oracle is computed batch by batch as evaluate does (same kernels: same
    argmax, same per-row losses); one 30-row batch agrees within float32 rounding."""
    x, y = tiny_data(n=30)
    model = model_for()
    loader = batches(x, y, 7)  # 7, 7, 7, 7, 2
    split = model.evaluate(loader)
    logits = [torch.from_numpy(model.predict(bx).logits) for bx, _ in loader]
    losses = torch.cat([F.cross_entropy(out, by, reduction="none") for out, (_, by) in zip(logits, loader, strict=True)]).double()
    hits = torch.cat([out.argmax(-1) == by for out, (_, by) in zip(logits, loader, strict=True)])
    tol = across_orders(30 + 16, float(losses.mean()))  # a 30-term sum over rows of a 4→8→3 net
    assert split.loss == pytest.approx(float(losses.mean()), abs=tol)
    assert split.accuracy == float(hits.double().mean())
    mean_of_means = float(torch.stack([chunk.mean() for chunk in losses.split(7)]).mean())
    assert abs(mean_of_means - float(losses.mean())) > 10 * tol  # the rule is visible on this split
    whole = model.evaluate([(x, y)])
    assert whole.loss == pytest.approx(split.loss, abs=tol)


# --------------------------------------------------------------------------- refusals write nothing
def nothing_written(runs):
    return not runs.exists() or [p.name for p in runs.iterdir() if not p.name.startswith(".")] == []


@pytest.mark.parametrize(
    "make_params, error",
    [
        (lambda x, y: nnx.NNTrainParams(n_epochs=1), nnx.TrainingInputError),
        (lambda x, y: nnx.NNTrainParams(n_epochs=1, train_loader=[]), nnx.TrainingInputError),
        (lambda x, y: nnx.NNTrainParams(n_epochs=1, train_loader=[(x, y.float())]), nnx.TrainingInputError),
        (lambda x, y: nnx.NNTrainParams(n_epochs=1, train_loader=[(x, y[:, None])]), nnx.TrainingInputError),
        (lambda x, y: nnx.NNTrainParams(n_epochs=1, train_loader=[(x, y.tolist())]), nnx.TrainingInputError),
        (lambda x, y: nnx.NNTrainParams(n_epochs=1, train_loader=[(x * float("nan"), y)]), nnx.NonFiniteLossError),
        (lambda x, y: nnx.NNTrainParams(n_epochs=1, train_loader=[x]), nnx.TrainingInputError),
        (lambda x, y: nnx.NNTrainParams(n_epochs=1, train_loader=[(x, y)], metrics=[nnx.MetricSpec(id="nope")]),
         nnx.ParamsError),
    ],
    ids=["no-loader", "empty-loader", "float-target", "target-shape", "list-target", "nan-loss", "no-target",
         "unknown-metric"],
)
def test_bad_input_gets_a_typed_error_and_writes_nothing(runs, make_params, error):
    x, y = tiny_data(n=8)
    model = model_for()
    before = copy.deepcopy(model.net.state_dict())
    with pytest.raises(error):
        model.train(make_params(x, y), root=runs)
    assert nothing_written(runs)
    assert all(torch.equal(before[k], v) for k, v in model.net.state_dict().items())  # NaN: no parameter changed


def test_empty_loader_without_len_is_refused_and_writes_nothing(runs):
    class NoLen:
        def __iter__(self):
            return iter(())

    with pytest.raises(nnx.TrainingInputError, match="no batches"):
        model_for().train(nnx.NNTrainParams(n_epochs=1, train_loader=NoLen()), root=runs)
    assert nothing_written(runs)


def test_existing_run_is_refused_unless_overwrite_or_salt(runs):
    x, y = tiny_data()
    params = nnx.NNTrainParams(n_epochs=1, train_loader=batches(x, y, 16))
    first = model_for().train(params, root=runs)
    with pytest.raises(nnx.RunExistsError, match="overwrite_existing"):
        model_for().train(params, root=runs)
    assert nnx.NNRun.load(first.id, runs) == first  # untouched
    salted = model_for().train(params, salt="again", root=runs)
    assert salted.id != first.id
    again = model_for().train(params.replace(overwrite_existing=True), root=runs)
    assert again.id == first.id


def test_a_first_attempt_killed_before_its_first_commit_can_simply_be_retried(runs):
    x, y = tiny_data()
    params = nnx.NNTrainParams(n_epochs=2, train_loader=batches(x, y, 16), progress=False)

    class Kill(nnx.Callback):  # a KeyboardInterrupt leaves the folder as a hard kill would
        def on_epoch_end(self, ctx):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        model_for().train(params, callbacks=[Kill()], root=runs)
    (left,) = [p for p in runs.iterdir() if not p.name.startswith(".")]
    assert (left / "run.yaml").exists() and not (left / "checkpoints" / "last.json").exists()
    run = model_for().train(params, root=runs)  # same command again: no RunExistsError
    assert run.id == left.name and run.checkpoint("last").epoch == 1


def test_failure_after_a_commit_keeps_committed_epochs(runs):
    x, y = tiny_data(n=8)

    class Boom(nnx.Callback):
        def on_epoch_begin(self, ctx):
            if ctx.epoch == 2:
                raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        model_for().train(nnx.NNTrainParams(n_epochs=4, train_loader=[(x, y)]), callbacks=[Boom()], root=runs)
    (run,) = nnx.NNRun.all(runs)
    assert [idp.epoch_idx for idp in run.idps] == [0, 1]
    assert run.checkpoint("last").epoch == 1
    import json

    attempt = json.loads((run.path / "attempt.json").read_text())
    assert attempt["status"] == "failed" and attempt["last_committed_epoch"] == 1 and "boom" in attempt["error"]
    assert attempt["number"] == 1 and attempt["earlier"] == []

    # the same call again, continued: attempt 2, listing attempt 1 as it ended
    resumed = model_for().train(nnx.NNTrainParams(n_epochs=4, train_loader=[(x, y)], resume="auto"), root=runs)
    attempt = json.loads((resumed.path / "attempt.json").read_text())
    assert attempt["status"] == "completed" and attempt["number"] == 2 and attempt["last_committed_epoch"] == 3
    assert [(e["number"], e["status"], e["last_committed_epoch"]) for e in attempt["earlier"]] == [(1, "failed", 1)]


def test_custom_step_and_eval_step(runs):
    x, y = tiny_data()
    seen = []

    def step(ctx):
        out = nnx.default_train_step(ctx)
        seen.append(ctx.batch_idx)
        return out

    def evaluate(ctx):
        return nnx.EvaluationDataPoint(loss=1.0, extra={"custom": 2.0})

    run = model_for().train(
        nnx.NNTrainParams(n_epochs=2, train_loader=batches(x, y, 16), val_loader=[(x, y)]),
        train_step_fn=step, eval_step_fn=evaluate, root=runs,
    )
    assert seen == [0, 1, 2, 0, 1, 2]
    assert run.idps[-1].val_edp.extra["custom"] == 2.0
    assert run.checkpoint("last").payload()["update_count"] == 6


def test_param_groups_get_their_own_lr_and_decay(runs):
    x, y = tiny_data()
    seen = {}

    class Groups(nnx.Callback):
        def on_train_begin(self, ctx):
            seen["groups"] = [(len(g["params"]), g["lr"], g["weight_decay"]) for g in ctx.optimizer.param_groups]

    optim = nnx.NNOptimParams(max_lr=0.01, weight_decay=1e-4, param_groups=[
        nnx.NNParamGroupSpec(name_pattern="layers.0.*", lr_multiplier=0.1, weight_decay=0.0),
        nnx.NNParamGroupSpec(name_pattern="*.bias", lr=0.5),
    ])
    model_for().train(nnx.NNTrainParams(n_epochs=1, optim=optim, train_loader=batches(x, y, 16)),
                      callbacks=[Groups()], root=runs)
    # first layer (weight, bias) at lr 0.001 without decay; the last bias at 0.5; the last weight default
    assert seen["groups"] == [(2, pytest.approx(0.001), 0.0), (1, 0.5, 1e-4), (1, 0.01, 1e-4)]
