"""Real processes, real SIGKILL: a training script killed at random instants, then simply rerun.

``train_script.py`` trains the tiny seeded model with ``resume="auto"``. An uninterrupted run of
the script gives the reference weights and its duration. Then the script is SIGKILLed at
instants drawn uniformly over that duration, again and again on the same runs root; after each
kill the on-disk state must obey the load rules (``tinyrun.check_committed_state``: the run
loads — never ``CorruptRunError`` —, history ≤ LAST, every tag ≤ LAST and every blob verifies,
no temporary visible). When a rerun gets to the end, its final weights must be bit-identical
to the reference, and the next kills start a new run root. The last root is finished by running
the very same command once more.

Most kills go through the script's fork server (``--serve``: interpreter and torch imported once,
each attempt a forked child killed with SIGKILL); a few are fresh ``python train_script.py ...``
processes, the way a preempted machine reruns a script. ``NNX_SIGKILL_SEED`` picks the instants.
"""

from __future__ import annotations

import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

import nnx_api as nnx

import tinyrun

SCRIPT = Path(__file__).with_name("train_script.py")
EPOCHS = 6
FORKED_KILLS = 24
EXEC_KILLS = 3
SEED = int(os.environ.get("NNX_SIGKILL_SEED", "20260101"))

pytestmark = pytest.mark.timeout(300)


def env() -> dict[str, str]:
    return {**os.environ, "NNX_PROGRESS": "0", "PYTHONUNBUFFERED": "1"}


class Lines:
    """Lines of a child's stdout, read by a thread so every wait has a timeout."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, args=(proc,), daemon=True).start()

    def _pump(self, proc: subprocess.Popen) -> None:
        for line in proc.stdout:
            self.queue.put(line.rstrip("\n"))
        self.queue.put(None)

    def next(self, timeout: float = 60) -> str:
        line = self.queue.get(timeout=timeout)
        assert line is not None, "the process ended"
        return line


class ForkServer:
    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(SCRIPT), "--serve"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env(), cwd=SCRIPT.parent,
        )
        self.lines = Lines(self.proc)
        assert self.lines.next(timeout=120) == "serving"

    def run(self, kill_after: float, *args: str) -> tuple[str, float]:
        self.proc.stdin.write(" ".join([f"{kill_after:.4f}", *args]) + "\n")
        self.proc.stdin.flush()
        _, status, elapsed = self.lines.next(timeout=180).split()
        return status, float(elapsed)

    def close(self) -> None:
        try:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.flush()
            self.proc.wait(timeout=30)
        except (OSError, ValueError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait(timeout=30)


def run_script(root: Path, out: Path, *, kill_after: float | None = None) -> tuple[str, float]:
    """The real command; SIGKILLed ``kill_after`` seconds after it is ready (None: let it finish)."""
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), str(root), str(out), "--epochs", str(EPOCHS)],
        stdout=subprocess.PIPE, text=True, env=env(), cwd=SCRIPT.parent,
    )
    try:
        lines = Lines(proc)
        assert lines.next(timeout=120) == "ready"
        start = time.monotonic()
        if kill_after is not None:
            try:
                proc.wait(timeout=kill_after)
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGKILL)
        code = proc.wait(timeout=120)
        return ("killed" if code == -signal.SIGKILL else f"exit:{code}"), time.monotonic() - start
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)


def final_weights(out: Path) -> dict[str, torch.Tensor]:
    return torch.load(out, weights_only=True)


def test_sigkill_at_random_instants_then_rerun(tmp_path):
    rng = random.Random(SEED)
    ref_root, ref_out = tmp_path / "reference", tmp_path / "reference.pt"
    server = ForkServer()
    try:
        status, exec_duration = run_script(ref_root, ref_out)
        assert status == "exit:0"
        reference = final_weights(ref_out)
        rid = next(p.name for p in ref_root.iterdir() if not p.name.startswith("."))
        ref_run = nnx.NNRun.load(rid, ref_root)
        assert tinyrun.check_committed_state(ref_root, rid) == EPOCHS - 1

        # the forked children run the same code: their uninterrupted run gives the same bits
        status, fork_duration = server.run(-1, str(tmp_path / "fork-ref"), str(tmp_path / "fork-ref.pt"), "--epochs", str(EPOCHS))
        assert status == "exit:0"
        assert tinyrun.same_weights(final_weights(tmp_path / "fork-ref.pt"), reference)

        outcomes: list[tuple[str, int | None, int]] = []  # (how, LAST after the kill, stale temporaries)
        lineage = 0
        finished = 0

        def attempt(how: str) -> None:
            nonlocal lineage, finished
            root, out = tmp_path / f"lineage-{lineage}", tmp_path / f"lineage-{lineage}.pt"
            if how == "fork":
                status, _ = server.run(rng.uniform(0, fork_duration), str(root), str(out), "--epochs", str(EPOCHS))
            else:
                status, _ = run_script(root, out, kill_after=rng.uniform(0, exec_duration))
            if status == "killed":
                last = tinyrun.check_committed_state(root, rid)
                outcomes.append((how, last, len(tinyrun.disk_temporaries(root))))
                return
            assert status == "exit:0", status  # it got to the end before its kill instant
            assert tinyrun.same_weights(final_weights(out), reference), f"lineage {lineage}"
            finished += 1
            lineage += 1

        while len(outcomes) < EXEC_KILLS:
            attempt("exec")
        while len(outcomes) < EXEC_KILLS + FORKED_KILLS:
            attempt("fork")

        # the same command, simply rerun, finishes the current lineage bit-identically
        root, out = tmp_path / f"lineage-{lineage}", tmp_path / f"lineage-{lineage}.pt"
        status, _ = run_script(root, out)
        assert status == "exit:0"
        assert tinyrun.same_weights(final_weights(out), reference)
        run = nnx.NNRun.load(rid, root)
        assert list(run.idps) == list(ref_run.idps)
        assert tinyrun.same_weights(run.checkpoint("last").weights(), ref_run.checkpoint("last").weights())
        assert tinyrun.check_committed_state(root, rid) == EPOCHS - 1
        assert tinyrun.disk_temporaries(root) == []
    finally:
        server.close()

    kills = len(outcomes)
    assert kills >= 20
    if os.environ.get("NNX_REPORT") == "1":
        lasts = [last for _, last, _ in outcomes]
        print(
            f"\nSIGKILL: {kills} kills ({EXEC_KILLS} fresh processes), {finished + 1} lineages finished; "
            f"LAST after kill: { {k: lasts.count(k) for k in sorted(set(lasts), key=lambda v: -1 if v is None else v)} }; "
            f"kills leaving a stale temporary: {sum(1 for *_, t in outcomes if t)}; "
            f"run durations: exec {exec_duration:.2f}s, forked {fork_duration:.2f}s"
        )
