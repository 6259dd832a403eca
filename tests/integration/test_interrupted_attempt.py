"""One truth about an interrupted attempt: a real process SIGKILLed after its first commit.

A killed writer cannot rewrite its attempt record: ``attempt.json`` keeps saying "running", with
no committed epoch (the record is not rewritten per epoch; LAST is the commit marker). Every
reader reads it through ``nnx_core.admission.attempt_now``, so the public reader
(``NNRun.attempt()``) and ``nnx runs list / show`` agree: "running" while the writer holds the
lease, "interrupted" once it is gone, and the last committed epoch is LAST's. The next
``train()`` settles the record on disk: its ``earlier`` keeps the killed attempt as
"interrupted" with the epoch it committed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import tinyrun

import nnx_api as nnx
from nnx_api.cli import main

SCRIPT = Path(__file__).with_name("train_script.py")
EPOCHS = 3
pytestmark = pytest.mark.timeout(240)


def list_row(capsys, root: Path) -> dict[str, str]:
    assert main(["runs", "list", "--root", str(root)]) == 0
    header, row, *rest = capsys.readouterr().out.splitlines()
    assert not rest
    starts = [header.index(name) for name in header.split()] + [None]  # the table's columns line up
    return {name: row[a:b].strip() for name, a, b in zip(header.split(), starts, starts[1:], strict=False)}


def show(capsys, root: Path, rid: str) -> str:
    assert main(["runs", "show", rid[:8], "--root", str(root)]) == 0
    return capsys.readouterr().out


def test_a_killed_attempt_reads_the_same_everywhere(tmp_path, capsys):
    root, release = tmp_path / "runs", tmp_path / "release"
    env = {**os.environ, "NNX_PROGRESS": "0", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(  # holds at epoch 1's on_epoch_end: epoch 0 is committed, epoch 1 not yet
        [sys.executable, str(SCRIPT), str(root), str(tmp_path / "a.pt"), "--epochs", str(EPOCHS),
         "--hold", str(release), "--hold-epoch", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=SCRIPT.parent,
    )
    try:
        for line in proc.stdout:
            if line.strip() == "holding":
                break
        else:
            raise AssertionError(f"the script ended before holding (exit {proc.wait(timeout=30)})")
        rid = tinyrun.run_id(EPOCHS)
        live = nnx.NNRun.load(rid, root).attempt()  # its writer holds the lease: really running
        assert (live["status"], live["last_committed_epoch"]) == ("running", 0)
        assert (list_row(capsys, root)["STATUS"], list_row(capsys, root)["EPOCHS"]) == ("running", "1")
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=60) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=60)
        proc.stdout.close()

    on_disk = json.loads((root / rid / "attempt.json").read_text())
    assert (on_disk["status"], on_disk["last_committed_epoch"]) == ("running", None)  # what the kill left

    attempt = nnx.NNRun.load(rid, root).attempt()
    row = list_row(capsys, root)
    assert attempt["status"] == row["STATUS"] == "interrupted"
    assert attempt["last_committed_epoch"] == int(row["EPOCHS"]) - 1 == 0
    assert attempt["last_committed_tag"] == "last"
    assert f"attempt: interrupted since {on_disk['started_at']} (LAST epoch 0)" in show(capsys, root, rid)

    _, run = tinyrun.train(root, EPOCHS)  # the same command again: admitted, it settles the record
    settled = json.loads((run.path / "attempt.json").read_text())
    assert settled["status"] == "completed" and settled["number"] == 2
    killed = settled["earlier"][-1]
    assert (killed["attempt_id"], killed["status"], killed["last_committed_epoch"]) == (
        on_disk["attempt_id"], "interrupted", 0)
    assert run.attempt()["status"] == list_row(capsys, root)["STATUS"] == "completed"
    assert run.attempt()["last_committed_epoch"] == EPOCHS - 1
