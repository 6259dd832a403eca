"""The training session (``nnx_api.training.session``): one session for every entry point, owning
the rest of the seed's order — each optimizer's epoch-clock schedule steps once per epoch (none
without auto-step), LAST is refreshed after finalization (``on_train_end``'s changes and their
transforms reach it), a stop at an update boundary (``ctx.stop_at_update``) leaves LAST at the
last committed epoch, from which a resume continues to the uninterrupted run's weights, an
``eval_step_fn`` runs with the net in eval mode (unless it says ``eval_mode = False``) and every
submodule gets its own mode back afterwards, and without a seed nothing is drawn from the global
random streams before the first epoch.

Everything is observed through the public API: the learning rates callbacks see, the records, the
LAST checkpoint, and a reference run trained without interruption.
"""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import nnx_api as nnx

from tests.api.tiny import batches, tiny_data, two_part_model

BASE_LR = 0.4


def sgd(pattern: str | None = None, lr: float = BASE_LR) -> nnx.NNOptimParams:
    groups = [nnx.NNParamGroupSpec(name_pattern=pattern)] if pattern else None
    return nnx.NNOptimParams(name=nnx.Optims.SGD, max_lr=lr, momentum=0.0, param_groups=groups)


def halving(clock: str = "epoch") -> nnx.NNSchedulerParams:
    return nnx.NNSchedulerParams(kind=nnx.Schedulers.STEP, step_size=1, factor=0.5, clock=clock)


def model_for(seed=0):
    torch.manual_seed(seed)
    return nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(8,)), nnx.NNModelParams())


def same_weights(a, b):
    return all(torch.equal(p, q) for p, q in zip(a.net.parameters(), b.net.parameters(), strict=True))


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


# ---------------------------------------------------------------------------- epoch clocks
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


# ---------------------------------------------------------------------------- the final LAST refresh
def test_last_is_refreshed_after_on_train_end_with_transforms(runs):
    """Seed §2: callback mutations in on_train_end and their transform metadata reach LAST."""
    x, y = tiny_data()

    class Prune(nnx.Callback):
        def on_train_end(self, ctx):
            with torch.no_grad():
                ctx.model.net.layers[0].bias.zero_()

        def checkpoint_transforms(self):
            return ({"name": "zero_first_bias", "version": 1},)

    model = model_for()
    run = model.train(nnx.NNTrainParams(n_epochs=2, train_loader=batches(x, y, 16)), callbacks=[Prune()], root=runs)
    last = run.checkpoint("last")
    payload = last.payload()
    assert last.epoch == 1
    assert torch.count_nonzero(payload["weights"]["layers.0.bias"]) == 0
    assert payload["transforms"] == [{"name": "zero_first_bias", "version": 1}]
    assert torch.equal(nnx.NNModel.from_checkpoint(run.id, root=runs).net.layers[0].bias, model.net.layers[0].bias)


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


# ---------------------------------------------------------------------------- stop_at_update
class StopAtUpdate(nnx.Callback):
    def __init__(self, n):
        self.n = n

    def on_train_begin(self, ctx):
        ctx.update_listeners.append(self._check)

    def _check(self, ctx):
        if ctx.update_count >= self.n:
            ctx.stop_at_update = True


@pytest.mark.parametrize("objective", [None, "supervised"])
def test_stop_at_update_keeps_last_at_the_last_committed_epoch_and_resume_continues(runs, objective):
    x, y = tiny_data(n=32)
    obj = nnx.supervised_objective() if objective else None
    params = nnx.NNTrainParams(
        n_epochs=4, optim=nnx.NNOptimParams(max_lr=1e-2), seed=3, train_loader=batches(x, y, 8),
        val_loader=[(x, y)], resume="auto",
    )
    reference = model_for()
    reference.train(params, objective=obj, root=runs / "reference")

    stopped_model = model_for()
    stopped = stopped_model.train(params, objective=obj, callbacks=[StopAtUpdate(10)], root=runs)
    assert stopped.checkpoint("last").epoch == 1  # update 10 is mid-epoch 2: that epoch never commits
    assert sorted({i.epoch_idx for i in nnx.NNRun.load(stopped.id, runs).idps}) == [0, 1]
    assert json.loads((stopped.path / "attempt.json").read_text())["status"] == "stopped"
    last_weights = stopped.checkpoint("last").weights()
    assert not all(torch.equal(last_weights[k], v) for k, v in stopped_model.net.state_dict().items())

    resumed_model = model_for()
    resumed = resumed_model.train(params, objective=obj, root=runs)
    assert resumed.id == stopped.id and resumed.resume_status["source_epoch"] == 1
    assert sorted({i.epoch_idx for i in resumed.idps}) == [0, 1, 2, 3]
    assert resumed.checkpoint("last").payload()["update_count"] == 16
    assert resumed.idps[-1].update_count == (16 if objective else None)  # counted on an objective run's records (NNx)
    assert same_weights(resumed_model, reference)


# ---------------------------------------------------------------------------- validation modes
class DropoutNet(nn.Module):
    """Dropout (p=0.5) to tell the modes apart, and a batch norm the user keeps in eval mode."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Dropout(p=0.5))
        self.norm = nn.BatchNorm1d(16)
        self.head = nn.Linear(16, 3)

    def forward(self, x):
        return self.head(self.norm(self.body(x)))


def modes(net):
    return {name or "net": m.training for name, m in net.named_modules()}


def validate_in_modes(runs, eval_mode):
    """Two epochs whose train step keeps the batch norm in eval mode (a user's frozen statistics);
    what the eval step saw, the modes after each validation (on_epoch_end) and after train()."""
    x, y = tiny_data(n=24)
    seen = {"train": [], "eval": [], "after": []}

    def frozen_norm_step(ctx):
        seen["train"].append((ctx.epoch_idx, ctx.model.net.training, ctx.model.net.body[2].training))
        ctx.model.net.norm.eval()
        return nnx.default_train_step(ctx)

    def probe_eval_step(ctx):
        net = ctx.model.net
        vx, vy = next(iter(ctx.val_loader))
        seen["eval"].append((net.training, net.body[2].training, torch.equal(net(vx), net(vx))))
        return nnx.EvaluationDataPoint(loss=float(F.cross_entropy(net(vx), vy)), count=len(vy))

    if eval_mode is not None:
        probe_eval_step.eval_mode = eval_mode

    class After(nnx.Callback):
        def on_epoch_end(self, ctx):
            seen["after"].append(modes(ctx.model.net))

    torch.manual_seed(0)
    model = nnx.NNModel(module=DropoutNet(), params=nnx.NNModelParams())
    params = nnx.NNTrainParams(n_epochs=2, train_loader=batches(x, y, 8), val_loader=[(x, y)])
    model.train(params, train_step_fn=frozen_norm_step, eval_step_fn=probe_eval_step, callbacks=[After()], root=runs)
    return seen, modes(model.net)


def test_eval_step_fn_runs_in_eval_mode_and_every_submodule_gets_its_mode_back(runs):
    """As Lightning, Keras and the HF Trainer validate (NNx 0.4.1: in train mode, dropout active)."""
    seen, final = validate_in_modes(runs, eval_mode=None)
    assert seen["eval"] == [(False, False, True)] * 2  # eval mode: no dropout, two forwards agree
    expected = {"net": True, "body": True, "body.0": True, "body.1": True, "body.2": True, "norm": False, "head": True}
    assert seen["after"] == [expected] * 2  # the user's eval-mode batch norm stays so; the rest trains
    assert final == expected
    assert [s for s in seen["train"] if s[0] == 1] == [(1, True, True)] * 3  # epoch 1 trains in train mode


def test_eval_step_fn_with_eval_mode_false_runs_in_the_modes_training_left(runs):
    seen, final = validate_in_modes(runs, eval_mode=False)
    assert seen["eval"] == [(True, True, False)] * 2  # dropout active: two forwards differ (Monte Carlo dropout)
    expected = {"net": True, "body": True, "body.0": True, "body.1": True, "body.2": True, "norm": False, "head": True}
    assert seen["after"] == [expected] * 2
    assert final == expected


# ---------------------------------------------------------------------------- nothing drawn before epoch 0
def streams():
    """The global torch, Python and NumPy random streams, comparable with ==."""
    kind, keys, pos, gauss, cached = np.random.get_state()
    return torch.get_rng_state().tolist(), random.getstate(), (kind, keys.tolist(), pos, gauss, cached)


@pytest.mark.parametrize("entry", ["NNModel", "Trainer"])
def test_without_a_seed_the_first_epoch_shuffles_as_a_plain_torch_loop(runs, entry):
    """seed=None: constructing the params and train() up to epoch 0 draw nothing from the global
    streams, so a shuffling DataLoader without a generator gives the plain loop's first epoch."""
    x, _ = tiny_data(n=24)
    rows = torch.arange(24)  # each target names its row
    loader = DataLoader(TensorDataset(x, rows), batch_size=6, shuffle=True)  # shuffles with torch's global stream
    val = DataLoader(TensorDataset(x, rows), batch_size=12)
    torch.manual_seed(0)
    model = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=24, hidden_dims=(8,)), nnx.NNModelParams())
    seen = []

    def recording_step(ctx):
        seen.append(ctx.batch[1].tolist())
        return nnx.default_train_step(ctx)

    def recording_trainer_step(ctx):
        seen.append(ctx.batch[1].tolist())
        ctx.optimizers["all"].zero_grad()
        inputs, target = ctx.batch
        loss = F.cross_entropy(ctx.model.net(inputs), target)
        return nnx.EvaluationDataPoint(loss=nnx.finalize_step(loss, ctx, paradigm="recording", optimizer="all"))

    class AtEpochZero(nnx.Callback):
        def on_epoch_begin(self, ctx):
            if ctx.epoch == 0:
                self.streams = streams()

    probe = AtEpochZero()
    torch.manual_seed(7)
    random.seed(7)
    np.random.seed(7)
    before = streams()
    if entry == "NNModel":
        params = nnx.NNTrainParams(n_epochs=1, seed=None, train_loader=loader, val_loader=val)
        model.train(params, train_step_fn=recording_step, callbacks=[probe], root=runs)
    else:
        params = nnx.NNTrainerParams(n_epochs=1, seed=None, optims={"all": sgd()}, train_loader=loader, val_loader=val)
        nnx.Trainer(model).train(params, trainer_step_fn=recording_trainer_step, callbacks=[probe], root=runs)
    torch.manual_seed(7)  # the outside oracle: the same loader in a plain torch loop
    assert seen == [target.tolist() for _, target in loader]
    assert probe.streams == before  # nothing drawn between the user's seed and the first epoch
