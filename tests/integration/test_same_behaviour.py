"""One pipeline: the same callback-failure, admission and resume behaviour in one process and under DDP().

Every scenario runs ``behaviour_worker.py`` twice — in one process without a process group, and
on two gloo ranks with torchrun's environment and ``distributed=DDP()`` — and the outcomes must
agree. Under DDP an error raised on one rank reaches every rank as the same error (an
``AgreedError`` naming the failing rank for a non-NNx error), so errors are compared by their
message; which hooks ran, what is on disk, and which epochs were trained or resumed must be equal.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from ddp_common import free_port

HERE = Path(__file__).resolve().parent
WORKER = HERE / "behaviour_worker.py"
LAUNCH_TIMEOUT = 240  # seconds for a whole launch (a hang guard); the group's own timeout is 30 s

pytestmark = [
    pytest.mark.timeout(600),
    pytest.mark.skipif(not torch.distributed.is_available() or not torch.distributed.is_gloo_available(), reason="no gloo"),
]


def run(mode: str, scenario: str, base: Path) -> list[dict[str, Any]]:
    """The scenario in ``mode`` ("single": one process; "ddp": two ranks); each process's outcome."""
    out, root = base / "out", base / "runs"
    out.mkdir(parents=True, exist_ok=True)
    world = 2 if mode == "ddp" else 1
    port = free_port()
    procs = []
    for rank in range(world):
        env = {**os.environ, "NNX_PROGRESS": "0", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
        if mode == "ddp":
            env.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world),
                       MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(subprocess.Popen([sys.executable, str(WORKER), mode, scenario, str(out), str(root)], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=HERE, text=True))
    try:
        logs = [p.communicate(timeout=LAUNCH_TIMEOUT)[0] for p in procs]
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        pytest.fail(f"{scenario} ({mode}) hung")
    assert [p.returncode for p in procs] == [0] * world, "\n".join(log[-3000:] for log in logs)
    return [json.loads((out / f"{scenario}_{mode}_rank{r}.json").read_text()) for r in range(world)]


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("behaviour")


def same_error(single: dict[str, Any], ranked: dict[str, Any]) -> None:
    """The rank raised the one-process error (or the agreed error carrying its message)."""
    assert "error" in single and "error" in ranked
    if ranked["error"] == "AgreedError":
        assert f"{single['error']}: {single['message']}" in ranked["message"]
    else:
        assert (ranked["error"], ranked["message"]) == (single["error"], single["message"])


@pytest.mark.parametrize("mode", ["single", "ddp"])
def test_a_failing_on_train_begin_finalizes_exactly_the_callbacks_that_began(base, mode):
    outcomes = run(mode, "begin_failure", base)
    for seen in outcomes:
        assert seen["error"] in ("RuntimeError", "AgreedError") and "b fails in on_train_begin" in seen["message"]
        assert seen["hooks"] == ["a.on_train_begin", "b.on_train_begin", "a.on_train_end"]
        assert seen["runs"] == []  # nothing was committed: the folder is gone, the call can be retried


def test_under_ddp_a_begin_failing_on_one_rank_finalizes_per_rank_what_began(base):
    rank0, rank1 = run("ddp", "begin_failure_one_rank", base)
    assert rank0["error"] == rank1["error"] == "AgreedError" and rank0["message"] == rank1["message"]
    assert "failed on rank 1" in rank0["message"]
    # rank 0: every begin completed, so every callback is finalized (in reverse); rank 1: only "a" began
    assert rank0["hooks"] == ["a.on_train_begin", "b.on_train_begin", "c.on_train_begin",
                              "c.on_train_end", "b.on_train_end", "a.on_train_end"]
    assert rank1["hooks"] == ["a.on_train_begin", "b.on_train_begin", "a.on_train_end"]


@pytest.mark.parametrize("scenario", ["admission", "resume"])
def test_admission_and_resume_agree_between_one_process_and_ddp(base, scenario):
    (single,) = run("single", scenario, base)
    ranks = run("ddp", scenario, base)
    assert ranks[0] == ranks[1]  # every rank returns the same outcome
    ddp = ranks[0]
    for key, seen in single.items():
        if "error" in seen:
            same_error(seen, ddp[key])
        else:
            assert ddp[key] == seen, key
    if scenario == "admission":
        assert single["first"]["epochs"] == [0, 1, 2] and single["again"]["error"] == "RunExistsError"
        assert single["finished"]["epochs"] == [0, 1, 2] and single["overwrite"]["epochs"] == [0, 1, 2]
    else:
        assert "x fails in on_epoch_end" in single["failed"]["message"]
        assert single["continued"] == {"epochs": [0, 1, 2], "resume": "stateful"}


def test_ddp_takes_the_collective_adapter_it_is_given(base):
    for seen in run("ddp", "custom_collective", base):
        assert seen["epochs"] == [0, 1, 2]
        assert seen["all_reduces"] >= 3 * 4  # at least one agreement per microbatch (4 per epoch per rank)
