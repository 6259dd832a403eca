"""What a step function sees and the step utilities it calls (``nnx_api.training.steps``): a step
context carries its run inside its ``report_update`` (a ``StepLink``), so ``dataclasses.replace``
keeps the run and a hand-built context still works; ``finalize_step`` refuses what it cannot do
(accumulation, reduced precision, a non-finite loss) before any parameter changes, and reports
each update it commits, once.

Oracles: the run's own counters and learning rates (an update-clock schedule halving every second
update), and the weights and gradients before the refused step.
"""

from __future__ import annotations

import dataclasses
import warnings

import pytest
import torch
import torch.nn.functional as F

import nnx_api as nnx

from tests.api.tiny import batches, tiny_data, two_part_model


def model_for(seed=0, precision=None):
    torch.manual_seed(seed)
    return nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(8,)), nnx.NNModelParams(precision=precision))


def sgd(accumulate=1, lr=0.5):
    return nnx.NNOptimParams(name=nnx.Optims.SGD, max_lr=lr, momentum=0.0, accumulate_grad_batches=accumulate)


# ---------------------------------------------------------------------------- step contexts
def test_replace_keeps_a_runs_context_tied_to_the_run(runs):
    """A step may hand default_train_step a replaced context: the run still counts its update."""
    x, y = tiny_data(n=24)
    seen = []

    def step(ctx):
        seen.append((ctx.session is not None, ctx.scheduler is not None, callable(ctx.weigh)))
        return nnx.default_train_step(dataclasses.replace(ctx, extra_metrics=None))

    run = model_for().train(nnx.NNTrainParams(n_epochs=1, train_loader=batches(x, y, 8)), train_step_fn=step, root=runs)
    assert seen == [(True, True, True)] * 3
    assert run.checkpoint("last").payload()["update_count"] == 3


def test_a_trainer_step_context_carries_the_window_facts_and_builds_by_hand(runs):
    model = model_for()
    opt = torch.optim.SGD(model.net.parameters(), lr=0.1)
    x, y = tiny_data(n=4)
    ctx = nnx.TrainerStepContext(model=model, batch=(x, y), optimizers={"a": opt}, schedulers={}, extra_metrics=None,
                                 batch_idx=0, epoch_idx=0)
    assert (ctx.is_last_batch, ctx.precision, dict(ctx.grad_clip_norms), dict(ctx.accumulate_grad_batches)) == (
        False, None, {"a": None}, {"a": 1})
    opt.zero_grad()
    loss = F.cross_entropy(model.net(x), y)
    assert nnx.finalize_step(loss, ctx, paradigm="probe", optimizer="a") == pytest.approx(float(loss))
    seen = []

    def step(ctx):
        seen.append((ctx.is_last_batch, ctx.precision, sorted(ctx.grad_clip_norms), ctx.session is not None))
        ctx.optimizers["encoder"].zero_grad()
        ctx.optimizers["head"].zero_grad()
        loss = F.cross_entropy(ctx.model.net(ctx.batch[0]), ctx.batch[1])
        return nnx.EvaluationDataPoint(loss=nnx.finalize_step(loss, ctx, paradigm="probe", optimizer="encoder"))

    optims = {n: nnx.NNOptimParams(max_lr=1e-2, param_groups=[nnx.NNParamGroupSpec(name_pattern=f"{n}.*")])
              for n in ("encoder", "head")}
    xs, ys = tiny_data(n=16)
    nnx.Trainer(two_part_model()).train(nnx.NNTrainerParams(n_epochs=1, optims=optims, train_loader=batches(xs, ys, 8)),
                                        trainer_step_fn=step, root=runs)
    assert seen == [(False, "fp32", ["encoder", "head"], True), (True, "fp32", ["encoder", "head"], True)]


# ---------------------------------------------------------------------------- finalize_step
def mixup_step(ctx):
    """A paradigm step ending in finalize_step (it reports the update itself)."""
    x, y = ctx.batch
    ctx.optimizer.zero_grad()
    lam = 0.7
    mixed = lam * x + (1 - lam) * x.flip(0)
    logits = ctx.model.net(mixed)
    loss = lam * F.cross_entropy(logits, y) + (1 - lam) * F.cross_entropy(logits, y.flip(0))
    return nnx.EvaluationDataPoint(loss=nnx.finalize_step(loss, ctx, paradigm="mixup"))


def test_finalize_step_reports_each_update_on_the_update_clock(runs):
    x, y = tiny_data()
    sched = nnx.NNSchedulerParams(kind=nnx.Schedulers.STEP, step_size=2, factor=0.5, clock="optimizer_update")
    lrs = nnx.LRMonitor()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        run = model_for().train(
            nnx.NNTrainParams(n_epochs=2, optim=sgd(lr=0.4), scheduler=sched, train_loader=batches(x, y, 16)),
            train_step_fn=mixup_step, callbacks=[lrs], root=runs,
        )
    assert run.checkpoint("last").payload()["update_count"] == 6 and run.idps[-1].update_count is None  # a step fn's run (NNx)
    assert lrs.update_history == [(1, 0.4), (2, 0.2), (3, 0.2), (4, 0.1), (5, 0.1), (6, 0.05)]


def test_finalize_step_refusals(runs):
    x, y = tiny_data()
    loader = batches(x, y, 16)
    with pytest.raises(nnx.ParamsError, match="mixup.*cannot accumulate"):
        model_for().train(nnx.NNTrainParams(n_epochs=1, optim=sgd(accumulate=2), train_loader=loader),
                          train_step_fn=mixup_step, root=runs)
    assert nnx.NNRun.all(runs) == []

    bf16 = model_for(precision=nnx.PrecisionPolicy(mode="bf16"))
    with pytest.raises(nnx.PrecisionUnsupportedError, match="mixup.*full-precision only"):
        bf16.train(nnx.NNTrainParams(n_epochs=1, train_loader=loader), train_step_fn=mixup_step, root=runs)

    def diverged(ctx):
        ctx.optimizer.zero_grad()
        loss = ctx.model.net(ctx.batch[0]).sum() * float("inf")
        return nnx.EvaluationDataPoint(loss=nnx.finalize_step(loss, ctx, paradigm="probe"))

    model = model_for()
    before = [p.detach().clone() for p in model.net.parameters()]
    with pytest.raises(nnx.NonFiniteLossError, match="probe"):
        model.train(nnx.NNTrainParams(n_epochs=1, train_loader=loader), train_step_fn=diverged, root=runs)
    assert all(torch.equal(a, b) for a, b in zip(before, model.net.parameters(), strict=True))
    assert all(p.grad is None for p in model.net.parameters())  # the check ran before backward
