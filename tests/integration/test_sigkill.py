"""Real processes, real SIGKILL: a training script killed at chosen points of its file operations,
then simply rerun.

``train_script.py`` trains the tiny seeded model with ``resume="auto"``. An uninterrupted run of
the script gives the reference weights and how many file-system calls of each kind it makes
(``os.write``, ``fsync``, ``replace``, ``unlink``: every way FileStorage changes the disk). Then
the script is run again and again on the same runs root, each time SIGKILLed by itself right
before its j-th call of one kind (``--kill-at KIND:J``, j drawn uniformly from the reference's
count): the crash lands at a point of the commit protocol chosen by the test, not by the
machine's speed. After each kill the on-disk state must obey the load rules
(``tinyrun.check_committed_state``: the run loads — never ``CorruptRunError`` —, history ≤ LAST,
every tag ≤ LAST and every blob verifies, no temporary visible). When a rerun gets to the end
(a resumed run makes fewer calls than the drawn j), its final weights must be bit-identical to
the reference, and the next kills start a new run root. The last root is finished by running the
very same command once more.

The first attempts kill one fresh run root per kind, so every kind of call is interrupted (a
fresh run makes the reference's calls, so each of those kills must happen). Most attempts go
through the script's fork server (``--serve``: interpreter and torch imported once, each attempt
a forked child); a few are fresh ``python train_script.py ...`` processes, the way a preempted
machine reruns a script. ``NNX_SIGKILL_SEED`` picks the kill points.
"""

from __future__ import annotations

import json
import os
import queue
import random
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import tinyrun
import torch
from tinyrun import FILE_OPS

import nnx_api as nnx

SCRIPT = Path(__file__).with_name("train_script.py")
EPOCHS = 6
FORKED_KILLS = 24
EXEC_KILLS = 3
SEED = int(os.environ.get("NNX_SIGKILL_SEED", "20260101"))

pytestmark = pytest.mark.timeout(300)


def env() -> dict[str, str]:
    return {**os.environ, "NNX_PROGRESS": "0", "PYTHONUNBUFFERED": "1"}


class Lines:
    """Lines of a child's stdout, read by a thread so every wait has a timeout (a hang guard)."""

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

    def run(self, *args: str) -> str:
        self.proc.stdin.write(" ".join(args) + "\n")
        self.proc.stdin.flush()
        _, status = self.lines.next(timeout=180).split()
        return status

    def close(self) -> None:
        try:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.flush()
            self.proc.wait(timeout=30)
        except (OSError, ValueError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait(timeout=30)


def run_script(*args: str) -> str:
    """The real command in a fresh process; its status (``killed`` or ``exit:<code>``)."""
    done = subprocess.run([sys.executable, str(SCRIPT), *args], stdout=subprocess.DEVNULL, env=env(),
                          cwd=SCRIPT.parent, timeout=180)
    return "killed" if done.returncode == -signal.SIGKILL else f"exit:{done.returncode}"


def final_weights(out: Path) -> dict[str, torch.Tensor]:
    return torch.load(out, weights_only=True)


def test_sigkill_at_chosen_file_operations_then_rerun(tmp_path):
    rng = random.Random(SEED)
    ref_root, ref_out, ref_ops = tmp_path / "reference", tmp_path / "reference.pt", tmp_path / "ops.json"
    server = ForkServer()
    try:
        assert run_script(str(ref_root), str(ref_out), "--epochs", str(EPOCHS), "--ops", str(ref_ops)) == "exit:0"
        reference = final_weights(ref_out)
        counts = json.loads(ref_ops.read_text())
        assert all(counts[kind] > 0 for kind in FILE_OPS), counts
        rid = next(p.name for p in ref_root.iterdir() if not p.name.startswith("."))
        ref_run = nnx.NNRun.load(rid, ref_root)
        assert tinyrun.check_committed_state(ref_root, rid) == EPOCHS - 1

        # the forked children run the same code: their uninterrupted run gives the same bits
        fork_ref = tmp_path / "fork-ref.pt"
        assert server.run(str(tmp_path / "fork-ref"), str(fork_ref), "--epochs", str(EPOCHS)) == "exit:0"
        assert tinyrun.same_weights(final_weights(fork_ref), reference)

        outcomes: list[tuple[str, int | None, int]] = []  # (kind killed at, LAST after the kill, stale temporaries)
        lineage = 0
        finished = 0

        def attempt(how: str, kind: str, root: Path, out: Path) -> str:
            args = [str(root), str(out), "--epochs", str(EPOCHS), "--kill-at", f"{kind}:{rng.randint(1, counts[kind])}"]
            status = server.run(*args) if how == "fork" else run_script(*args)
            if status == "killed":
                last = tinyrun.check_committed_state(root, rid)
                outcomes.append((kind, last, len(tinyrun.disk_temporaries(root))))
            else:
                assert status == "exit:0", status  # it got to the end before its kill point
                assert tinyrun.same_weights(final_weights(out), reference), root
            return status

        for kind in FILE_OPS:  # a fresh run makes the reference's calls: each of these kills happens
            assert attempt("fork", kind, tmp_path / f"fresh-{kind}", tmp_path / f"fresh-{kind}.pt") == "killed"
        for n in range(EXEC_KILLS + FORKED_KILLS):
            root, out = tmp_path / f"lineage-{lineage}", tmp_path / f"lineage-{lineage}.pt"
            if attempt("exec" if n < EXEC_KILLS else "fork", FILE_OPS[n % len(FILE_OPS)], root, out) != "killed":
                finished += 1
                lineage += 1

        # the same command, simply rerun, finishes the current lineage bit-identically
        root, out = tmp_path / f"lineage-{lineage}", tmp_path / f"lineage-{lineage}.pt"
        assert run_script(str(root), str(out), "--epochs", str(EPOCHS)) == "exit:0"
        assert tinyrun.same_weights(final_weights(out), reference)
        run = nnx.NNRun.load(rid, root)
        assert list(run.idps) == list(ref_run.idps)
        assert tinyrun.same_weights(run.checkpoint("last").weights(), ref_run.checkpoint("last").weights())
        assert tinyrun.check_committed_state(root, rid) == EPOCHS - 1
        assert tinyrun.disk_temporaries(root) == []
    finally:
        server.close()

    if os.environ.get("NNX_REPORT") == "1":
        lasts = [last for _, last, _ in outcomes]
        print(
            f"\nSIGKILL: {len(outcomes)} kills ({ {k: sum(1 for o in outcomes if o[0] == k) for k in FILE_OPS} }), "
            f"{finished + 1} lineages finished; "
            f"LAST after kill: { {k: lasts.count(k) for k in sorted(set(lasts), key=lambda v: -1 if v is None else v)} }; "
            f"kills leaving a stale temporary: {sum(1 for *_, t in outcomes if t)}"
        )
