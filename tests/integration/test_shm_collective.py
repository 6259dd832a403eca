"""The shared-memory fast path of ``TorchCollective.all_reduce_sum`` on real processes (gloo, CPU).

This file is also the worker: ``python test_shm_collective.py SCENARIO OUT`` runs one rank with
torchrun's environment and writes what it saw to ``OUT/SCENARIO_rankR.json``. Every launch has a
hard wall-clock limit and kills its processes on expiry, so nothing can hang the suite.

* rounds (2 and 3 ranks): hundreds of all-reduces of random vectors of varying lengths (some
  longer than ``SHM_CAPACITY``, so they cross to the process group), mixed with all-gathers and
  broadcasts: identical bits on every rank, and the fast-path ones equal the rank-order float64
  sum exactly; the segment file is gone once set up; the default (no ``shared_memory=True``) on
  every rank keeps every rank on the process group;
* kill: a rank SIGKILLed while the others wait (left a zombie, as the launcher reaps it late):
  the others raise ``RuntimeError`` naming it as dead — with a group timeout far beyond the
  launch's limit, so waiting for the timeout instead would show as a hung launch;
* late: a rank alive but absent past the group's timeout (it stays alive until the others have
  raised): the others raise ``RuntimeError`` saying it did not arrive within the timeout (that
  the wait lasts the timeout and no less is checked on a fake clock: ``test_shm_deadline.py``);
* lengths: ranks giving vectors of different lengths, one of them too long for the segment (so
  that rank would go to the process group): every rank raises ``RuntimeError`` naming the
  lengths, again with a group timeout beyond the launch's limit.

No check reads a duration: the launch limit and the late rank's wait are hang guards only.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from ddp_common import free_port

HERE = Path(__file__).resolve()
LAUNCH_TIMEOUT = 120  # seconds for a whole launch
ROUNDS = 300
UNREACHED_GROUP_TIMEOUT = 10 * LAUNCH_TIMEOUT  # kill, lengths: a wait for it would be a hung launch
LATE_GROUP_TIMEOUT = 3

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.skipif(not torch.distributed.is_available() or not torch.distributed.is_gloo_available(), reason="no gloo"),
]


# ------------------------------------------------------------------------------- the data
def plan(index: int) -> tuple[str, int]:
    """Round ``index``'s call (the same on every rank): the kind and the vector length."""
    g = random.Random(1000 + index)
    kind = g.choices(["reduce", "gather", "broadcast"], weights=[6, 1, 1])[0]
    length = g.choice([0, 1, 6, 17, 64, 65, 90]) if g.random() < 0.3 else g.randint(1, 64)
    return kind, length


def values(index: int, rank: int, length: int) -> list[float]:
    """Rank ``rank``'s vector in round ``index``: magnitudes far apart, so the order of the sum matters."""
    g = random.Random(index * 7919 + rank)
    special = [-0.0, 0.0, 1e300, -1e300, 5e-324, 1.0, -1.0]
    return [g.choice(special) if g.random() < 0.1 else g.uniform(-1, 1) * 10 ** g.randint(-20, 20) for _ in range(length)]


def rank_order_sum(index: int, world: int, length: int) -> list[float]:
    rows = [values(index, r, length) for r in range(world)]
    total = list(rows[0])
    for row in rows[1:]:
        total = [a + b for a, b in zip(total, row, strict=True)]
    return total


def bits(xs: list[float]) -> list[str]:
    return [x.hex() for x in xs]


# ------------------------------------------------------------------------------- the worker
def worker(scenario: str, out: Path) -> None:
    from nnx_adapters.collective.shm import SHM_CAPACITY
    from nnx_adapters.collective.torch import TorchCollective
    from nnx_api import distributed

    timeout = {"kill": UNREACHED_GROUP_TIMEOUT, "lengths": UNREACHED_GROUP_TIMEOUT, "late": LATE_GROUP_TIMEOUT}.get(scenario, 60)
    info = distributed.init_process_group("gloo", timeout_seconds=timeout)
    rank, world = info.rank, info.world_size
    seen: dict[str, Any] = {"rank": rank}

    def save() -> None:
        (out / f"{scenario}_rank{rank}.json").write_text(json.dumps(seen))

    collective = TorchCollective(shared_memory=True)
    seen["fast_path"] = collective.fast_path
    segment = collective._shm.path if collective._shm is not None else None
    if scenario == "rounds":
        results = []
        for index in range(ROUNDS):
            kind, length = plan(index)
            if kind == "reduce":
                results.append(bits(collective.all_reduce_sum(values(index, rank, length))))
            elif kind == "gather":
                results.append(collective.all_gather((index, rank)))
            else:
                results.append(collective.broadcast([index, rank], src=index % world))
        seen["results"] = results
        seen["segment_left"] = None if segment is None else os.path.exists(segment)  # rank 0 unlinked it at setup
        seen["fast_path_calls"] = collective.fast_path_calls
        seen["all_reduce_calls"] = collective.traffic.calls.get("all_reduce", 0)
        seen["capacity"] = SHM_CAPACITY
        collective.close()
        other = TorchCollective()  # the default: every all-reduce through the process group
        seen["default"] = {"fast_path": other.fast_path, "sum": other.all_reduce_sum([float(rank), 1.0])}
        other.close()
        save()
        distributed.shutdown(timeout_seconds=30)
        return
    if scenario == "lengths":
        try:
            collective.all_reduce_sum([1.0] * (SHM_CAPACITY + 10 if rank == 0 else 3))
            seen["error"] = None
        except RuntimeError as exc:
            seen["error"] = str(exc)
        save()
        os._exit(0)
    victim = world - 1
    for index in range(20):
        collective.all_reduce_sum([float(index)])
    if rank == victim:
        if scenario == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        # "late": alive, but never arrives: wait until every other rank has raised (a hang guard
        # bounds the wait), and record that this rank was alive all along
        others = [out / f"{scenario}_rank{r}.json" for r in range(world) if r != rank]
        deadline = time.monotonic() + LAUNCH_TIMEOUT
        while not all(p.exists() for p in others) and time.monotonic() < deadline:
            time.sleep(0.05)
        seen["outlived_the_others"] = all(p.exists() for p in others)
        save()
        os._exit(0)
    try:
        collective.all_reduce_sum([1.0, 2.0])
        seen["error"] = None
    except RuntimeError as exc:
        seen["error"] = str(exc)
    save()
    os._exit(0)  # a peer is gone: leave the group to process exit


# ------------------------------------------------------------------------------- the launcher
def launch(scenario: str, world: int, out: Path) -> tuple[list[int], list[dict[str, Any] | None], list[str]]:
    """One process per rank; wait for them in rank order (a dead rank stays a zombie meanwhile)."""
    out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "NNX_SHM_COLLECTIVE"}
    logs = [out / f"{scenario}_{world}_rank{r}.log" for r in range(world)]
    procs = []
    for rank in range(world):
        rank_env = {
            **env, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_WORLD_SIZE": str(world),
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
        }
        with open(logs[rank], "w") as log:
            procs.append(
                subprocess.Popen([sys.executable, str(HERE), scenario, str(out)], env=rank_env, stdout=log,
                                 stderr=subprocess.STDOUT, cwd=HERE.parents[2])
            )
    deadline = time.monotonic() + LAUNCH_TIMEOUT
    try:
        codes = [p.wait(timeout=max(1.0, deadline - time.monotonic())) for p in procs]
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait(timeout=30)
        pytest.fail(f"{scenario} on {world} ranks hung:\n" + "\n".join(log.read_text()[-3000:] for log in logs))
    results = []
    for rank in range(world):
        saved = out / f"{scenario}_rank{rank}.json"
        results.append(json.loads(saved.read_text()) if saved.exists() else None)
        saved.unlink(missing_ok=True)
    return codes, results, [log.read_text() for log in logs]


@pytest.mark.parametrize("world", [2, 3])
def test_fast_path_sums_are_identical_on_every_rank_and_exact_in_rank_order(tmp_path, world):
    codes, results, logs = launch("rounds", world, tmp_path)
    assert codes == [0] * world, "\n".join(log[-3000:] for log in logs)
    first = results[0]
    assert first is not None
    capacity = first["capacity"]
    expected_fast = 0
    for result in results:
        assert result["fast_path"] is True and result["segment_left"] is False
        assert result["results"] == first["results"]  # identical bits (and objects) on every rank
        assert result["default"]["fast_path"] is False
        total = float(sum(range(world)))
        assert result["default"]["sum"] == [total, float(world)]
    for index in range(ROUNDS):
        kind, length = plan(index)
        got = first["results"][index]
        if kind == "gather":
            assert [tuple(x) for x in got] == [(index, r) for r in range(world)]
        elif kind == "broadcast":
            assert got == [index, index % world]
        elif length <= capacity:
            expected_fast += 1
            assert got == bits(rank_order_sum(index, world, length)), index  # exact, bit for bit
        else:  # the process group's sum: the same on every rank (checked above), equal up to rounding
            want = rank_order_sum(index, world, length)
            torch.testing.assert_close(torch.tensor([float.fromhex(x) for x in got], dtype=torch.float64),
                                       torch.tensor(want, dtype=torch.float64), rtol=1e-12, atol=0)
    assert any(plan(i)[0] == "reduce" and plan(i)[1] > capacity for i in range(ROUNDS))  # the fallback was crossed
    assert all(r["fast_path_calls"] == expected_fast for r in results)
    assert all(r["all_reduce_calls"] == sum(plan(i)[0] == "reduce" for i in range(ROUNDS)) for r in results)


def test_a_killed_peer_makes_the_others_raise_without_waiting_for_the_timeout(tmp_path):
    world = 3
    codes, results, logs = launch("kill", world, tmp_path)
    assert codes[-1] == -signal.SIGKILL
    for rank in range(world - 1):
        result = results[rank]
        assert codes[rank] == 0 and result is not None, logs[rank][-3000:]
        assert result["fast_path"] is True
        assert result["error"] is not None and f"rank {world - 1} (pid" in result["error"] and "died" in result["error"]


def test_a_peer_missing_past_the_group_timeout_makes_the_others_raise(tmp_path):
    codes, results, logs = launch("late", 2, tmp_path)
    assert codes == [0, 0], logs
    result, late = results
    assert result is not None and result["fast_path"] is True
    assert result["error"] == (
        f"all_reduce_sum (shared memory), round 21: rank(s) 1 did not arrive within {LATE_GROUP_TIMEOUT} s "
        "(rank 0 waited)"
    ), result
    assert late is not None and late["outlived_the_others"] is True  # alive throughout: a timeout, not a death


def test_ranks_disagreeing_on_a_vector_length_across_the_capacity_raise_at_once(tmp_path):
    codes, results, logs = launch("lengths", 2, tmp_path)
    assert codes == [0, 0], logs
    for result in results:
        assert result is not None and result["fast_path"] is True
        assert result["error"] is not None and "values" in result["error"], result


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parents[2]))
    worker(sys.argv[1], Path(sys.argv[2]))
