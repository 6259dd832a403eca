"""``storage=``: a run trained, resumed and read back entirely in a MemoryStorage (issue 21).

Nothing touches the file system: the runs root stays absent, every reader goes through the same
store, and a resume from the in-memory LAST continues the run exactly as it would on disk.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import nnx_api as nnx
from nnx_api.storage import MemoryStorage

from tests.api.tiny import batches, tiny_data

ROOT = Path(__file__).resolve().parents[2]


def params(x, y, **kw):
    return nnx.NNTrainParams(n_epochs=3, seed=0, train_loader=batches(x, y, 8), val_loader=batches(x, y, 16),
                             optim=nnx.NNOptimParams(max_lr=1e-2), progress=False, **kw)


def model():
    torch.manual_seed(0)
    return nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(8,)), nnx.NNModelParams())


class FailAt(nnx.Callback):
    distributed = "all"

    def __init__(self, epoch):
        self.epoch = epoch

    def on_epoch_end(self, ctx):
        if ctx.epoch == self.epoch:
            raise RuntimeError("stop here")


def test_train_resume_and_read_back_in_memory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    x, y = tiny_data()
    store = MemoryStorage()
    straight = model().train(params(x, y), storage=MemoryStorage())  # the uninterrupted reference
    with pytest.raises(RuntimeError, match="stop here"):
        model().train(params(x, y), callbacks=[FailAt(1)], storage=store)
    (listed,) = nnx.NNRun.all(storage=store)
    assert listed.id == straight.id and listed.checkpoint("last").epoch == 0
    resumed_model = model()
    run = resumed_model.train(params(x, y, resume="auto"), storage=store)
    assert run.resume_status["mode"] == "stateful" and run.checkpoint("last").epoch == 2
    assert list(nnx.NNRun.load(run.id, storage=store).idps) == list(straight.idps)
    reloaded = nnx.NNModel.from_checkpoint(run.id, "last", storage=store)
    for key, value in reloaded.net.state_dict().items():
        assert torch.equal(value, straight.checkpoint("last").weights()[key])
    assert not (tmp_path / "runs").exists()  # nothing on disk


def test_trainer_and_plans_take_the_store(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    x, y = tiny_data()
    store = MemoryStorage()
    trainer_params = nnx.NNTrainerParams(n_epochs=2, optims={"default": nnx.NNOptimParams(max_lr=1e-2)},
                                         train_loader=batches(x, y, 8), progress=False)
    trained = nnx.Trainer(model()).train(trainer_params, objective=nnx.supervised_objective(), storage=store)
    assert nnx.NNRun.load(trained.id, storage=store).checkpoint("last").payload()["kind"] == "trainer"
    plan = nnx.ExperimentPlan(
        net=nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(8,)), train=params(x, y)
    ).with_data(batches(x, y, 8)).with_storage(store)
    fit = plan.fit()
    assert nnx.NNRun.load(fit.run.id, storage=store).checkpoint("last").epoch == 2
    assert not (tmp_path / "runs").exists()


def test_the_adapters_doc_example_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    text = (ROOT / "docs" / "adapters.md").read_text()
    section = text.split("## Training on another store", 1)[1].split("\n## ", 1)[0]
    (snippet,) = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    exec(compile(snippet, "docs/adapters.md", "exec"), {})  # noqa: S102 - our own docs
    assert not (tmp_path / "runs").exists()


def history_appends(store: MemoryStorage) -> int:
    return sum(1 for _, kind, path in store.log if kind == "append" and path.endswith("/idps.csv"))


def test_each_session_replaces_the_history_at_its_first_commit_then_appends(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    x, y = tiny_data()
    store = MemoryStorage()
    with pytest.raises(RuntimeError, match="stop here"):
        model().train(params(x, y), callbacks=[FailAt(1)], storage=store)  # commits epoch 0 only
    assert history_appends(store) == 0  # a session's first commit replaces the file whole
    run = model().train(params(x, y, resume="auto"), storage=store)  # epochs 1 (replaced) and 2 (appended)
    assert history_appends(store) == 1
    fresh = MemoryStorage()
    model().train(params(x, y), storage=fresh)
    assert history_appends(fresh) == 2  # epochs 1 and 2 of one session
    for s in (store, fresh):
        data = s.read(f"{run.id}/idps.csv")
        assert run.checkpoint("last").epoch == 2
        assert s.read(f"{run.id}/checkpoints/last.json").count(b'"history_bytes": %d' % len(data)) == 1


def test_a_resume_reads_past_a_torn_history_tail_and_replaces_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    x, y = tiny_data()
    straight = model().train(params(x, y), storage=MemoryStorage())
    store = MemoryStorage()
    with pytest.raises(RuntimeError, match="stop here"):
        model().train(params(x, y), callbacks=[FailAt(1)], storage=store)
    path = f"{straight.id}/idps.csv"
    committed = store.read(path)
    store.append(path, b"5,1,0,0.01" + b"\0" * 32)  # a crash inside epoch 1's append: a torn, zero-filled tail
    loaded = nnx.NNRun.load(straight.id, storage=store)  # cut at LAST's history_bytes: epoch 0's records
    assert list(loaded.idps) == [r for r in straight.idps if r.epoch_idx == 0]
    run = model().train(params(x, y, resume="auto"), storage=store)
    assert list(run.idps) == list(straight.idps)
    assert store.read(path).startswith(committed) and b"\0" not in store.read(path)
