"""What a training record says about its update: ``update_count`` and ``lr``, as NNx 0.4.1 writes them.

Oracles: REFERENCE §4.5 / §8.2 and NNx's recorded behaviour (bench/compat: s05, s16, s19): an
objective run writes the run's committed-update count after each microbatch on *every* record (0
before the first update: windows of 4 over 5 microbatches give ``[0, 0, 0, 1, 2]``); step-function
and default-step runs leave it None. A record's ``lr`` is the learning rate its update used
(REFERENCE §7.2: base 0.12, warm-up 3, total 8 → 0.04, 0.08, 0.12, 0.12).
"""

from __future__ import annotations

import csv

import pytest
import torch
import torch.nn.functional as F

import nnx_api as nnx

from tests.api.tiny import batches, tiny_data


def model_for(seed=0):
    torch.manual_seed(seed)
    return nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(8,)), nnx.NNModelParams())


def header(run):
    with open(run.path / "idps.csv", newline="") as f:
        return next(csv.reader(f))


def sgd(accumulate=1, lr=0.1):
    return nnx.NNOptimParams(name=nnx.Optims.SGD, max_lr=lr, momentum=0.0, accumulate_grad_batches=accumulate)


def test_an_objective_run_counts_committed_updates_on_every_record(runs):
    x, y = tiny_data(n=40)
    params = nnx.NNTrainParams(n_epochs=2, optim=sgd(accumulate=4), train_loader=batches(x, y, 8))  # 5 microbatches
    run = model_for().train(params, objective=nnx.supervised_objective(), root=runs)
    assert [i.update_count for i in run.idps] == [0, 0, 0, 1, 2, 2, 2, 2, 3, 4]  # the trailing window commits too
    assert run.checkpoint("last").payload()["update_count"] == 4
    # idps.csv holds the column and reads back as ints
    assert "update_count" in header(run)
    assert [i.update_count for i in nnx.NNRun.load(run.id, runs).idps] == [0, 0, 0, 1, 2, 2, 2, 2, 3, 4]


def test_step_function_and_default_step_runs_leave_update_count_none(runs):
    x, y = tiny_data(n=40)
    params = nnx.NNTrainParams(n_epochs=2, optim=sgd(accumulate=4), train_loader=batches(x, y, 8))

    def step(ctx):
        return nnx.default_train_step(ctx)

    seen = []

    class Count(nnx.Callback):
        def on_epoch_end(self, ctx):
            seen.append(ctx.update_count)  # the run still counts; only its records leave it out

    default = model_for().train(params, callbacks=[Count()], root=runs / "default")
    custom = model_for().train(params, train_step_fn=step, root=runs / "custom")
    for run in (default, custom):
        assert [i.update_count for i in run.idps] == [None] * 10
        assert run.checkpoint("last").payload()["update_count"] == 4
        assert "update_count" not in header(run)  # the layout without the column loads too
        assert all(i.update_count is None for i in nnx.NNRun.load(run.id, runs / run.path.parent.name).idps)
    assert seen == [2, 4]


def test_objective_counts_continue_exactly_across_a_stateful_resume(runs):
    x, y = tiny_data(n=32)
    params = nnx.NNTrainParams(n_epochs=4, optim=sgd(accumulate=3), seed=1, train_loader=batches(x, y, 8))
    reference_model = model_for()
    reference = reference_model.train(params, objective=nnx.supervised_objective(), root=runs / "reference")
    # 4 microbatches an epoch in windows of 3 + 1: counts after each microbatch
    assert [i.update_count for i in reference.idps] == [0, 0, 1, 2, 2, 2, 3, 4, 4, 4, 5, 6, 6, 6, 7, 8]
    first = model_for().train(params.replace(n_epochs=2), objective=nnx.supervised_objective(), root=runs)
    model = model_for()
    resumed = model.train(
        params.replace(n_epochs=2, resume_from_run_id=first.id, resume_mode="stateful"),
        objective=nnx.supervised_objective(), root=runs,
    )
    later = [(i.epoch_idx, i.batch_idx, i.update_count) for i in resumed.idps if i.epoch_idx >= 2]
    assert later == [(i.epoch_idx, i.batch_idx, i.update_count) for i in reference.idps if i.epoch_idx >= 2]
    assert resumed.checkpoint("last").payload()["update_count"] == 8
    for a, b in zip(model.net.parameters(), reference_model.net.parameters(), strict=True):
        assert torch.equal(a, b)  # bit-exact


def test_a_records_lr_is_the_lr_its_update_used_on_the_update_clock(runs):
    x, y = tiny_data(n=16)
    sched = nnx.NNSchedulerParams(
        kind=nnx.Schedulers.LINEAR_WARMUP_DECAY, warmup_steps=3, total_steps=8, clock="optimizer_update"
    )
    lrm = nnx.LRMonitor()
    run = model_for().train(
        nnx.NNTrainParams(n_epochs=2, optim=sgd(lr=0.12), scheduler=sched, train_loader=batches(x, y, 4)),
        callbacks=[lrm], root=runs,
    )
    assert [i.lr for i in run.idps] == pytest.approx([0.04, 0.08, 0.12, 0.12, 0.096, 0.072, 0.048, 0.024])
    # LRMonitor's update trace stays the LR after each update's scheduler step (REFERENCE §6.3)
    assert [lr for _, lr in lrm.update_history] == pytest.approx([0.08, 0.12, 0.12, 0.096, 0.072, 0.048, 0.024, 0.0])


def test_with_accumulation_every_microbatch_of_a_window_records_the_lr_of_its_update(runs):
    x, y = tiny_data(n=24)
    sched = nnx.NNSchedulerParams(kind=nnx.Schedulers.STEP, step_size=1, factor=0.5, clock="optimizer_update")
    run = model_for().train(
        nnx.NNTrainParams(n_epochs=1, optim=sgd(accumulate=2), scheduler=sched, train_loader=batches(x, y, 4)),
        root=runs,
    )
    assert [i.lr for i in run.idps] == pytest.approx([0.1, 0.1, 0.05, 0.05, 0.025, 0.025])


def test_a_custom_step_records_the_lr_before_its_reported_update(runs):
    x, y = tiny_data(n=24)
    sched = nnx.NNSchedulerParams(kind=nnx.Schedulers.STEP, step_size=1, factor=0.5, clock="optimizer_update")

    def step(ctx):
        ctx.optimizer.zero_grad()
        loss = F.cross_entropy(ctx.model.net(ctx.batch[0]), ctx.batch[1])
        loss.backward()
        ctx.optimizer.step()
        ctx.report_update()
        return nnx.EvaluationDataPoint(loss=float(loss.detach()))

    run = model_for().train(
        nnx.NNTrainParams(n_epochs=1, optim=sgd(), scheduler=sched, train_loader=batches(x, y, 8)),
        train_step_fn=step, root=runs,
    )
    assert [i.lr for i in run.idps] == pytest.approx([0.1, 0.05, 0.025])
