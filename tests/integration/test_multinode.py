"""Data parallelism across nodes: two torchrun agents on this machine act as two nodes (gloo, CPU).

Each test starts ``multinode_worker.py`` under ``torchrun --nnodes=2 --nproc-per-node=1``, once
per "node", both agents on 127.0.0.1 with one free port per test and the same runs root (shared
storage: one writer, one lease, one set of files). Every agent has a hard wall-clock limit (its
whole process group is killed past it) and the process group's timeout is 60 s, so nothing can
hang the suite. ``OMP_NUM_THREADS=1`` is set for every launch: torchrun sets it only where a node
runs more than one process, and the reference below runs two on one node.

* static rendezvous (``--node-rank``) and c10d rendezvous: the run trains, every rank knows its
  node (``GroupInfo.node_rank``, ``local_world_size``), both ranks end with identical parameters
  and records, one run is written under the shared root, and the result equals the same job on
  one node with two processes bit for bit;
* ``NNX_DEEP=1``: the non-writer node's rank is SIGKILLed mid-epoch, torchrun (c10d,
  ``--max-restarts=1``) restarts the group and ``resume="auto"`` continues the run bit for bit.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import ddp_common as common
import pytest
import torch

import nnx_api as nnx

HERE = Path(__file__).resolve().parent
WORKER = HERE / "multinode_worker.py"
AGENT_TIMEOUT = 120  # seconds for one agent (rendezvous, both epochs, teardown); the group's timeout is 60 s
DEEP = os.environ.get("NNX_DEEP") == "1"
EPOCHS = 2

pytestmark = [
    pytest.mark.timeout(400),
    pytest.mark.skipif(not torch.distributed.is_available() or not torch.distributed.is_gloo_available(), reason="no gloo"),
]


def agent_env(**extra: str) -> dict[str, str]:
    """The test's environment without any torchrun variables of its own, one thread per process."""
    inherited = ("RANK", "LOCAL_RANK", "GROUP_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                 "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_RUN_ID")
    env = {k: v for k, v in os.environ.items() if k not in inherited}
    return {**env, "NNX_PROGRESS": "0", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", **extra}


def torchrun(*launcher: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", *launcher]


def run_agents(commands: list[list[str]], logs: Path, env: dict[str, str]) -> list[int]:
    """Start every agent at once (each in its own session); wait for all, each for at most
    ``AGENT_TIMEOUT`` seconds; past it, kill every agent's whole process group and fail."""
    logs.mkdir(parents=True, exist_ok=True)
    procs, files = [], []
    for i, command in enumerate(commands):
        with open(logs / f"agent{i}.log", "w") as log:
            procs.append(subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=HERE,
                                          start_new_session=True))
        files.append(logs / f"agent{i}.log")
    deadline = time.monotonic() + AGENT_TIMEOUT
    try:
        return [p.wait(timeout=max(deadline - time.monotonic(), 0.1)) for p in procs]
    except subprocess.TimeoutExpired:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        pytest.fail("agents hung:\n" + "\n".join(f.read_text()[-3000:] for f in files))


def results(out: Path, codes: list[int], logs: Path) -> list[dict[str, Any]]:
    text = "\n".join(f.read_text()[-4000:] for f in sorted(logs.glob("agent*.log")))
    assert codes == [0] * len(codes), text
    return [torch.load(out / f"rank{rank}.pt", weights_only=False) for rank in (0, 1)]


def two_nodes(base: Path, rendezvous: str, *, epochs: int = EPOCHS, kill_epoch: int | None = None,
              **env: str) -> list[dict[str, Any]]:
    """Two agents, one process each, on the same runs root: static node ranks or c10d."""
    port = common.free_port()
    common_args = ["--nnodes=2", "--nproc-per-node=1"]
    if rendezvous == "static":
        launchers = [[*common_args, f"--node-rank={n}", "--master-addr=127.0.0.1", f"--master-port={port}"] for n in (0, 1)]
    else:
        rdzv = ["--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}", f"--rdzv-id=nnx-{base.name}"]
        restarts = ["--max-restarts=1"] if kill_epoch is not None else []
        launchers = [[*common_args, *restarts, *rdzv]] * 2
    job = [str(WORKER), str(base / "out"), str(base / "runs"), str(epochs), *([] if kill_epoch is None else [str(kill_epoch)])]
    codes = run_agents([torchrun(*launcher, *job) for launcher in launchers], base / "logs", agent_env(**env))
    return results(base / "out", codes, base / "logs")


def one_node(base: Path, *, epochs: int = EPOCHS) -> list[dict[str, Any]]:
    """The same job on one node with two processes."""
    launcher = ["--nnodes=1", "--nproc-per-node=2", "--master-addr=127.0.0.1", f"--master-port={common.free_port()}"]
    command = torchrun(*launcher, str(WORKER), str(base / "out"), str(base / "runs"), str(epochs))
    codes = run_agents([command], base / "logs", agent_env())
    return results(base / "out", codes, base / "logs")


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return one_node(tmp_path_factory.mktemp("one-node"))


def check_one_run(ranks: list[dict[str, Any]], reference: list[dict[str, Any]], root: Path) -> None:
    """Both ranks identical, equal to one node's ranks bit for bit, one run under the shared root."""
    r0, r1 = ranks
    assert common.same(r0["final"], r1["final"]) and r0["idps"] == r1["idps"] and r0["id"] == r1["id"]
    assert common.same(r0["final"], reference[0]["final"])  # bit for bit: 2 nodes x 1 process == 1 node x 2
    assert r0["idps"] == reference[0]["idps"] and r0["id"] == reference[0]["id"]
    assert not common.same(r0["final"], common.net().state_dict())  # it trained
    assert [p.name for p in root.iterdir() if not p.name.startswith(".")] == [r0["id"]]  # one run, one writer
    assert nnx.NNRun.load(r0["id"], root).idps == r0["idps"]


@pytest.mark.parametrize("rendezvous", ["static", "c10d"])
def test_two_nodes_train_one_run_equal_to_one_node_with_two_processes(tmp_path, reference, rendezvous):
    ranks = two_nodes(tmp_path, rendezvous)
    for rank, saved in enumerate(ranks):
        # (rank, world_size, local_rank, backend, node_rank, local_world_size): one process per node
        assert saved["info"] == (rank, 2, 0, "gloo", rank, 1)
        assert saved["env"]["GROUP_WORLD_SIZE"] == "2" and saved["threads"] == 1
    assert [r["info"][4:] for r in reference] == [(0, 2), (0, 2)]  # the reference: both ranks on node 0
    assert ranks[0]["idps"][-1].epoch_idx == EPOCHS - 1
    check_one_run(ranks, reference, tmp_path / "runs")


@pytest.mark.skipif(not DEEP, reason="NNX_DEEP=1: a node lost mid-epoch, restarted by torchrun")
def test_a_node_lost_mid_epoch_is_restarted_and_resume_auto_continues_bit_for_bit(tmp_path):
    """c10d, --max-restarts=1, TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 (docs/distributed.md): rank 1
    (the non-writer node) is SIGKILLed at its second update of epoch 2 of 4; torchrun restarts
    both nodes' workers, the writer's lease was released, and resume="auto" continues from the
    last committed epoch to the uninterrupted one-node run's parameters and records."""
    ranks = two_nodes(tmp_path / "two", "c10d", epochs=4, kill_epoch=2, TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1")
    uninterrupted = one_node(tmp_path / "one", epochs=4)
    assert [r["resume"] for r in ranks] == ["stateful", "stateful"]
    assert ranks[1]["env"]["TORCHELASTIC_RESTART_COUNT"] == "1"
    check_one_run(ranks, uninterrupted, tmp_path / "two" / "runs")
