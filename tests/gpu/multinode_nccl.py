"""One rank of a two-"node" nccl job: ``torchrun --nnodes=2 --nproc-per-node=1 ... multinode_nccl.py <out> <runs root>``.

``test_gpu_multinode.py`` starts two torchrun agents on one machine with two GPUs, each agent
seeing one (``CUDA_VISIBLE_DEVICES``), so each "node" has one local rank on its ``cuda:0``, and
each agent its own runs root. The rank joins the group (nccl chosen from the node's GPUs),
trains a small CUDA model for two epochs under ``DDP()`` with ``resume="auto"`` and a fixed
global batch, and saves its place in the group, its final parameters (on the CPU) and the
records to ``<out>/rank<r>.pt``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch.utils.data import TensorDataset

import nnx_api as nnx
from nnx_api import distributed


def main(out: Path, root: Path) -> None:
    info = distributed.init_process_group(timeout_seconds=120)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(96, 16, generator=g), torch.randint(0, 4, (96,), generator=g)
    torch.manual_seed(0)
    model = nnx.NNModel(nnx.NNParams(input_dim=16, output_dim=4, hidden_dims=(32,)),
                        nnx.NNModelParams(net=nnx.Nets.FEED_FWD, device=nnx.Devices.CUDA))
    params = nnx.NNTrainParams(
        n_epochs=2, seed=1, progress=False, resume="auto",
        train_loader=distributed.train_loader(TensorDataset(x, y), global_batch_size=16, seed=3),
        val_loader=distributed.validation_loader(TensorDataset(x[:32], y[:32]), 16),
    )
    run = model.train(params, root=root, distributed=distributed.DDP())
    out.mkdir(parents=True, exist_ok=True)
    torch.save({
        "info": (info.rank, info.world_size, info.local_rank, info.backend, info.node_rank, info.local_world_size),
        "final": {k: v.detach().cpu() for k, v in model.net.state_dict().items()},
        "idps": [(r.epoch_idx, r.batch_idx, r.train_edp.loss) for r in run.idps], "id": run.id,
    }, out / f"rank{info.rank}.pt")
    distributed.shutdown(timeout_seconds=60)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
