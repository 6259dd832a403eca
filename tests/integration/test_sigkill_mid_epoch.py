"""Real processes killed inside an epoch, then simply rerun: ``commit_every`` and preemption.

``train_script.py --workers 2 --commit-every 5 --announce`` trains ``tinyrun``'s model with
``resume="auto"`` on a shuffling ``DataLoader`` (its own seeded generator, 2 worker processes, a
dataset that draws torch, ``random`` and NumPy noise in ``__getitem__``), 12 updates an epoch for 3
epochs, committing LAST every 5 committed updates inside an epoch, and prints ``update N`` after
each committed update. The test watches those lines and signals the process from outside when it
sees update k, or a few milliseconds later (the process runs on meanwhile, so the signal lands
wherever the run has got to: in a step, in a commit, between two):

* SIGKILL, at updates in each of the three epochs, each kill on the root the previous rerun left:
  after every kill the on-disk state obeys the load rules (``check_state``) and LAST holds at
  least the last update announced minus 10: commits are written in the background (the default),
  so a kill can also take the commit still in flight, and the one before it is LAST — at most
  2 × 5 updates are redone (the next commit point waits for it); the same command, rerun
  once more, ends bit-identical to the uninterrupted run (weights, LAST, history);
* SIGTERM (preemption, default ``preempt_signals``): the process commits at the next update
  boundary and exits non-zero with ``TrainingPreempted``; LAST holds the update it stopped at
  (the last announced), at most 1 after the update count at which the handler ran
  (``sigterm-seen``); the rerun ends bit-identical.

Every subprocess and every wait has a timeout; ``OMP_NUM_THREADS=1``.
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import tinyrun
import torch

from nnx_core.commit import LAST, RunFiles, complete_epoch, position_of
from nnx_adapters.storage.fs import FileStorage
import nnx_api as nnx

SCRIPT = Path(__file__).with_name("train_script.py")
EPOCHS, EVERY, WORKERS = 3, 5, 2
PER_EPOCH = 12  # tinyrun's 96 rows, 8 a batch
UPDATES = EPOCHS * PER_EPOCH
SIGKILLS = (3, 9, 16, 22, 27, 32)  # announced updates at which SIGKILL is sent: epochs 0, 0, 1, 1, 2, 2
DELAYS = (0.0, 0.02, 0.005, 0.05, 0.0, 0.01)  # seconds between seeing the update and the SIGKILL
SIGTERMS = (8, 20)  # epochs 0 and 1
START_S, RUN_S = 180, 300  # hang guards: a process to get to an update, a run to end
ORPHAN_S = 60  # a loader worker's own end after its parent's (torch's watchdog: 5 s)

pytestmark = pytest.mark.timeout(900)


def env() -> dict[str, str]:
    return {**os.environ, "NNX_PROGRESS": "0", "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}


def command(root: Path, out: Path) -> list[str]:
    return [sys.executable, str(SCRIPT), str(root), str(out), "--epochs", str(EPOCHS), "--workers", str(WORKERS),
            "--commit-every", str(EVERY), "--announce"]


class Child:
    """The training command as a process whose stdout lines are read by a thread (so every wait has
    a timeout). Its loader workers inherit the pipe: after a SIGKILL the pipe ends when they do.

    A worker ends by itself when it sees its parent gone (torch checks every 5 s), except one
    forked just as the parent was killed: torch's worker takes the parent it finds at its start,
    by then the reaper, so it never sees it go. Such an orphan is killed after ``ORPHAN_S``; the
    command runs in a session of its own for that."""

    def __init__(self, root: Path, out: Path, stderr: Path) -> None:
        self.stderr_path = stderr
        with open(stderr, "w") as err:
            self.proc = subprocess.Popen(command(root, out), stdout=subprocess.PIPE, stderr=err, text=True, env=env(),
                                         cwd=SCRIPT.parent, start_new_session=True)
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def _next(self, timeout: float) -> str | None:
        line = self._queue.get(timeout=timeout)
        if line is not None:
            self.lines.append(line)
        return line

    def until_update(self, k: int) -> int:
        """Wait for the first announced update ≥ k; return it."""
        while True:
            line = self._next(START_S)
            assert line is not None, f"the process ended before update {k}: {self.lines[-3:]}, {self.stderr()[-2000:]}"
            if line.startswith("update ") and int(line.split()[1]) >= k:
                return int(line.split()[1])

    def end(self, sig: int | None = None, delay: float = 0.0) -> int:
        """Send ``sig`` (None: none) after ``delay`` seconds, wait for the process and for the end of
        its output; its return code."""
        time.sleep(delay)
        if sig is not None:
            self.proc.send_signal(sig)
        rc = self.proc.wait(timeout=RUN_S)
        try:
            while self._next(ORPHAN_S) is not None:
                pass
        except queue.Empty:  # a worker that cannot see its parent is gone (class docstring)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            while self._next(RUN_S) is not None:
                pass
        return rc

    def announced(self) -> int:
        """The last update the process announced (0: none)."""
        return max((int(line.split()[1]) for line in self.lines if line.startswith("update ")), default=0)

    def stderr(self) -> str:
        return self.stderr_path.read_text()


def run_id(root: Path) -> str:
    (rid,) = [p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")]
    return rid


def check_state(root: Path, rid: str) -> tuple[int | None, int, dict[str, Any] | None]:
    """The load rules on what a kill left (``tinyrun.check_committed_state``, which reads an epoch-end
    LAST; a mid-epoch LAST's rules here): the run loads; its history shows the epochs LAST holds
    whole, and ``committed_records(partial=True)`` adds exactly the position's records of LAST's
    epoch, the same rows as the file's; every tag is ≤ LAST and its blobs verify; no temporary is
    visible. Returns (LAST's epoch, its committed updates, its position) — (None, 0, None): nothing
    committed."""
    files = RunFiles(FileStorage(root), rid)
    last = files.read_tag(LAST) if files.exists() else None
    if last is None or position_of(last) is None:
        epoch = tinyrun.check_committed_state(root, rid)
        return epoch, 0 if last is None else int(last.meta["update_count"]), None
    position = position_of(last)
    assert position is not None
    assert tinyrun.storage_temporaries(FileStorage(root), rid) == []
    run = nnx.NNRun.load(rid, root)
    whole = complete_epoch(last)
    assert sorted({r.epoch_idx for r in run.idps}) == list(range(whole + 1 if whole is not None else 0))
    records = list(run.committed_records(partial=True))
    inside = [r for r in records if r.epoch_idx == last.epoch]
    cut = len(records) - len(inside)
    assert records[:cut] == list(run.idps) and records[cut:] == inside  # the partial epoch's records come last
    assert len(inside) == position.records, (len(inside), position)
    for tag in files.tags():
        manifest = files.read_tag(tag)
        assert manifest is not None and manifest.epoch <= last.epoch, (tag, manifest)
        for ref in manifest.blobs.values():
            files.read_blob(ref, verify=True)
    nnx.NNCheckpoint.verify(run)  # LAST's blobs, hashed in place
    assert last.run_id == rid and 0 < position.batches < PER_EPOCH
    return last.epoch, int(last.meta["update_count"]), position.state()


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The uninterrupted run of the same command."""
    tmp = tmp_path_factory.mktemp("reference")
    root, out = tmp / "runs", tmp / "final.pt"
    done = subprocess.run(command(root, out), capture_output=True, text=True, env=env(), cwd=SCRIPT.parent, timeout=RUN_S)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"update {UPDATES}" in done.stdout.splitlines()
    rid = run_id(root)
    run = nnx.NNRun.load(rid, root)
    assert tinyrun.check_committed_state(root, rid) == EPOCHS - 1
    return {"weights": torch.load(out, weights_only=True), "idps": list(run.idps), "rid": rid,
            "last": run.checkpoint("last").weights()}


def finish_like_reference(reference: dict[str, Any], root: Path, out: Path) -> None:
    """The same command once more: it ends bit-identical to the uninterrupted run."""
    done = subprocess.run(command(root, out), capture_output=True, text=True, env=env(), cwd=SCRIPT.parent, timeout=RUN_S)
    assert done.returncode == 0, done.stderr[-3000:]
    rid = run_id(root)
    assert rid == reference["rid"]
    assert tinyrun.same_weights(torch.load(out, weights_only=True), reference["weights"])
    run = nnx.NNRun.load(rid, root)
    assert list(run.idps) == reference["idps"]
    assert tinyrun.same_weights(run.checkpoint("last").weights(), reference["last"])
    assert tinyrun.check_committed_state(root, rid) == EPOCHS - 1
    assert tinyrun.disk_temporaries(root) == []


def test_sigkill_inside_epochs_redoes_at_most_commit_every_updates(reference: dict[str, Any], tmp_path: Path) -> None:
    root, out = tmp_path / "runs", tmp_path / "final.pt"
    kills = []  # (update seen when SIGKILL was sent, last announced, LAST's epoch, its updates, its position)
    for n, (k, delay) in enumerate(zip(SIGKILLS, DELAYS, strict=True)):
        child = Child(root, out, tmp_path / f"stderr-{n}.txt")
        seen = child.until_update(k)
        rc = child.end(signal.SIGKILL, delay)
        assert rc == -signal.SIGKILL, (rc, child.stderr()[-2000:])
        announced = child.announced()
        epoch, updates, position = check_state(root, reference["rid"])
        kills.append((seen, announced, epoch, updates, position))
        assert updates <= announced, kills  # nothing is committed before it is announced
        # the commit in flight may be lost with the process; the one before it is durable
        assert announced - updates <= 2 * EVERY, f"{announced - updates} updates to redo after the kill: {kills}"
    # the kills landed in every epoch, and some left a LAST inside its epoch (what the rerun resumes from)
    assert {(seen - 1) // PER_EPOCH for seen, *_ in kills} == set(range(EPOCHS)), kills
    assert any(position is not None for *_, position in kills), kills
    if os.environ.get("NNX_REPORT") == "1":
        print("\nSIGKILL (seen, announced, LAST epoch, LAST updates, position):\n" + "\n".join(map(str, kills)))
    finish_like_reference(reference, root, out)


PREEMPTED = re.compile(r"TrainingPreempted: run \w+ preempted by SIGTERM: epoch (\d+) is committed up to update (\d+)")


def test_sigterm_inside_epochs_commits_the_next_update_boundary(reference: dict[str, Any], tmp_path: Path) -> None:
    root, out = tmp_path / "runs", tmp_path / "final.pt"
    stops = []  # (update seen when SIGTERM was sent, the handler's, stopped at, LAST's epoch, its position)
    for n, k in enumerate(SIGTERMS):
        child = Child(root, out, tmp_path / f"stderr-{n}.txt")
        sent = child.until_update(k)
        rc = child.end(signal.SIGTERM)
        stderr = child.stderr()
        assert rc != 0 and "TrainingPreempted" in stderr, (rc, stderr[-2000:])
        found = PREEMPTED.search(stderr)
        assert found is not None, stderr[-2000:]
        (handled,) = [int(line.split()[1]) for line in child.lines if line.startswith("sigterm-seen ")]
        stopped = child.announced()
        epoch, updates, position = check_state(root, reference["rid"])
        stops.append((sent, handled, stopped, epoch, position))
        assert sent <= handled and int(found[2]) == stopped == updates, (found[0], stops)
        assert int(found[1]) == epoch, (found[0], stops)
        assert 0 <= stopped - handled <= 1, f"stopped {stopped - handled} updates after the signal: {stops}"
    if os.environ.get("NNX_REPORT") == "1":
        print("\nSIGTERM (sent at, handler ran at, stopped at, LAST epoch, position):\n" + "\n".join(map(str, stops)))
    finish_like_reference(reference, root, out)
