"""Data parallelism across nodes: two torchrun agents on this machine act as two nodes (gloo, CPU).

Each test starts ``multinode_worker.py`` under ``torchrun --nnodes=2 --nproc-per-node=1``, once
per "node", both agents on 127.0.0.1 with one free port per test, and either the same runs root
(shared storage: one writer, one lease, one set of files) or one root each. Every agent has a hard wall-clock limit (its
whole process group is killed past it) and the process group's timeout is 60 s, so nothing can
hang the suite. ``OMP_NUM_THREADS=1`` is set for every launch: torchrun sets it only where a node
runs more than one process, and the reference below runs two on one node.

* static rendezvous (``--node-rank``) and c10d rendezvous: the run trains, every rank knows its
  node (``GroupInfo.node_rank``, ``local_world_size``), both ranks end with identical parameters
  and records, one run is written under the shared root, and the result equals the same job on
  one node with two processes bit for bit;
* no shared storage (each agent its own runs root): the writer is SIGKILLed, and a relaunch with
  the node ranks swapped (rank 0 now on the empty root) continues from the root that holds the
  run, bit for bit;
* the world size as a choice: a run with ``train_loader(global_batch_size=8)`` trained on 2, then
  1, then 4 ranks (``resume_mode="reshard"``) ends within float32 summation-order tolerance of
  the same run trained on 2 ranks throughout;
* a rank SIGKILLed mid-epoch, torchrun (c10d, ``--max-restarts=1``) restarts the group and
  ``resume="auto"`` continues the run bit for bit, attempt.json counting the restart (the writer
  on separate roots here; the other rank, and shared storage, with ``NNX_DEEP=1``).
"""

from __future__ import annotations

import json
import math
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
RESHARD = HERE / "reshard_worker.py"
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


def two_nodes(base: Path, rendezvous: str, *, epochs: int = EPOCHS, kill_epoch: int | None = None, victim: int = 1,
              roots: tuple[Path, Path] | None = None, node_ranks: tuple[int, int] = (0, 1), succeed: bool = True,
              **env: str) -> list[dict[str, Any]]:
    """Two agents, one process each: static node ranks (agent i is node ``node_ranks[i]``) or
    c10d; one shared runs root, or each agent its own (``roots``: a node without shared storage)."""
    port = common.free_port()
    common_args = ["--nnodes=2", "--nproc-per-node=1"]
    if rendezvous == "static":
        launchers = [[*common_args, f"--node-rank={n}", "--master-addr=127.0.0.1", f"--master-port={port}"] for n in node_ranks]
    else:
        rdzv = ["--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}", f"--rdzv-id=nnx-{base.name}"]
        restarts = ["--max-restarts=1"] if kill_epoch is not None and succeed else []
        launchers = [[*common_args, *restarts, *rdzv]] * 2
    agent_roots = roots if roots is not None else (base / "runs", base / "runs")
    kill = [] if kill_epoch is None else [str(kill_epoch), str(victim)]
    jobs = [[str(WORKER), str(base / "out"), str(root), str(epochs), *kill] for root in agent_roots]
    codes = run_agents([torchrun(*launcher, *job) for launcher, job in zip(launchers, jobs, strict=True)], base / "logs", agent_env(**env))
    if not succeed:
        assert any(codes), "the launch was meant to lose a rank"
        return []
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


@pytest.fixture(scope="module")
def reference4(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """The uninterrupted 4-epoch job on one node with two processes."""
    return one_node(tmp_path_factory.mktemp("one-node-4"), epochs=4)


def check_continued(ranks: list[dict[str, Any]], uninterrupted: list[dict[str, Any]], roots: tuple[Path, ...]) -> Path:
    """Both ranks continued statefully, identical, equal to the uninterrupted job bit for bit, and
    exactly one of ``roots`` holds the run (the others none); returns that run's folder."""
    r0, r1 = ranks
    assert [r["resume"] for r in ranks] == ["stateful", "stateful"]
    assert common.same(r0["final"], r1["final"]) and r0["idps"] == r1["idps"] and r0["id"] == r1["id"]
    assert common.same(r0["final"], uninterrupted[0]["final"]) and r0["idps"] == uninterrupted[0]["idps"]
    held = [root for root in roots if root.exists() and any(not p.name.startswith(".") for p in root.iterdir())]
    assert len(held) == 1 and [p.name for p in held[0].iterdir() if not p.name.startswith(".")] == [r0["id"]]
    assert nnx.NNRun.load(r0["id"], held[0]).idps == r0["idps"]
    return held[0] / r0["id"]


def attempts(run_folder: Path) -> tuple[int, list[str]]:
    """attempt.json's number and the earlier attempts' statuses."""
    record = json.loads((run_folder / "attempt.json").read_text())
    assert record["status"] == "completed"
    return record["number"], [e["status"] for e in record["earlier"]]


def test_writer_lost_then_node_ranks_swapped_continues_from_the_root_that_holds_the_run(tmp_path, reference4):
    """No shared storage: each agent has its own runs root. The writer (rank 0, agent A) is
    SIGKILLed in epoch 2 of 4 and the launch fails. Relaunched with the node ranks swapped, rank 0
    sits on agent B's empty root: the ranks find that A's root holds the newest committed state,
    rank 1 writes there, and resume="auto" continues bit for bit to the uninterrupted one-node
    job. Nothing is written under B's root; A's attempt.json counts the lost attempt."""
    roots = (tmp_path / "node-a", tmp_path / "node-b")
    two_nodes(tmp_path / "first", "static", epochs=4, kill_epoch=2, victim=0, roots=roots, succeed=False)
    # committed on A only: epochs 0-1, or epoch 0 when epoch 1's commit was still being written in the
    # background when the writer was killed (it is lost with the process)
    assert nnx.NNRun.load(reference4[0]["id"], roots[0]).idps[-1].epoch_idx in (0, 1)
    ranks = two_nodes(tmp_path / "second", "static", epochs=4, roots=roots, node_ranks=(1, 0))
    assert [r["info"][4] for r in ranks] == [0, 1]  # rank 0 is node 0: agent B, whose root was empty
    folder = check_continued(ranks, reference4, roots)
    assert folder.parent == roots[0]
    assert attempts(folder) == (2, ["interrupted"])


@pytest.mark.parametrize("victim,storage", [
    (0, "separate"),
    pytest.param(1, "separate", marks=pytest.mark.skipif(not DEEP, reason="NNX_DEEP=1: the other rank")),
    pytest.param(1, "shared", marks=pytest.mark.skipif(not DEEP, reason="NNX_DEEP=1: shared storage")),
])
def test_a_rank_lost_mid_epoch_is_restarted_and_resume_auto_continues_bit_for_bit(tmp_path, reference4, victim, storage):
    """c10d, --max-restarts=1, TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 (docs/distributed.md): one
    rank is SIGKILLed at its second update of epoch 2 of 4; torchrun restarts both nodes' workers
    (c10d may deal the ranks to the agents anew), and resume="auto" continues from the last
    committed epoch to the uninterrupted one-node job's parameters and records. attempt.json
    shows the restart, counted from the run's own files."""
    roots = (tmp_path / "node-a", tmp_path / "node-b") if storage == "separate" else None
    ranks = two_nodes(tmp_path / "two", "c10d", epochs=4, kill_epoch=2, victim=victim, roots=roots,
                      TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1")
    assert "1" in {r["env"]["TORCHELASTIC_RESTART_COUNT"] for r in ranks}  # (an agent counts its own restarts only)
    folder = check_continued(ranks, reference4, roots or (tmp_path / "two" / "runs",))
    # a killed writer leaves its attempt running ("interrupted"); a writer that outlives its lost
    # peer may record the broken collective ("failed") before its agent stops it
    number, earlier = attempts(folder)
    assert number == 2 and len(earlier) == 1 and earlier[0] in ({"interrupted"} if victim == 0 else {"interrupted", "failed"})


def one_agent(base: Path, nproc: int, root: Path, stop: int | None = None) -> dict[str, Any] | None:
    """``reshard_worker.py`` on one node with ``nproc`` ranks; stopped at the start of epoch ``stop``."""
    command = torchrun("--standalone", f"--nproc-per-node={nproc}", str(RESHARD), str(base / "out"), str(root),
                       *([] if stop is None else [str(stop)]))
    codes = run_agents([command], base / "logs", agent_env())
    assert codes == [0], (base / "logs" / "agent0.log").read_text()[-4000:]
    return None if stop is not None else torch.load(base / "out" / "result.pt", weights_only=False)


def test_a_run_resumed_on_two_then_one_then_four_ranks_follows_the_uninterrupted_run(tmp_path):
    """Epochs 0-1 on 2 ranks, epoch 2 on 1, epochs 3-4 on 4 (``resume="auto"``,
    ``resume_mode="reshard"``), against epochs 0-4 on 2 ranks: the same run id, records
    (epochs, batches, update counts) and, within float32 summation-order tolerance, the same
    losses and parameters. The deal fixes 8 rows per step for the whole group, tail included,
    and the net has no dropout, so every update is the same up to summation order."""
    root = tmp_path / "runs"
    one_agent(tmp_path / "on-2", 2, root, stop=2)
    one_agent(tmp_path / "on-1", 1, root, stop=3)
    resharded = one_agent(tmp_path / "on-4", 4, root)
    straight = one_agent(tmp_path / "straight", 2, tmp_path / "straight-runs")
    assert resharded is not None and straight is not None
    assert resharded["id"] == straight["id"] and resharded["resume"]["mode"] == "stateful"
    assert resharded["resume"]["source_epoch"] == 2
    shape = [(r.epoch_idx, r.batch_idx, r.update_count) for r in resharded["idps"]]
    assert shape == [(r.epoch_idx, r.batch_idx, r.update_count) for r in straight["idps"]]
    assert len({r.epoch_idx for r in resharded["idps"]}) == 5
    def losses(idps: list[Any]) -> list[float]:  # a fully masked batch has no loss (None: nan here)
        values = [r.train_edp.loss for r in idps] + [r.val_edp.loss for r in idps if r.val_edp]
        return [math.nan if v is None else v for v in values]

    assert losses(resharded["idps"]) == pytest.approx(losses(straight["idps"]), rel=1e-4, abs=1e-5, nan_ok=True)
    for name, value in straight["final"].items():
        torch.testing.assert_close(resharded["final"][name], value, rtol=1e-4, atol=1e-5)
    assert not common.same(resharded["final"], common.net().state_dict())  # it trained
