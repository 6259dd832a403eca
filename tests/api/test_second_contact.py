"""Rough edges an experienced PyTorch user meets after the first hour: each gets a clear answer
or the behaviour they expect from other tools (a shell's ``~``, a file's usual mode, Ctrl-C)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import nnx_api as nnx
from tests.api.tiny import batches, tiny_data


def _train(root, callbacks=None, **train):
    x, y = tiny_data()
    nnx.set_seed(0)
    model = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(8,)))
    params = nnx.NNTrainParams(n_epochs=2, seed=0, train_loader=batches(x, y, 16), progress=False, **train)
    return model, model.train(params, root=root, callbacks=callbacks)


def test_a_root_under_the_home_folder_is_expanded_as_a_shell_does(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    _, run = _train("~/experiments")
    assert run.path == tmp_path / "home" / "experiments" / run.id and run.path.is_dir()
    assert not (tmp_path / "~").exists()
    assert nnx.NNRun.load(run.id, "~/experiments").id == run.id


def test_an_empty_root_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(nnx.ParamsError, match="root: is empty; pass root=None"):
        _train("")
    monkeypatch.setenv("NNX_RUNS", " ")
    with pytest.raises(nnx.ParamsError, match=r"\$NNX_RUNS: is empty"):
        _train(None)
    assert list(tmp_path.iterdir()) == []


class CtrlC(nnx.Callback):
    """Ctrl-C in the middle of ``epoch``."""

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch

    def on_epoch_begin(self, ctx) -> None:
        if ctx.epoch == self.epoch:
            raise KeyboardInterrupt


def _attempt(run_folder: Path) -> dict:
    return json.loads((run_folder / "attempt.json").read_text())


def test_ctrl_c_records_the_attempt_as_interrupted_and_resume_continues(tmp_path):
    root = tmp_path / "runs"
    with pytest.raises(KeyboardInterrupt):
        _train(root, callbacks=[CtrlC(1)], resume="auto")
    (folder,) = [p for p in root.iterdir() if not p.name.startswith(".")]
    record = _attempt(folder)
    assert record["status"] == "interrupted" and record["finished_at"] and record["last_committed_epoch"] == 0
    assert record["error"].startswith("KeyboardInterrupt")
    _, run = _train(root, resume="auto")
    assert run.checkpoint("last").epoch == 1 and _attempt(folder)["status"] == "completed"


def test_ctrl_c_before_the_first_commit_leaves_a_run_the_same_call_starts_over(tmp_path):
    root = tmp_path / "runs"
    with pytest.raises(KeyboardInterrupt):
        _train(root, callbacks=[CtrlC(0)])
    (folder,) = [p for p in root.iterdir() if not p.name.startswith(".")]
    assert _attempt(folder)["status"] == "interrupted"
    _, run = _train(root)  # no resume="auto" needed: nothing was committed
    assert run.checkpoint("last").epoch == 1
