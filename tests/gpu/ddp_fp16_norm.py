"""fp16 and batch normalization under ``DDP()`` on CUDA: a world-size-1 nccl group on one GPU.

    python tests/gpu/ddp_fp16_norm.py          # sets RANK=0, WORLD_SIZE=1, ... itself

A BatchNorm net in ``PrecisionPolicy("fp16")`` trains through ``model.train(distributed=DDP())``:
its batch norms are SyncBatchNorm while it trains (converted before DDP wraps the net) and the
plain modules again afterwards, with the state-dict keys of the plain net; an overflow injected
into one batch's gradient skips that update alone and halves the loss scale (the scaler's
decision agreed over the group); a run crashed after epoch 1 resumes with ``resume="auto"`` to
the straight run's weights, loss scale and updates. One GPU cannot show statistics synchronised
over two ranks (SyncBatchNorm of one rank is batch norm); that two ranks skip alike is tested on
the CPU (tests/integration/test_ddp.py, the CUDA gate faked). Prints ``DDP fp16 + batch norm:
OK``; any failure raises. Without CUDA or NCCL it says so and exits 0.

``NNX_GPU_SCRIPT_ON_CPU=1`` runs the same checks on the CPU over gloo, with the CUDA gates faked
and SyncBatchNorm running as batch norm (exact at world size 1): it checks this script where
there is no GPU, nothing more.
"""

from __future__ import annotations

import math
import os
import socket
import sys
import tempfile
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import TensorDataset

import nnx_api as nnx

ON_CPU = os.environ.get("NNX_GPU_SCRIPT_ON_CPU") == "1"
POISONED = 3  # the 3rd training batch (epoch 0, batch 2) overflows
INIT_SCALE = 2.0**16


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fake_cuda_on_cpu() -> None:
    """Only for ``NNX_GPU_SCRIPT_ON_CPU=1``: admit fp16 and batch norm on the CPU."""
    from nnx_adapters.pytorch import devices
    from nnx_api.distributed import group as ddp_group

    ddp_group.FP16_DEVICES = ddp_group.SYNC_NORM_DEVICES = frozenset({"cuda", "cpu"})
    real = devices.precision_problem
    devices.precision_problem = lambda mode, device: None if mode == "fp16" else real(mode, device)
    nn.SyncBatchNorm.forward = nn.modules.batchnorm._BatchNorm.forward  # world size 1: the same numbers
    nn.parallel.DistributedDataParallel._passing_sync_batchnorm_handle = lambda self, module: None  # its CPU refusal


class Probe(nnx.Callback):
    """The committed updates, and the kinds of norm layer the net holds while it trains."""

    distributed = "all"

    def __init__(self) -> None:
        self.updates: list[tuple[int, int]] = []
        self.norms: set[str] = set()

    def on_epoch_begin(self, ctx: Any) -> None:
        self.norms |= {type(m).__name__ for m in ctx.model.net.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)}

    def on_optimizer_update(self, ctx: Any, event: Any) -> None:
        self.updates.append((event.epoch_idx, event.batch_idx))


class CrashAt(nnx.Callback):
    distributed = "all"

    def on_epoch_begin(self, ctx: Any) -> None:
        if ctx.epoch == 2:
            raise RuntimeError("simulated crash")


def job(device: str) -> tuple[nnx.NNModel, nnx.NNTrainParams, list[int]]:
    """A BatchNorm net in fp16 (4 batches an epoch, 3 epochs); its POISONED-th training batch's
    gradient overflows (an inf, as a real fp16 overflow)."""
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(128, 16, generator=g), torch.randint(0, 4, (128,), generator=g)
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(16, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 4))
    model = nnx.NNModel(params=nnx.NNModelParams(task=nnx.TaskSpec.categorical(4), device=device,
                                                 precision=nnx.PrecisionPolicy("fp16")), module=net)
    forwards = [0]
    net.register_forward_pre_hook(lambda m, args: forwards.__setitem__(0, forwards[0] + m.training))
    net[0].weight.register_hook(lambda grad: grad * float("inf") if forwards[0] == POISONED else grad)
    params = nnx.NNTrainParams(
        n_epochs=3, seed=0, resume="auto", progress=False,
        optim=nnx.NNOptimParams(name=nnx.Optims.SGD, max_lr=0.05, momentum=0.9),
        train_loader=nnx.distributed.train_loader(TensorDataset(x, y), batch_size=32, seed=0),
        val_loader=nnx.distributed.validation_loader(TensorDataset(x[:64], y[:64]), batch_size=32),
    )
    return model, params, forwards


def step(message: str) -> None:
    print(f"  ok  {message}", flush=True)


def main() -> int:
    if not ON_CPU and (not torch.cuda.is_available() or not dist.is_nccl_available()):
        print("DDP fp16 + batch norm: skipped (needs CUDA and a torch build with NCCL)")
        return 0
    if "RANK" not in os.environ:
        os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1",
                          MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    if ON_CPU:
        fake_cuda_on_cpu()
    device = "cpu" if ON_CPU else "cuda"
    info = nnx.distributed.init_process_group(backend="gloo" if ON_CPU else "nccl", timeout_seconds=120)
    step(f"init_process_group -> {info}")
    every = [(e, b) for e in range(3) for b in range(4)]
    with tempfile.TemporaryDirectory() as root:
        model, params, _ = job(device)
        plain_keys = list(model.net.state_dict())
        probe = Probe()
        straight = model.train(params, callbacks=[probe], root=f"{root}/straight", distributed=nnx.distributed.DDP())
        assert probe.norms == {"SyncBatchNorm"}, probe.norms
        assert type(model.net[1]) is nn.BatchNorm1d and list(model.net.state_dict()) == plain_keys
        assert probe.updates == [u for u in every if u != (0, 2)], probe.updates  # the overflow alone skipped
        payload = straight.checkpoint("last").payload()
        assert payload["optimizer"]["scaler"]["scale"] == INIT_SCALE / 2, payload["optimizer"]["scaler"]
        assert list(straight.checkpoint("last").weights()) == plain_keys
        stats = model.net[1].running_mean
        assert bool(torch.isfinite(stats).all()) and float(stats.abs().sum()) > 0  # trained statistics, kept
        assert all(math.isfinite(i.train_edp.loss) for i in straight.idps)
        assert {p.device.type for p in model.net.parameters()} == {device}
        step(f"fp16 + BatchNorm1d trained as SyncBatchNorm; the overflow skipped 1 of {len(every)} updates, "
             f"scale {INIT_SCALE:.0f} -> {INIT_SCALE / 2:.0f}; the net has its own batch norm back")

        crashed, params, _ = job(device)
        try:
            crashed.train(params, callbacks=[CrashAt()], root=f"{root}/resumed", distributed=nnx.distributed.DDP())
            raise AssertionError("the crash did not happen")
        except RuntimeError as exc:
            assert "simulated crash" in str(exc), exc
        assert type(crashed.net[1]) is nn.BatchNorm1d  # put back after a failure too
        resumed_model, params, forwards = job(device)
        forwards[0] = 8  # the overflow belongs to epoch 0, which is committed
        probe = Probe()
        resumed = resumed_model.train(params, callbacks=[probe], root=f"{root}/resumed", distributed=nnx.distributed.DDP())
        assert resumed.id == straight.id and resumed.resume_status["source_epoch"] == 1, resumed.resume_status
        assert probe.updates == [(2, b) for b in range(4)], probe.updates
        assert resumed.checkpoint("last").payload()["optimizer"]["scaler"]["scale"] == INIT_SCALE / 2
        mine, theirs = resumed.checkpoint("last").weights(), straight.checkpoint("last").weights()
        assert mine.keys() == theirs.keys()
        worst = max(float((mine[k].float().cpu() - theirs[k].float().cpu()).abs().max()) for k in mine)
        assert worst <= 1e-5, worst
        step(f"crashed after epoch 1, resume='auto' continued to the straight run (max difference {worst:.1e}), "
             "loss scale restored")
    nnx.distributed.shutdown(timeout_seconds=30)
    print("DDP fp16 + batch norm: OK", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
