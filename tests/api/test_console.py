"""What a train() call tells the user on the console: the summary's seconds are the call's wall
time, a continued run says from which epoch, and Ctrl-C names the run and how to continue it."""

from __future__ import annotations

import re
import time

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import nnx_api as nnx

X, Y = torch.randn(40, 4, generator=torch.Generator().manual_seed(0)), torch.arange(40) % 3


def shuffled(seed: int) -> DataLoader:
    return DataLoader(TensorDataset(X, Y), batch_size=8, shuffle=True, generator=torch.Generator().manual_seed(seed))


def _train(root, callbacks=(), **train):
    nnx.set_seed(0)
    model = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(8,)))
    params = nnx.NNTrainParams(n_epochs=3, seed=0, train_loader=shuffled(1), val_loader=shuffled(2), **train)
    return model.train(params, callbacks=list(callbacks), root=root)


@pytest.fixture(autouse=True)
def _progress_on(monkeypatch):
    monkeypatch.setenv("NNX_PROGRESS", "1")  # the suite runs with NNX_PROGRESS=0
    monkeypatch.delenv("NNX_QUIET", raising=False)


class Slow(nnx.Callback):
    """Sleeps before the first epoch and after the last one."""

    def on_train_begin(self, ctx) -> None:
        time.sleep(0.3)

    def on_train_end(self, ctx) -> None:
        time.sleep(0.3)


class CtrlC(nnx.Callback):
    """Ctrl-C at the end of ``epoch`` (before it commits); remembers the run id it saw."""

    def __init__(self, epoch: int) -> None:
        self.epoch, self.run_id = epoch, None

    def on_epoch_end(self, ctx) -> None:
        self.run_id = ctx.run.id
        if ctx.epoch == self.epoch:
            raise KeyboardInterrupt


def test_the_summary_says_the_wall_time_of_the_whole_train_call(tmp_path, capsys):
    run = _train(tmp_path / "runs", callbacks=[Slow()])
    out, err = capsys.readouterr()
    (saved,), summary = out.splitlines(), err.splitlines()[-1]
    found = re.match(rf"run {run.id[:8]}: 3 epochs in ([\d.]+)s · ", summary)
    assert found, summary
    seconds = float(found.group(1))
    assert seconds >= 0.6  # the sleeps before the first epoch and after the last are part of the call
    assert saved.startswith("Run saved to ")


def test_a_continued_run_says_from_which_epoch_and_only_then(tmp_path, capsys):
    root = tmp_path / "runs"
    with pytest.raises(KeyboardInterrupt):
        _train(root, callbacks=[CtrlC(2)], resume="auto")
    first, _ = capsys.readouterr()
    assert "continuing" not in first  # a fresh run continues nothing
    run = _train(root, resume="auto")
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines[0] == f"continuing run {run.id[:8]} from epoch 2 (epochs 0..1 committed)", out
    summary = err.splitlines()[-1]
    assert summary.startswith(f"run {run.id[:8]}: 1 epoch in "), summary  # the summary: this call's epochs
    assert lines[1].startswith("Run saved to ") and len(lines) == 2 and "continuing" not in err
    assert sorted({r.epoch_idx for r in run.idps}) == [0, 1, 2]
    _train(root, resume="auto")  # finished: its own line, no "continuing"
    out, _ = capsys.readouterr()
    assert "already finished" in out and "continuing" not in out


def test_a_continued_run_from_one_committed_epoch_names_it(tmp_path, capsys):
    root = tmp_path / "runs"
    with pytest.raises(KeyboardInterrupt):
        _train(root, callbacks=[CtrlC(1)], resume="auto", progress=False)
    run = _train(root, resume="auto")
    assert capsys.readouterr().out.splitlines()[0] == f"continuing run {run.id[:8]} from epoch 1 (epoch 0 committed)"


def test_the_continue_line_follows_the_progress_switches(tmp_path, monkeypatch, capsys):
    root = tmp_path / "runs"
    with pytest.raises(KeyboardInterrupt):
        _train(root, callbacks=[CtrlC(1)], resume="auto", progress=False)
    monkeypatch.setenv("NNX_QUIET", "1")
    with pytest.raises(KeyboardInterrupt):
        _train(root, callbacks=[CtrlC(1)], resume="auto")  # continues from epoch 1, interrupted again
    out, err = capsys.readouterr()
    assert out == "" and "from epoch 1 (epoch 0 committed)" in err
    monkeypatch.delenv("NNX_QUIET")
    _train(root, resume="auto", progress=False)
    assert capsys.readouterr() == ("", "")


def test_ctrl_c_names_the_run_its_committed_epoch_and_how_to_continue(tmp_path):
    root = tmp_path / "runs"
    stop = CtrlC(1)
    with pytest.raises(KeyboardInterrupt) as raised:
        _train(root, callbacks=[stop], resume="auto", progress=False)
    exc = raised.value
    assert type(exc) is KeyboardInterrupt  # Ctrl-C keeps its meaning
    run_id = stop.run_id
    assert exc.nnx_run_id == run_id
    (note,) = [n for n in exc.__notes__ if n.startswith("NNx:")]
    assert run_id in note and "epoch 0 is committed" in note
    assert "resume='auto'" in note and "from epoch 1" in note
    run = _train(root, resume="auto", progress=False)  # what the note says works
    assert run.id == run_id and sorted({r.epoch_idx for r in run.idps}) == [0, 1, 2]


def test_ctrl_c_before_the_first_commit_says_nothing_is_committed(tmp_path):
    stop = CtrlC(0)
    with pytest.raises(KeyboardInterrupt) as raised:
        _train(tmp_path / "runs", callbacks=[stop], progress=False)
    assert raised.value.nnx_run_id == stop.run_id
    (note,) = [n for n in raised.value.__notes__ if n.startswith("NNx:")]
    assert stop.run_id in note and "no committed epoch" in note and "run the same call again" in note
