"""Asynchronous commits (``NNTrainParams.async_commits``) against the synchronous ones, the oracle.

* The same training writes the same run folder either way, byte for byte (the attempt record, a
  fresh id and clock per attempt, aside), with commits inside epochs, phase tags, BEST and a
  ``ModelCheckpoint`` weights tag — and so it does when the background writer is held until
  training has moved on by two updates: what is written is the snapshot of the commit point, never
  the live state.
* ``train()`` returns, or raises, only once the commit in flight has ended: no commit thread is
  left and LAST is the last commit.
* ``async_commits`` is a flag, and not part of the run id.
"""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from nnx_adapters import runner as runner_module
import nnx_api as nnx
from nnx_api.runs import payload as payload_module
from nnx_api.training import writer as writer_module


def _files(root: Path) -> dict[str, str]:
    """Path → SHA-256 of every file under ``root``, leases and attempt records aside."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".leases" not in p.parts and p.name != "attempt.json"
    }


def _train(root: Path, callbacks=(), **kw) -> nnx.NNRun:
    x, y = torch.randn(96, 4, generator=torch.Generator().manual_seed(0)), torch.arange(96) % 3
    loader = DataLoader(TensorDataset(x, y), batch_size=8, shuffle=True, generator=torch.Generator().manual_seed(1))
    val = DataLoader(TensorDataset(x[:32], y[:32]), batch_size=16)
    kw.setdefault("n_epochs", 4)
    params = nnx.NNTrainParams(seed=0, train_loader=loader, val_loader=val, progress=False, commit_every=5,
                               optim=nnx.NNOptimParams(name="adam", max_lr=0.01), **kw)
    torch.manual_seed(0)
    model = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(16,)), nnx.NNModelParams())
    return model.train(params, root=root, callbacks=[nnx.ModelCheckpoint(epochs=[1, 2]), *callbacks])


def _commit_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "nnx-commit"]


@pytest.fixture
def own_threads():
    """The commit workers this test started and left running: none may outlive ``train()``
    (another test of this process may leave an idle worker of its own, which ends by itself)."""
    before = set(_commit_threads())
    return lambda: [t for t in _commit_threads() if t not in before]


class Gate:
    """A runner whose commit waits until training has made ``updates`` more optimizer updates (or
    waits for it itself): the background write happens while training has moved on."""

    def __init__(self, updates: int) -> None:
        self.updates, self.seen, self.open = updates, 0, None
        self.moved_on = 0  # commits whose write began after training had moved on
        self.runner = runner_module.ThreadRunner()
        self.close = self.runner.close

    def start(self, work):
        gate = threading.Event()
        self.open, self.opened_at = gate, self.seen

        def held() -> None:
            gate.wait()
            work()

        run = self.runner.start(held)
        wait = run.wait

        def waited() -> None:
            gate.set()  # training waits for it: the write goes on now
            wait()

        run.wait = waited
        return run

    def on_update(self) -> None:
        self.seen += 1
        if self.open is not None and not self.open.is_set() and self.seen - self.opened_at >= self.updates:
            self.moved_on += 1
            self.open.set()


class Updates(nnx.Callback):
    def __init__(self, gate: Gate) -> None:
        self.gate = gate

    def on_optimizer_update(self, ctx, event) -> None:
        self.gate.on_update()


def test_the_same_training_writes_the_same_files_with_and_without_async_commits(tmp_path):
    sync = _train(tmp_path / "sync", async_commits=False)
    background = _train(tmp_path / "async", async_commits=True)
    assert sync.id == background.id  # a runtime choice: not part of the run id
    written = _files(tmp_path / "async")
    assert {f"{sync.id}/checkpoints/{tag}.json" for tag in ("best", "first", "q2", "q3", "last", "custom_e1", "custom_e2")} <= set(written)
    assert written == _files(tmp_path / "sync")


def test_an_unchanged_final_model_is_not_written_again_and_last_is_the_same(tmp_path, monkeypatch):
    """One epoch: its commit moves FIRST and BEST too. The final refresh finds the model as the
    commit staged it and writes no blob; LAST is the file a synchronous run's refresh writes."""
    encoded = []
    encoder = payload_module.CheckpointPayload.encoder
    def counted(self, staging=None):
        encoded.append(staging is not None and not staging.devices_only)  # a snapshot of every tensor
        return encoder(self, staging)

    monkeypatch.setattr(payload_module.CheckpointPayload, "encoder", counted)
    sync = _train(tmp_path / "sync", async_commits=False, n_epochs=1)
    commits = len(encoded) - 1  # two inside the epoch (commit_every=5 of 12 updates), its end; then the refresh
    assert commits == 3 and encoded == [False] * 4
    encoded.clear()
    _train(tmp_path / "async", async_commits=True, n_epochs=1)
    assert encoded == [True] * commits  # the commits' snapshots only: no refresh blob
    written = _files(tmp_path / "async")
    assert {f"{sync.id}/checkpoints/{tag}.json" for tag in ("first", "best", "last")} <= set(written)
    assert written == _files(tmp_path / "sync")


def test_the_writer_writes_the_commit_points_snapshot_while_training_moves_on(tmp_path, monkeypatch, own_threads):
    gate = Gate(updates=2)
    monkeypatch.setattr(writer_module, "ThreadRunner", lambda: gate)
    _train(tmp_path / "async", callbacks=[Updates(gate)], async_commits=True)
    assert gate.moved_on >= 4  # commits written after two more updates had changed the live weights
    _train(tmp_path / "sync", async_commits=False)
    assert _files(tmp_path / "async") == _files(tmp_path / "sync")
    assert not own_threads()


def test_train_returns_with_the_last_commit_durable(tmp_path, own_threads):
    run = _train(tmp_path, async_commits=True)
    assert not own_threads()
    assert run.checkpoint("last").epoch == 3 and nnx.NNRun.load(run.id, tmp_path).checkpoint("last").epoch == 3


def test_a_training_error_waits_for_the_commit_in_flight(tmp_path, monkeypatch, own_threads):
    gate = Gate(updates=10**6)  # held until training waits for it

    class Fails(nnx.Callback):
        def on_epoch_begin(self, ctx) -> None:
            if ctx.epoch == 2:
                raise RuntimeError("boom")

    monkeypatch.setattr(writer_module, "ThreadRunner", lambda: gate)
    with pytest.raises(RuntimeError, match="boom"):
        _train(tmp_path, callbacks=[Fails()], async_commits=True)
    assert not own_threads()
    run_id = next(p.name for p in tmp_path.iterdir() if not p.name.startswith("."))
    last = nnx.NNRun.load(run_id, tmp_path).checkpoint("last")
    assert last.epoch == 1  # epoch 1's commit, in flight when the error came, is durable


def test_async_commits_is_a_flag():
    with pytest.raises(nnx.ParamsError, match="async_commits"):
        nnx.NNTrainParams(n_epochs=1, async_commits="yes")


class HalvesAtEnd(nnx.Callback):
    """Changes the model after the last commit: the final LAST refresh must write it."""

    def on_train_end(self, ctx) -> None:
        with torch.no_grad():
            next(ctx.model.net.parameters()).mul_(0.5)


def test_a_model_changed_after_the_last_commit_is_written_by_the_final_refresh(tmp_path):
    sync = _train(tmp_path / "sync", callbacks=[HalvesAtEnd()], async_commits=False, n_epochs=1)
    background = _train(tmp_path / "async", callbacks=[HalvesAtEnd()], async_commits=True, n_epochs=1)
    assert _files(tmp_path / "async") == _files(tmp_path / "sync")
    unchanged = _train(tmp_path / "plain", async_commits=True, n_epochs=1)
    halved, kept = background.checkpoint("last").weights(), unchanged.checkpoint("last").weights()
    first = next(iter(kept))
    assert torch.equal(halved[first], kept[first] * 0.5) and sync.id == background.id
