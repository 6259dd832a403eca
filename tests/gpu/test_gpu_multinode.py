"""nccl across "nodes": two torchrun agents on one machine with two GPUs, each agent seeing one
GPU and using its own runs root (``multinode_nccl.py``), with a hard timeout. Needs two GPUs
(NCCL refuses two ranks on one device); with one it is skipped, saying so. The gloo multi-node
paths are tested on the CPU (tests/integration/test_multinode.py), nccl's device choice with
fakes (tests/api/test_nccl_paths.py)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from gpu_support import GPU

pytestmark = [*GPU, pytest.mark.timeout(200)]

SCRIPT = Path(__file__).with_name("multinode_nccl.py")
ROOT = Path(__file__).resolve().parents[2]


def test_two_nodes_on_nccl_train_one_run_with_identical_parameters(tmp_path):
    if not dist.is_nccl_available():
        pytest.skip("this torch build has CUDA but no NCCL")
    if torch.cuda.device_count() < 2:
        pytest.skip(f"two nccl nodes need two GPUs (one per agent); this machine has {torch.cuda.device_count()}")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT")}
    env.update(PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]), OMP_NUM_THREADS="1", NNX_PROGRESS="0")
    agents = [
        subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=1", f"--node-rank={n}",
             "--master-addr=127.0.0.1", f"--master-port={port}", str(SCRIPT), str(tmp_path / "out"),
             str(tmp_path / f"node-{n}")],
            env={**env, "CUDA_VISIBLE_DEVICES": str(n)}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        for n in (0, 1)
    ]
    logs = [a.communicate(timeout=180)[0] for a in agents]
    assert [a.returncode for a in agents] == [0, 0], "\n".join(logs)[-6000:]
    r0, r1 = (torch.load(tmp_path / "out" / f"rank{r}.pt", weights_only=False) for r in (0, 1))
    assert r0["info"] == (0, 2, 0, "nccl", 0, 1) and r1["info"] == (1, 2, 0, "nccl", 1, 1)
    assert r0["id"] == r1["id"] and r0["idps"] == r1["idps"]
    assert all(torch.equal(r0["final"][k], r1["final"][k]) for k in r0["final"])
    runs = [sorted(p.name for p in (tmp_path / f"node-{n}").glob("*") if not p.name.startswith(".")) for n in (0, 1)]
    assert runs == [[r0["id"]], []]  # only the writer's node holds the run
