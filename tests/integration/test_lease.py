"""Two processes on one run id: the second is refused at once with ``RunLeaseError``.

Process A trains the script's run and, holding the run's lease, pauses after epoch 0 until the
test lets it go. While A is paused: process B (same command, ``resume="auto"``) and process C
(``overwrite_existing=True``) must both exit with ``RunLeaseError`` — and they must do so while A
is still paused, which is what "at once" means here (they did not wait for the lease). The test
process itself is refused too, and can still read the run. Then A finishes: its run is intact
and its final weights are bit-identical to an uninterrupted in-process run of the same script.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import tinyrun
import torch

import nnx_api as nnx
from nnx_api.storage import FileStorage

SCRIPT = Path(__file__).with_name("train_script.py")
pytestmark = pytest.mark.timeout(240)


def spawn(*args: str) -> subprocess.Popen:
    env = {**os.environ, "NNX_PROGRESS": "0", "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, str(SCRIPT), *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=SCRIPT.parent
    )


def wait_for(proc: subprocess.Popen, line: str) -> None:
    for got in proc.stdout:  # bounded by the test's timeout and A's own 60 s hold limit
        if got.strip() == line:
            return
    raise AssertionError(f"process ended before printing {line!r} (exit {proc.wait(timeout=30)})")


def test_a_second_process_is_refused_at_once_and_nothing_is_corrupted(tmp_path):
    root, release = tmp_path / "runs", tmp_path / "release"
    a = spawn(str(root), str(tmp_path / "a.pt"), "--hold", str(release))
    others: list[subprocess.Popen] = []
    try:
        wait_for(a, "holding")
        others = [
            spawn(str(root), str(tmp_path / "b.pt")),
            spawn(str(root), str(tmp_path / "c.pt"), "--overwrite"),
        ]
        for proc in others:
            out, _ = proc.communicate(timeout=120)
            assert proc.returncode == 3, out
            assert "lease-refused" in out and "another process is training or overwriting run" in out
        assert a.poll() is None, "A must still hold the lease: B and C did not wait for it"
        assert not (tmp_path / "b.pt").exists() and not (tmp_path / "c.pt").exists()

        with pytest.raises(nnx.RunLeaseError):  # this process too
            tinyrun.train(root)
        with pytest.raises(nnx.RunLeaseError):
            tinyrun.train(root, resume=None, overwrite_existing=True)
        rid = tinyrun.run_id()
        assert nnx.NNRun.load(rid, root).id == rid  # readers are never blocked by the lease

        release.touch()
        out, _ = a.communicate(timeout=120)
        assert a.returncode == 0, out
    finally:
        for proc in [a, *others]:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)

    assert tinyrun.check_committed_state(root, rid) == tinyrun.N_EPOCHS - 1
    assert tinyrun.disk_temporaries(root) == []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _, reference = tinyrun.train(tmp_path / "reference")
    finally:
        torch.set_num_threads(threads)
    assert tinyrun.same_weights(torch.load(tmp_path / "a.pt", weights_only=True), reference.checkpoint("last").weights())
    assert list(nnx.NNRun.load(rid, root).idps) == list(reference.idps)


WORKERS = Path(__file__).with_name("worker_kill_script.py")


def test_a_run_killed_with_live_loader_workers_is_continued_at_once(tmp_path):
    """A SIGKILL leaves the DataLoader's worker processes alive for a few seconds (they poll for
    their parent's death). They were forked while the lease was held, and must never hold it:
    right after the kill the lease is free (taken here at once) and the same command continues."""
    env = {**os.environ, "NNX_PROGRESS": "0", "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    root = tmp_path / "runs"
    log = tmp_path / "killed.log"
    with log.open("w") as out:  # a file, not a pipe: waiting for the pipe's end would wait for the workers too
        killed = subprocess.Popen([sys.executable, str(WORKERS), str(root), "--kill"], stdout=out,
                                  stderr=subprocess.STDOUT, text=True, env=env)
        assert killed.wait(timeout=120) == -9, log.read_text()
    run_id = log.read_text().split("run ", 1)[1].split()[0]
    with FileStorage(str(root)).lease(run_id):  # at once: the orphaned workers hold nothing
        pass
    rerun = subprocess.run([sys.executable, str(WORKERS), str(root)], capture_output=True, text=True, env=env, timeout=120)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert rerun.stdout.split("done ", 1)[1].split()[:2] == [run_id, "stateful"]
