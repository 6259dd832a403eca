"""NCCL on one GPU: a process group of world size 1 through NNx's own entry points.

    python tests/gpu/nccl_smoke.py            # sets RANK=0, WORLD_SIZE=1, ... itself
    torchrun --standalone --nproc_per_node=1 tests/gpu/nccl_smoke.py

Two ranks need two GPUs (NCCL binds one GPU per rank), so what one GPU can prove is that the
nccl branches run for real: ``init_process_group(backend="nccl")`` binds the rank to its GPU,
the collective's numbers and objects travel through NCCL on that device, its bounded barrier
returns, ``model.train(..., distributed=DDP())`` commits a run on CUDA through the nccl group,
and ``shutdown`` (an async barrier waited for with its timeout) destroys the group. Prints one
line per step and ``NCCL smoke: OK``; any failure raises (exit code 1). Without CUDA or NCCL it
says so and exits 0.
"""

from __future__ import annotations

import math
import os
import socket
import sys
import tempfile

import torch
import torch.distributed as dist
from torch.utils.data import TensorDataset

from nnx_adapters.collective.torch import TorchCollective
import nnx_api as nnx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def step(message: str) -> None:
    print(f"  ok  {message}", flush=True)


def main() -> int:
    if not torch.cuda.is_available() or not dist.is_nccl_available():
        print("NCCL smoke: skipped (needs CUDA and a torch build with NCCL; this machine has neither or one)")
        return 0
    if "RANK" not in os.environ:
        os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1",
                          MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    print(f"NCCL smoke on {torch.cuda.get_device_name(0)}, torch {torch.__version__}, "
          f"NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}", flush=True)

    info = nnx.distributed.init_process_group(backend="nccl", timeout_seconds=120)
    assert info == nnx.distributed.GroupInfo(rank=0, world_size=1, local_rank=0, backend="nccl"), info
    assert torch.cuda.current_device() == 0
    step(f"init_process_group(backend='nccl') -> {info}")

    collective = TorchCollective(shared_memory=False)
    assert collective.device == torch.device("cuda", 0), collective.device
    assert collective.all_reduce_sum([1.5, -2.0, 3.25]) == [1.5, -2.0, 3.25]
    assert collective.all_gather({"rank": 0}) == [{"rank": 0}]
    assert collective.broadcast(["epoch", 3], src=0) == ["epoch", 3]
    collective.barrier(timeout=30)
    step(f"collective on {collective.device}: all_reduce_sum, all_gather, broadcast, barrier(timeout=30)")

    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(256, 16, generator=g), torch.randint(0, 4, (256,), generator=g)
    nnx.set_seed(0)
    model = nnx.NNModel(nnx.NNParams(input_dim=16, output_dim=4, hidden_dims=(32,)),
                        nnx.NNModelParams(device=nnx.Devices.CUDA))
    params = nnx.NNTrainParams(
        n_epochs=2, seed=0, progress=False,
        train_loader=nnx.distributed.train_loader(TensorDataset(x, y), batch_size=32, seed=0),
        val_loader=nnx.distributed.validation_loader(TensorDataset(x[:64], y[:64]), batch_size=32),
    )
    with tempfile.TemporaryDirectory() as root:
        run = model.train(params, root=root, distributed=nnx.distributed.DDP())
        assert sorted({i.epoch_idx for i in run.idps}) == [0, 1]
        assert all(math.isfinite(i.train_edp.loss) for i in run.idps)
        assert nnx.NNRun.load(run.id, root).checkpoint("last").epoch == 1
    assert {p.device.type for p in model.net.parameters()} == {"cuda"}
    step(f"model.train(distributed=DDP()) on CUDA committed run {run.id[:8]} "
         f"(val loss {run.idps[-1].val_edp.loss:.4f})")

    nnx.distributed.shutdown(timeout_seconds=30)
    assert not dist.is_initialized()
    step("shutdown(timeout_seconds=30): async barrier waited for, group destroyed")
    print("NCCL smoke: OK", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
