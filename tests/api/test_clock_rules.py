"""Scheduler clocks and LAST refresh rules that hold for every update owner (seed, Lifecycle order).

* A ``Trainer`` steps every optimizer's epoch-clock schedule once per epoch, not only the first
  optimizer's; ``auto_step_schedulers=False`` leaves every schedule to the step function; and it
  refreshes LAST after finalization, like ``NNModel``.
* An optimizer_update-clock schedule steps once per committed update: never for a skipped step
  (a non-finite window of an objective with ``nonfinite="skip"``; an fp16 overflow, which the
  scaled optimizer reports as not committed), and once per ``ctx.report_update()`` of an
  NNModel step function.

Everything is observed through the public API: the optimizers' learning rates as callbacks see
them, ``LRMonitor``, the records and the LAST checkpoint.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from nnx_adapters.pytorch.optim import TorchOptimizer
from nnx_adapters.pytorch.scaling import ScaledTorchOptimizer
import nnx_api as nnx

from tests.api.tiny import batches, tiny_data, two_part_model

BASE_LR = 0.4


def sgd(pattern: str | None = None, lr: float = BASE_LR) -> nnx.NNOptimParams:
    groups = [nnx.NNParamGroupSpec(name_pattern=pattern)] if pattern else None
    return nnx.NNOptimParams(name=nnx.Optims.SGD, max_lr=lr, momentum=0.0, param_groups=groups)


def halving(clock: str = "epoch") -> nnx.NNSchedulerParams:
    return nnx.NNSchedulerParams(kind=nnx.Schedulers.STEP, step_size=1, factor=0.5, clock=clock)


class EpochLRs(nnx.Callback):
    """Every optimizer's learning rate at each epoch end (after the epoch-clock step)."""

    def __init__(self):
        self.seen: list[dict[str, float]] = []

    def on_epoch_end(self, ctx):
        optimizers = ctx.optimizers or {"default": ctx.optimizer}
        self.seen.append({name: opt.param_groups[0]["lr"] for name, opt in optimizers.items()})


def trainer_run(runs, **kw):
    x, y = tiny_data(n=24)
    lrs = EpochLRs()
    params = nnx.NNTrainerParams(
        n_epochs=3, optims={"encoder": sgd("encoder.*"), "head": sgd("head.*")}, train_loader=batches(x, y, 8), **kw
    )
    model = two_part_model()
    run = nnx.Trainer(model).train(params, objective=nnx.supervised_objective(), callbacks=[lrs], root=runs)
    return model, run, lrs.seen


# ---------------------------------------------------------------------------------- Trainer
def test_trainer_steps_every_optimizers_epoch_clock_once_per_epoch(runs):
    _, _, seen = trainer_run(runs, schedulers={"encoder": halving(), "head": halving()})
    expected = [BASE_LR * 0.5 ** (epoch + 1) for epoch in range(3)]
    assert [lr["encoder"] for lr in seen] == pytest.approx(expected)
    assert [lr["head"] for lr in seen] == pytest.approx(expected)  # not only the first optimizer's


def test_trainer_without_auto_step_leaves_every_schedule_alone(runs):
    schedulers = {"encoder": halving(), "head": halving("optimizer_update")}
    _, run, seen = trainer_run(runs, schedulers=schedulers, auto_step_schedulers=False)
    assert run.checkpoint("last").payload()["update_count"] == 9 * 2  # 3 epochs × 3 updates × 2 optimizers did train
    assert seen == [{"encoder": BASE_LR, "head": BASE_LR}] * 3
    _, _, ticking = trainer_run(runs / "auto", schedulers=schedulers)  # the same run with auto-step: both move
    assert ticking[-1]["encoder"] < BASE_LR and ticking[-1]["head"] < BASE_LR


def test_trainer_refreshes_last_after_finalization(runs):
    class Prune(nnx.Callback):
        def on_train_end(self, ctx):
            with torch.no_grad():
                ctx.model.net.head.bias.zero_()

    x, y = tiny_data(n=24)
    params = nnx.NNTrainerParams(n_epochs=2, optims={"all": sgd()}, train_loader=batches(x, y, 8))
    model = two_part_model()
    run = nnx.Trainer(model).train(params, objective=nnx.supervised_objective(), callbacks=[Prune()], root=runs)
    last = run.checkpoint("last")
    assert last.epoch == 1
    assert torch.count_nonzero(last.payload()["weights"]["head.bias"]) == 0  # on_train_end's change is in LAST
    assert all(torch.equal(v, last.weights()[k]) for k, v in model.net.state_dict().items())


# ---------------------------------------------------------------------------------- update clock
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


def test_an_fp16_overflow_is_not_a_committed_step():
    """What the default step's scaled path counts on: a step the GradScaler skips for overflowing
    gradients is reported as not committed (so its update-clock schedule does not step). On the
    CPU scaler, the same GradScaler logic as CUDA's."""
    torch.manual_seed(0)
    net = nn.Linear(3, 2)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    opt = ScaledTorchOptimizer.wrap(TorchOptimizer(torch.optim.SGD(net.parameters(), lr=0.1)), scaler)
    before = [p.detach().clone() for p in net.parameters()]
    scaler.scale(net(torch.full((1, 3), float("inf"))).sum()).backward()
    assert opt.step() is False and scaler.get_scale() < 1024.0
    assert all(torch.equal(a, b) for a, b in zip(before, net.parameters(), strict=True))
    opt.zero_grad()
    scaler.scale(net(torch.ones(1, 3)).sum()).backward()
    assert opt.step() is True


def test_report_update_from_an_nnmodel_step_counts_on_the_update_clock(runs):
    """A train_step_fn that steps its optimizer itself and calls ctx.report_update() once."""
    x, y = tiny_data(n=24)
    lrm = nnx.LRMonitor()

    def step(ctx):
        bx, by = ctx.batch
        loss = nn.functional.cross_entropy(ctx.model.net(bx), by)
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
