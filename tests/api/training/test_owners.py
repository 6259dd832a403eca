"""Update owners (``nnx_api.training.owners``): one per run, chosen by ``owner_for``, each joining
its work through a sync its group makes — so no owner asks which group it is in. In one process
(``nnx_api.training.group.SingleProcess``) every sync is a do-nothing stand-in, never None. Under
fp16 a ``GradScaler`` scales every backward and the optimizers step through it; a step the scaler
skips is no committed update.

Oracles: the syncs the group made (by identity) and what a do-nothing join returns (its input);
fp32 training bit for bit (scaling by a power of two is exact); a plain ``GradScaler`` step.
"""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from nnx_core.records import EvaluationDataPoint
from nnx_adapters.pytorch.optim import TorchOptimizer
from nnx_adapters.pytorch.scaling import ScaledTorchOptimizer
import nnx_api as nnx
from nnx_api.training import owners
from nnx_api.training.builtin_step import DefaultStep, LocalSync
from nnx_api.training.group import LocalCustomSync, LocalObjectiveSync, SingleProcess
from nnx_api.training.roles import NNMODEL, TRAINER

from tests.api.tiny import batches, tiny_data


def model_for(seed=0, precision=None):
    torch.manual_seed(seed)
    return nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(8,)), nnx.NNModelParams(precision=precision))


def sgd(accumulate=1, lr=0.5):
    return nnx.NNOptimParams(name=nnx.Optims.SGD, max_lr=lr, momentum=0.0, accumulate_grad_batches=accumulate)


def same_weights(a, b):
    return all(torch.equal(p, q) for p, q in zip(a.net.parameters(), b.net.parameters(), strict=True))


# ---------------------------------------------------------------------------- the group's syncs
class OneProcess(SingleProcess):
    """``SingleProcess``, noting every sync it makes."""

    def __init__(self):
        super().__init__()
        self.made = []

    def _made(self, sync):
        self.made.append(sync)
        return sync

    def step_sync(self):
        return self._made(super().step_sync())

    def custom_sync(self):
        return self._made(super().custom_sync())

    def objective_sync(self):
        return self._made(super().objective_sync())


def owned(how, group):
    """The owner ``owner_for`` chooses for ``how``, in ``group``."""
    model = model_for()
    names = ["encoder", "head"] if how == "Trainer step" else ["default"]
    optimizers = {n: TorchOptimizer(torch.optim.SGD(model.net.parameters(), lr=0.1)) for n in names}
    chosen = {
        "default step": {},
        "custom step": {"step_fn": nnx.default_train_step},
        "Trainer step": {"step_fn": lambda ctx: EvaluationDataPoint(loss=0.0)},
        "objective": {"objective": nnx.supervised_objective()},
    }[how]
    return owners.owner_for(
        model=model, optimizers=optimizers, optim_params={n: sgd() for n in names}, primary=names[0],
        kind=TRAINER if how == "Trainer step" else NNMODEL, group=group, **chosen,
    ).owner


def does_nothing(sync):
    """A one-process join: nothing agreed, weighed or gathered; what it is given comes back."""
    assert sync is not None and sync.overflow is None  # a GradScaler decides its overflow alone
    failure = RuntimeError("this rank's failure")
    if isinstance(sync, LocalSync):
        net, part = nn.Linear(1, 1), SimpleNamespace(count=3)
        assert isinstance(sync.microbatch(True), contextlib.nullcontext) and sync.bind(None, net) is net
        assert sync.agree(None, part, None, None, 0, 0) == 3 and sync.weight(5.0) == 5.0
    elif isinstance(sync, LocalCustomSync):
        record = EvaluationDataPoint(loss=1.0)
        assert sync.weigh(3.0) is None and sync.begin("here") is None and sync.end(record, None) is record
        with pytest.raises(RuntimeError, match="this rank's failure"):
            sync.end(None, failure)
    else:
        assert isinstance(sync, LocalObjectiveSync)
        readings, record = [object()], EvaluationDataPoint(loss=1.0)
        assert sync.readings(readings, record, None, "here") == (readings, record)
        with pytest.raises(RuntimeError, match="this rank's failure"):
            sync.readings(None, None, failure, "here")


@pytest.mark.parametrize(("how", "owner_type", "sync_type"), [
    ("default step", DefaultStep, LocalSync),
    ("custom step", owners.CustomStep, LocalCustomSync),
    ("Trainer step", owners.TrainerStep, LocalCustomSync),
    ("objective", owners.ObjectiveStep, LocalObjectiveSync),
])
def test_in_one_process_every_owner_joins_through_a_do_nothing_sync_its_group_made(how, owner_type, sync_type):
    group = OneProcess()
    owner = owned(how, group)
    assert type(owner) is owner_type
    assert type(owner.sync) is sync_type and any(owner.sync is made for made in group.made)  # the group's, not its own
    does_nothing(owner.sync)
    if how == "custom step":  # the built-in step its default_train_step runs joins through the group's too
        assert isinstance(owner.builtin.sync, LocalSync) and any(owner.builtin.sync is made for made in group.made)
        does_nothing(owner.builtin.sync)


# ---------------------------------------------------------------------------- fp16
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


@pytest.mark.parametrize("objective", [None, "supervised"])
def test_fp16_loss_scaling_plumbing_gives_the_fp32_updates(runs, monkeypatch, objective):
    """No GPU here: the fp16 paths run with a CPU GradScaler and autocast off. Scaling by a power
    of two is exact, so scaled backward → unscale → normalise → step must equal fp32 bit for bit."""
    scalers = []
    monkeypatch.setattr(owners, "make_grad_scaler", lambda device: scalers.append(torch.amp.GradScaler("cpu")) or scalers[-1])
    x, y = tiny_data(n=40)
    params = nnx.NNTrainParams(n_epochs=2, optim=sgd(accumulate=2), train_loader=batches(x, y, 9))
    obj = nnx.supervised_objective() if objective else None
    full = model_for()
    full.train(params, objective=obj, root=runs / "fp32")
    scaled = model_for()
    scaled.precision = "fp16"
    scaled.autocast_context = lambda: contextlib.nullcontext
    run = scaled.train(params, objective=obj, root=runs / "fp16")
    assert len(scalers) == 1 and scalers[0].get_scale() == 65536.0  # no overflow, no growth yet
    assert same_weights(full, scaled)
    assert "scaler" in run.checkpoint("last").payload()["optimizer"]


# ---------------------------------------------------------------------------- objectives
def test_objective_must_return_an_objective_result(runs):
    x, y = tiny_data()
    with pytest.raises(nnx.TrainingInputError, match="ObjectiveResult.*train_step_fn"):
        model_for().train(
            nnx.NNTrainParams(n_epochs=1, train_loader=batches(x, y, 16)), objective=lambda ctx: 1.0, root=runs
        )


# ---------------------------------------------------------------------------- precision around steps
def _seen_precision(seen):
    """What the code NNx calls sees: whether CPU autocast is on, its dtype, a Linear's output dtype."""
    probe = nn.Linear(2, 2)
    seen.append((torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu"), probe(torch.ones(1, 2)).dtype))


def _recording_step(seen):
    def step(ctx):
        _seen_precision(seen)
        return nnx.default_train_step(ctx)
    return step


def _recording_objective(seen):
    inner = nnx.supervised_objective()

    def objective(ctx):
        _seen_precision(seen)
        return inner(ctx)
    return objective


@pytest.mark.parametrize("owner", ["train_step_fn", "objective", "trainer_step_fn", "trainer_objective"])
@pytest.mark.parametrize("precision, expected", [("bf16", (True, torch.bfloat16, torch.bfloat16)), (None, None)])
def test_the_precision_policy_applies_around_custom_steps_and_objectives(runs, owner, precision, expected):
    """The run's autocast (``model.autocast_context()``) is on around a step function and an
    objective, as around the built-in forward, and metadata.yaml's ``effective`` is what ran; an
    fp32 run runs them with no autocast (a Linear's output stays float32)."""
    seen = []
    x, y = tiny_data(n=32)
    policy = nnx.PrecisionPolicy(precision) if precision else None
    loader = batches(x, y, 16)
    if owner.startswith("trainer"):
        torch.manual_seed(0)
        model = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(8,)), nnx.NNModelParams(precision=policy))
        params = nnx.NNTrainerParams(n_epochs=1, optims={"default": sgd()}, train_loader=loader)
        if owner == "trainer_objective":
            run = nnx.Trainer(model).train(params, objective=_recording_objective(seen), root=runs)
        else:
            def trainer_step(ctx):
                _seen_precision(seen)
                opt = ctx.optimizers["default"]
                opt.zero_grad()
                xb, yb = ctx.batch
                loss = torch.nn.functional.cross_entropy(ctx.model.net(xb).float(), yb)
                loss.backward()
                opt.step()
                ctx.report_update("default")
                return EvaluationDataPoint(loss=loss.item())
            run = nnx.Trainer(model).train(params, trainer_step_fn=trainer_step, root=runs)
    else:
        model = model_for(precision=policy)
        params = nnx.NNTrainParams(n_epochs=1, optim=sgd(), train_loader=loader)
        if owner == "objective":
            run = model.train(params, objective=_recording_objective(seen), root=runs)
        else:
            run = model.train(params, train_step_fn=_recording_step(seen), root=runs)
    assert len(seen) == 2
    if expected is None:
        assert all(not on and out == torch.float32 for on, _dtype, out in seen)
    else:
        assert all(s == expected for s in seen)
    meta = nnx.NNRun.load(run.id, runs).precision
    assert meta.effective == (precision or "fp32")


def test_an_fp16_custom_step_runs_under_autocast_with_the_scaler(runs, monkeypatch):
    """fp16 (CUDA-only; here a CPU GradScaler and CPU float16 autocast stand in): the step runs
    under the run's autocast and gets the run's GradScaler as ``ctx.scaler``; the optimizer steps
    through it, so a scaled backward still gives finite, trained weights."""
    scalers, seen = [], []
    monkeypatch.setattr(owners, "make_grad_scaler", lambda device: scalers.append(torch.amp.GradScaler("cpu")) or scalers[-1])
    x, y = tiny_data(n=32)
    model = model_for()
    model.precision = "fp16"
    model.autocast_context = lambda: (lambda: torch.autocast("cpu", dtype=torch.float16))
    before = [p.detach().clone() for p in model.net.parameters()]

    def step(ctx):
        seen.append((torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu"), ctx.scaler))
        xb, yb = ctx.batch
        ctx.optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(ctx.model.net(xb).float(), yb)
        ctx.scaler.scale(loss).backward()
        ctx.scaler.step(ctx.optimizer)
        ctx.scaler.update()
        ctx.report_update()
        return EvaluationDataPoint(loss=loss.item())

    model.train(nnx.NNTrainParams(n_epochs=1, optim=sgd(), train_loader=batches(x, y, 16)), train_step_fn=step, root=runs)
    assert [s[:2] for s in seen] == [(True, torch.float16)] * 2 and all(s[2] is scalers[0] for s in seen)
    after = list(model.net.parameters())
    assert all(torch.isfinite(p).all() for p in after) and not all(torch.equal(a, b) for a, b in zip(before, after, strict=True))


def test_a_kd_teacher_keeps_its_own_precision_under_the_students_autocast(runs):
    """The objective runs under the student's bf16 autocast; a module teacher still runs in fp32,
    an NNModel teacher in its own policy (as before objectives were called under autocast)."""
    x, y = tiny_data(n=32)
    seen = {}
    torch.manual_seed(1)
    module_teacher = nn.Linear(4, 3)
    model_teacher = model_for(seed=2, precision=nnx.PrecisionPolicy("bf16"))
    for name, teacher in (("module", module_teacher), ("model", model_teacher.net)):
        teacher.register_forward_hook(lambda _m, _i, out, name=name: seen.setdefault(name, out.dtype) and None)
    params = nnx.NNTrainParams(n_epochs=1, optim=sgd(), train_loader=batches(x, y, 16))
    model_for(precision=nnx.PrecisionPolicy("bf16")).train(params, objective=nnx.kd_objective(module_teacher), root=runs / "a")
    model_for(precision=nnx.PrecisionPolicy("bf16")).train(params, objective=nnx.kd_objective(model_teacher), root=runs / "b")
    assert seen == {"module": torch.float32, "model": torch.bfloat16}


# -- an accumulation window nobody stepped at an epoch's end --------------------------------------


def _accumulating(tmp_path, *, trailing: str):
    """Steps every 3 batches of 4 (16 rows, batch 4); ``trailing``: what the last batch does."""
    x, y = tiny_data()

    def step(ctx):
        xb, yb = ctx.batch
        loss = torch.nn.functional.cross_entropy(ctx.model.net(xb), yb)
        loss.backward()
        if (ctx.batch_idx + 1) % 3 == 0 or (ctx.is_last_batch and trailing == "step"):
            ctx.optimizer.step()
            ctx.optimizer.zero_grad()
            ctx.report_update()
        elif ctx.is_last_batch and trailing == "drop":
            ctx.optimizer.zero_grad()
        return nnx.EvaluationDataPoint(loss=loss.item())

    model = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3))
    params = nnx.NNTrainParams(n_epochs=2, train_loader=batches(x[:16], y[:16], 4), progress=False)
    return model.train(params, train_step_fn=step, root=tmp_path)


def test_gradients_left_by_a_window_nobody_stepped_are_said_once(tmp_path):
    with pytest.warns(RuntimeWarning, match=r"epoch 0 ended \(batch 3\) without optimizer.step\(\) .* left in .grad") as caught:
        _accumulating(tmp_path, trailing="forgotten")
    assert len([w for w in caught if "left in .grad" in str(w.message)]) == 1


@pytest.mark.parametrize("trailing", ["step", "drop"])
def test_a_trailing_window_stepped_or_dropped_on_purpose_is_not_warned_of(tmp_path, recwarn, trailing):
    _accumulating(tmp_path, trailing=trailing)
    assert not [w for w in recwarn if "left in .grad" in str(w.message)]
