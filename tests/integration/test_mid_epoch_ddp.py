"""Mid-epoch commits and preemption under DDP, with real processes: torchrun, gloo on the CPU.

Each test starts ``mid_epoch_ddp_worker.py`` under ``torchrun --standalone`` (one free port per
launch: ``--standalone`` picks its own), ``OMP_NUM_THREADS=1``, every launch with a hard
wall-clock limit (its whole process group is killed past it; ``test_multinode.run_agents``), the
process group's timeout 60 s. The run: ``ddp_common``'s data dealt by
``train_loader(global_batch_size=8, policy="pad", seed=11)`` — 6 group batches an epoch, of
which epoch 0's batches 2 and 3 are fully masked (no update): updates 1-4 are epoch 0, 5-10
epoch 1, 11-16 epoch 2 —, SGD with momentum, a validation set, ``resume="auto"``.

* a 2-rank run with ``commit_every=3`` and dropout whose rank 1 dies hard (``os._exit``) at update
  9, in the middle of epoch 1 and not at a commit: LAST stands inside epoch 1 and at most 3
  updates are lost; the same command again ends bit for bit equal to the uninterrupted run
  (weights, records);
* SIGTERM to rank 1's process only, while it holds after update 6 in the middle of epoch 1
  (``commit_every`` unset): both ranks commit LAST at the same update, at most one later, and
  raise ``TrainingPreempted``; the rerun ends bit for bit equal to the uninterrupted run;
* a mid-epoch LAST written by 2 ranks continues on 1 (``resume_mode="reshard"``): the epoch's
  remaining batches are dealt to the one rank, and the run ends within float32 summation-order
  tolerance of the 2-rank run;
* two nodes without shared storage (two torchrun agents, each its own runs root): rank 1 dies
  mid-epoch, the relaunch swaps the node ranks, the writer moves to the root holding the
  mid-epoch LAST, and the run ends bit for bit equal to one node's.
"""

from __future__ import annotations

import math
import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ddp_common as common
import pytest
import torch
from test_multinode import agent_env, run_agents, torchrun

from nnx_core.commit import LAST, RunFiles, position_of
from nnx_adapters.storage.fs import FileStorage
import nnx_api as nnx

HERE = Path(__file__).resolve().parent
WORKER = HERE / "mid_epoch_ddp_worker.py"
EPOCHS = 3
EPOCH0_UPDATES = 4  # 6 batches, of which the fully masked 2 and 3 make no update; epochs 1 and 2 make 6 each
EPOCH_BATCHES = 6
EVERY = 3
CRASH_AT = 9  # epoch 1, batch 4: commit_every=3 committed at update 7 (or 6); never a commit of 9 itself
# a crash redoes at most 2 * EVERY updates: the commit in flight (written in the background) may be lost with it
SIGNAL_AT = 6  # epoch 1, batch 1: rank 1 holds there until the signal is sent
LAUNCH_S = 150  # hang guard of one launch watched line by line
PREEMPTED_EXIT, CRASH_EXIT = 3, 17

pytestmark = [
    pytest.mark.timeout(600),
    pytest.mark.skipif(not torch.distributed.is_available() or not torch.distributed.is_gloo_available(), reason="no gloo"),
]


def command(base: Path, nproc: int, root: Path, *options: str) -> list[str]:
    return torchrun("--standalone", f"--nproc-per-node={nproc}", str(WORKER), str(base / "out"), str(root), *options)


def log(base: Path, tail: int = 4000) -> str:
    """The launch's output (its last ``tail`` characters; 0: all of it)."""
    return "\n".join(f.read_text()[-tail:] for f in sorted((base / "logs").glob("agent*.log")))


def launch(base: Path, nproc: int, root: Path, *options: str, succeed: bool = True) -> dict[str, Any] | None:
    """The worker on one node with ``nproc`` ranks; its result when it is meant to succeed."""
    (code,) = run_agents([command(base, nproc, root, *options)], base / "logs", agent_env())
    if not succeed:
        assert code != 0, "the launch was meant to fail:\n" + log(base)
        return None
    assert code == 0, log(base)
    return torch.load(base / "out" / "result.pt", weights_only=False)


def first_update(base: Path) -> int:
    """The first update a launch announced (a stateful resume from a mid-epoch LAST: LAST's + 1)."""
    return min(int(line.split()[1]) for line in log(base, tail=0).splitlines() if line.startswith("update "))


def run_id(root: Path) -> str:
    (rid,) = [p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")]
    return rid


def last_of(root: Path) -> tuple[Any, Any]:
    """The run's LAST manifest and its mid-epoch position (None: an epoch-end LAST)."""
    last = RunFiles(FileStorage(root), run_id(root)).read_tag(LAST)
    assert last is not None
    return last, position_of(last)


def shape(idps: Any) -> list[tuple[int, int, int | None]]:
    """Each record's epoch, batch and update count (None on these per-batch records)."""
    return [(r.epoch_idx, r.batch_idx, r.update_count) for r in idps]


def losses(idps: Any) -> list[float]:
    """Every record's training, validation and training-summary loss (a fully masked batch has
    none: nan here)."""
    values = [r.train_edp.loss for r in idps] + [r.val_edp.loss if r.val_edp else None for r in idps]
    values += [r.train_summary.loss if r.train_summary else None for r in idps]
    return [math.nan if v is None else v for v in values]


def check_mid_epoch(root: Path, result_lines: str, *, lost_at_most: int | None, at: int) -> tuple[Any, Any]:
    """LAST stands inside epoch 1 (its position says so, the loaded run shows it as ``partial``),
    at or before update ``at``, losing at most ``lost_at_most`` updates."""
    last, position = last_of(root)
    done = int(last.meta["update_count"])
    assert position is not None, (last, result_lines)
    assert last.epoch == 1 and 0 < position.batches < EPOCH_BATCHES, (last.epoch, position)
    assert position.epoch_batches in (None, EPOCH_BATCHES) and position.updates == done - EPOCH0_UPDATES, (position, done)
    assert done <= at, (done, at)
    if lost_at_most is not None:
        assert at - done <= lost_at_most, f"{at - done} updates lost: LAST at {done}, the crash at {at}"
    run = nnx.NNRun.load(run_id(root), root)
    assert {r.epoch_idx for r in run.committed_records()} == {0}  # epoch 0 whole, epoch 1 in part
    assert run.partial is not None and run.partial.epoch == 1 and run.partial.position.batches == position.batches
    assert len(run.partial.records) == position.records
    return last, position


def check_exact(resumed: dict[str, Any], reference: dict[str, Any]) -> None:
    """Bit for bit the uninterrupted run: weights, records, run id."""
    assert resumed["id"] == reference["id"]
    assert resumed["partial"] is None
    assert shape(resumed["idps"]) == shape(reference["idps"])
    assert losses(resumed["idps"]) == pytest.approx(losses(reference["idps"]), rel=0, abs=0, nan_ok=True)
    assert list(resumed["idps"]) == list(reference["idps"])
    for name, value in reference["final"].items():
        assert torch.equal(resumed["final"][name], value), name
    assert not common.same(resumed["final"], common.net(0.1).state_dict())  # it trained


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The uninterrupted 2-rank run with dropout (no mid-epoch commits: they change nothing computed)."""
    base = tmp_path_factory.mktemp("reference")
    result = launch(base, 2, base / "runs")
    assert result is not None
    assert shape(result["idps"])[-1][:2] == (EPOCHS - 1, EPOCH_BATCHES - 1)  # a record a batch
    return result


@pytest.mark.parametrize("journal", [False, True], ids=["eager", "journal"])
def test_a_two_rank_run_killed_mid_epoch_resumes_bit_identically(tmp_path, reference, journal):
    root = tmp_path / "runs"
    options = ("--commit-every", str(EVERY), *(("--journal",) if journal else ()))
    launch(tmp_path / "first", 2, root, *options, "--crash-at", str(CRASH_AT), succeed=False)
    text = log(tmp_path / "first", tail=0)
    assert f"crash rank 1 update {CRASH_AT}" in text and f"update {CRASH_AT} epoch 1 batch 4" in text, text[-4000:]
    last, _ = check_mid_epoch(root, text[-4000:], lost_at_most=2 * EVERY, at=CRASH_AT)
    assert run_id(root) == reference["id"]
    resumed = launch(tmp_path / "second", 2, root, *options)
    assert resumed is not None and resumed["resume"]["mode"] == "stateful", resumed["resume"]
    assert resumed["resume"]["source_epoch"] == 1
    assert first_update(tmp_path / "second") == int(last.meta["update_count"]) + 1  # from inside epoch 1
    check_exact(resumed, reference)


class Watched:
    """One torchrun launch whose stdout lines (both ranks') are read by a thread, so every wait
    has a timeout; past ``LAUNCH_S`` its whole process group is killed."""

    def __init__(self, cmd: list[str], logfile: Path) -> None:
        logfile.parent.mkdir(parents=True, exist_ok=True)
        self.logfile = logfile
        self.proc = subprocess.Popen(cmd, env=agent_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     cwd=HERE, start_new_session=True)
        self.deadline = time.monotonic() + LAUNCH_S
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        with open(self.logfile, "w") as out:
            for line in self.proc.stdout:
                out.write(line)
                out.flush()
                self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def _left(self) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            self.kill()
            pytest.fail("the launch hung:\n" + self.text())
        return left

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def text(self) -> str:
        return "\n".join(self.lines[-80:])

    def until(self, accept: Callable[[str], bool]) -> str:
        """The first line ``accept`` takes."""
        while True:
            try:
                line = self._queue.get(timeout=self._left())
            except queue.Empty:
                continue  # _left fails on the next turn
            if line is None:
                self.kill()
                pytest.fail("the launch ended before the line awaited:\n" + self.text())
            self.lines.append(line)
            if accept(line):
                return line

    def end(self) -> int:
        """Wait for the launch and for the end of its output; its exit code."""
        while True:
            try:
                line = self._queue.get(timeout=self._left())
            except queue.Empty:
                continue
            if line is None:
                break
            self.lines.append(line)
        try:
            return self.proc.wait(timeout=self._left())
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail("the launch hung:\n" + self.text())


def test_sigterm_on_one_rank_commits_the_same_update_on_both_and_resumes_exactly(tmp_path, reference):
    root = tmp_path / "runs"
    # commit_every unset: the signal alone commits inside the epoch; rank 1 holds after update 6
    # until the signal is sent (rank 0 waits for it in the next collective; waiting changes nothing
    # computed), so the signal lands in the middle of epoch 1 however loaded the machine is
    gate = tmp_path / "gate"
    child = Watched(command(tmp_path / "first", 2, root, "--hold-at", str(SIGNAL_AT), "--gate", str(gate)),
                    tmp_path / "first" / "logs" / "agent0.log")
    try:
        pid = int(child.until(lambda line: line.startswith("pid rank 1 ")).split()[-1])
        child.until(lambda line: line == f"holding rank 1 update {SIGNAL_AT}")
        sent = SIGNAL_AT
        os.kill(pid, signal.SIGTERM)  # rank 1 only: neither rank 0 nor torchrun is signalled
        gate.touch()
        code = child.end()
    finally:
        child.kill()
    text = child.text()
    assert code != 0, text
    stops = {int(line.split()[2]): line.split() for line in child.lines if line.startswith("preempted rank ")}
    assert sorted(stops) == [0, 1], f"both ranks must raise TrainingPreempted:\n{text}"
    # preempted rank R update U epoch E committed C
    (stopped,) = {int(words[4]) for words in stops.values()}  # the same update on both ranks
    assert {(words[6], words[8]) for words in stops.values()} == {("1", "True")}, stops
    assert sent <= stopped <= sent + 1, (sent, stopped, text)  # at the next update boundary agreed
    announced = max(int(line.split()[1]) for line in child.lines if line.startswith("update "))
    assert announced == stopped, (announced, stopped)  # nothing trained past the committed update
    last, _ = check_mid_epoch(root, text, lost_at_most=0, at=stopped)
    assert int(last.meta["update_count"]) == stopped
    resumed = launch(tmp_path / "second", 2, root)
    assert resumed is not None and resumed["resume"]["mode"] == "stateful", resumed["resume"]
    assert first_update(tmp_path / "second") == stopped + 1
    check_exact(resumed, reference)


def test_a_mid_epoch_commit_on_two_ranks_continues_on_one_within_tolerance(tmp_path):
    """Without dropout (each world size draws its own masks) every update is the same up to summation order."""
    root = tmp_path / "runs"
    options = ("--commit-every", str(EVERY), "--reshard", "--dropout", "0")
    launch(tmp_path / "on-2", 2, root, *options, "--crash-at", str(CRASH_AT), succeed=False)
    last, _ = check_mid_epoch(root, log(tmp_path / "on-2"), lost_at_most=2 * EVERY, at=CRASH_AT)
    resharded = launch(tmp_path / "on-1", 1, root, *options)
    assert first_update(tmp_path / "on-1") == int(last.meta["update_count"]) + 1  # the rest of epoch 1, on one rank
    straight = launch(tmp_path / "straight", 2, tmp_path / "straight-runs", *options)
    assert resharded is not None and straight is not None
    assert resharded["id"] == straight["id"] and resharded["resume"]["mode"] == "stateful", resharded["resume"]
    assert resharded["resume"]["source_epoch"] == 1
    assert resharded["partial"] is None
    assert shape(resharded["idps"]) == shape(straight["idps"])
    assert shape(straight["idps"])[-1][:2] == (EPOCHS - 1, EPOCH_BATCHES - 1)
    assert losses(resharded["idps"]) == pytest.approx(losses(straight["idps"]), rel=1e-4, abs=1e-5, nan_ok=True)
    for name, value in straight["final"].items():
        torch.testing.assert_close(resharded["final"][name], value, rtol=1e-4, atol=1e-5)
    assert not common.same(resharded["final"], common.net().state_dict())  # it trained


def two_nodes(base: Path, roots: tuple[Path, Path], node_ranks: tuple[int, int], *options: str,
              succeed: bool = True) -> dict[str, Any] | None:
    """Two torchrun agents on this machine, one rank each (static node ranks: agent i is node
    ``node_ranks[i]``), each with its own runs root (nodes without shared storage)."""
    port = common.free_port()
    commands = [torchrun("--nnodes=2", "--nproc-per-node=1", f"--node-rank={n}", "--master-addr=127.0.0.1",
                         f"--master-port={port}", str(WORKER), str(base / "out"), str(root), *options)
                for n, root in zip(node_ranks, roots, strict=True)]
    codes = run_agents(commands, base / "logs", agent_env())
    if not succeed:
        assert any(codes), "the launch was meant to lose a rank:\n" + log(base)
        return None
    assert codes == [0, 0], log(base)
    return torch.load(base / "out" / "result.pt", weights_only=False)


def test_two_nodes_without_shared_storage_continue_a_mid_epoch_commit_bit_identically(tmp_path, reference):
    """Rank 1 dies mid-epoch; the relaunch swaps the node ranks, so rank 0 now stands on the empty
    root: the writer moves to the root holding the mid-epoch LAST, and the run ends bit for bit
    equal to one node's (2 nodes × 1 process sum as 1 node × 2)."""
    roots = (tmp_path / "node-a", tmp_path / "node-b")
    options = ("--commit-every", str(EVERY))
    two_nodes(tmp_path / "first", roots, (0, 1), *options, "--crash-at", str(CRASH_AT), succeed=False)
    check_mid_epoch(roots[0], log(tmp_path / "first"), lost_at_most=2 * EVERY, at=CRASH_AT)
    assert not roots[1].exists() or not any(p for p in roots[1].iterdir() if not p.name.startswith("."))
    resumed = two_nodes(tmp_path / "second", roots, (1, 0), *options)
    assert resumed is not None and resumed["resume"]["mode"] == "stateful", resumed["resume"]
    check_exact(resumed, reference)
    assert nnx.NNRun.load(reference["id"], roots[0]).idps == resumed["idps"]  # the writer stayed with the run
    assert not roots[1].exists() or not any(p for p in roots[1].iterdir() if not p.name.startswith("."))
