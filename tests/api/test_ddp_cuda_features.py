"""fp16 and batch normalization under ``DDP()``: what is decided in Python, on a machine without a GPU.

Both are admitted on CUDA only: fp16's ``GradScaler`` needs CUDA (as in one process), and torch's
``SyncBatchNorm``, which gives batch norm the statistics of the union of the ranks' batches, runs
on CUDA only. These tests fake the CUDA device where the decision is made; the real multi-process
fp16 runs are in ``tests/integration/test_ddp.py`` (the CUDA gate faked on the CPU), the real GPU
run in ``tests/gpu/test_gpu_ddp.py``.
"""

from __future__ import annotations

import types

import pytest
import torch
from torch import nn

from nnx_adapters.pytorch.scaling import AgreedGradScaler, make_grad_scaler
import nnx_api as nnx
from nnx_api.distributed import group as ddp_group
from nnx_api.distributed.group import DataParallel, RankSync, scope_problems
from nnx_api.model import module_signature

CUDA = torch.device("cuda", 0)
NCCL = types.SimpleNamespace(backend="nccl", world_size=2, rank=0)
GLOO = types.SimpleNamespace(backend="gloo", world_size=2, rank=0)


def entry(model: nnx.NNModel, *, step_fn=None, named=False) -> types.SimpleNamespace:
    train = nnx.NNTrainParams(n_epochs=1, train_loader=[(torch.zeros(2, 4), torch.zeros(2, dtype=torch.long))], progress=False)
    kind = types.SimpleNamespace(named_optimizers=named)
    return types.SimpleNamespace(model=model, train=train, objective=None, history=None, callbacks=(), step_fn=step_fn,
                                 kind=kind)


def bn_model(device: torch.device = CUDA) -> nnx.NNModel:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), nn.Tanh(), nn.Sequential(nn.Linear(6, 6), nn.BatchNorm1d(6)),
                        nn.Linear(6, 3))
    model = nnx.NNModel(params=nnx.NNModelParams(task=nnx.TaskSpec.categorical(3)), module=net)
    model.device = device  # built on the CPU; the decisions read the device
    return model


def precision_model(mode: str, device: torch.device) -> types.SimpleNamespace:
    return types.SimpleNamespace(params=types.SimpleNamespace(precision=nnx.PrecisionPolicy(mode=mode)), precision=mode,
                                 net=nn.Linear(2, 2), device=device)


# ------------------------------------------------------------------------------- fp16
def test_fp16_is_admitted_under_ddp_on_cuda_only():
    """On CUDA (nccl) fp16 passes the scope check like bf16; on the CPU it stays refused for the
    reason one process refuses it (a GradScaler needs CUDA), even with a fallback."""
    assert not any("fp16" in p for p in scope_problems(entry(precision_model("fp16", CUDA)), NCCL))
    assert not any("bf16" in p for p in scope_problems(entry(precision_model("bf16", CUDA)), NCCL))
    cpu = scope_problems(entry(precision_model("fp16", torch.device("cpu"))), GLOO)
    assert any("fp16 needs CUDA (it uses a GradScaler)" in p and "bf16" in p for p in cpu), cpu


def test_fp16_with_a_trainer_step_is_refused_under_ddp_its_own_scaler_would_decide_per_rank():
    problems = scope_problems(entry(precision_model("fp16", CUDA), step_fn=lambda ctx: None, named=True), NCCL)
    assert any("trainer_step_fn" in p and "each rank alone" in p for p in problems), problems
    assert not any("fp16" in p for p in scope_problems(entry(precision_model("fp16", CUDA), step_fn=lambda ctx: None), NCCL))


def scaled_step(scaler: torch.amp.GradScaler, grad: float) -> tuple[nn.Linear, torch.optim.Optimizer]:
    layer = nn.Linear(2, 1)
    opt = torch.optim.SGD(layer.parameters(), lr=0.1)
    scaler.scale(layer(torch.ones(1, 2)).sum()).backward()
    layer.weight.grad.fill_(grad)
    return layer, opt


@pytest.mark.parametrize(("local", "group"), [(1.0, True), (float("inf"), True), (1.0, False)])
def test_an_agreed_scaler_skips_or_steps_as_the_group_decides(local, group):
    """The scaler's found-inf flag is the group's answer to this rank's: a rank whose own gradients
    are finite skips (and backs off) when another rank overflowed; it steps when none did."""
    asked: list[bool] = []

    def agree(found: bool) -> bool:
        asked.append(found)
        return group

    scaler = make_grad_scaler(torch.device("cpu"), agree)
    assert isinstance(scaler, AgreedGradScaler)
    layer, opt = scaled_step(scaler, local)
    before = layer.weight.detach().clone()
    scaler.step(opt)
    scaler.update()
    assert asked == [local != 1.0]  # this rank's own finding, once per unscale_
    assert torch.equal(layer.weight, before) is group  # skipped exactly when the group overflowed
    assert scaler.get_scale() == (2.0**15 if group else 2.0**16)


def test_without_a_group_the_scaler_is_torchs_own():
    assert type(make_grad_scaler(torch.device("cpu"))) is torch.amp.GradScaler


# ------------------------------------------------------------------------------- batch normalization
def test_batch_norm_is_refused_under_ddp_off_cuda_saying_why_and_what_to_do():
    problems = scope_problems(entry(bn_model(torch.device("cpu"))), GLOO)
    message = next(p for p in problems if "batch normalization" in p)
    assert "BatchNorm1d" in message and "SyncBatchNorm" in message and "CUDA only" in message
    assert "LayerNorm or GroupNorm" in message and "nccl" in message
    assert not any("batch norm" in p for p in scope_problems(entry(bn_model()), NCCL))


def test_a_net_that_is_one_batch_norm_is_refused_on_cuda_it_cannot_be_converted_in_place():
    model = nnx.NNModel(params=nnx.NNModelParams(task=nnx.TaskSpec.categorical(3)), module=nn.BatchNorm1d(3))
    model.device = CUDA
    assert any("is itself a batch normalization" in p for p in scope_problems(entry(model), NCCL))


def test_on_cuda_batch_norm_becomes_sync_batch_norm_before_ddp_wraps_the_net_and_comes_back(monkeypatch):
    """The check converts every batch norm (nested ones too) in place, before DDP sees the net;
    the SyncBatchNorms hold the same tensors, so the state-dict keys, the run identity and the
    optimizer's parameters are unchanged and a checkpoint loads into the plain net; closing the
    group puts the original modules back, holding what training left in the buffers."""
    model = bn_model()
    net = model.net
    keys, signature = list(net.state_dict()), module_signature(net)
    params = list(net.parameters())
    originals = [m for m in net.modules() if isinstance(m, nn.BatchNorm1d)]
    group = DataParallel(NCCL, 0)
    group.check(entry(model))
    synced = [m for m in net.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    assert len(synced) == 2 and all(type(m) is nn.SyncBatchNorm for m in synced)
    assert list(net.state_dict()) == keys and module_signature(net) == signature
    assert [p for p in net.parameters()] == params  # the same Parameter objects: the optimizer is unchanged
    wrapped: list[list[type]] = []

    class FakeDDP:
        def __init__(self, module: nn.Module, **options) -> None:
            wrapped.append([type(m) for m in module.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)])

        def register_comm_hook(self, state: object, hook: object) -> None:
            pass

    monkeypatch.setattr(ddp_group, "DistributedDataParallel", FakeDDP)
    sync = RankSync(NCCL)
    sync.bind(types.SimpleNamespace(device=CUDA, model=model, optimizers={"default": object()}, primary="default"), net)
    assert not sync.fusable and sync.seeds  # SyncBatchNorm's forwards hold collectives: agreed before each backward
    assert wrapped == [[nn.SyncBatchNorm, nn.SyncBatchNorm]]  # converted before DDP wrapped it
    plain = bn_model().net
    plain.load_state_dict(net.state_dict())  # a checkpoint of the converted net: the original's keys
    synced[0].running_mean.add_(1.0)  # what a training forward would leave
    net.eval()
    group.close()
    assert [m for m in net.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)] == originals
    assert torch.equal(originals[0].running_mean, torch.ones(6)) and not originals[0].training
    assert group.norms == []


def test_off_cuda_nothing_is_converted():
    model = bn_model(torch.device("cpu"))
    group = DataParallel(types.SimpleNamespace(backend=None, world_size=2, rank=0), 0)
    with pytest.raises(nnx.ParamsError, match="batch normalization"):
        group.check(entry(model))
    assert not any(isinstance(m, nn.SyncBatchNorm) for m in model.net.modules())
