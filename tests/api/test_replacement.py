"""Replacing a finished run (``overwrite_existing=True``) never loses it: the previous run stays
committed, readable and restorable until the replacement commits its first epoch.

The oracle is the previous run's own files: every byte of them (read before the replacement
started) must be there again when the replacement fails, and the public readers must return the
previous run's LAST, BEST and history while it is kept aside.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
import torch

from nnx_core import replacement
from nnx_core.commit import RunFiles
from nnx_adapters.storage.fs import FileStorage
import nnx_api as nnx
from nnx_api.cli import main as cli

from tests.api.tiny import batches, tiny_data


def _model() -> nnx.NNModel:
    torch.manual_seed(0)
    return nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(8,)), nnx.NNModelParams())


def _params(loader, **kw) -> nnx.NNTrainParams:
    return nnx.NNTrainParams(n_epochs=2, optim=nnx.NNOptimParams(max_lr=0.05), seed=0, train_loader=loader,
                             val_loader=loader, progress=False, **kw)


def _files(root: Path) -> dict[str, str]:
    """Path → SHA-256 of every file under ``root`` (leases left out)."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*")) if p.is_file() and ".leases" not in p.parts
    }


def _digest(state) -> str:
    """SHA-256 over a state dict's tensors, in key order."""
    h = hashlib.sha256()
    for name, tensor in sorted(state.items()):
        h.update(name.encode() + tensor.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def _other_data(nan_batch: int | None = None):
    """Data of the same shapes as the first run's, but other rows; optionally a NaN row in one batch."""
    x, y = tiny_data(seed=1)
    if nan_batch is not None:
        x = x.clone()
        x[nan_batch * 8] = float("nan")
    return batches(x, y, 8)


@pytest.fixture
def finished(tmp_path):
    """A finished run (LAST at epoch 1) and a copy of its files."""
    x, y = tiny_data()
    run = _model().train(_params(batches(x, y, 8), resume="auto"), root=tmp_path / "runs")
    assert run.checkpoint("last").epoch == 1
    return tmp_path / "runs", run, _files(tmp_path / "runs" / run.id)


def test_a_failed_replacement_keeps_the_finished_run_byte_for_byte(finished):
    root, run, before = finished
    with pytest.raises(nnx.DataChangedError, match="overwrite_existing=True") as refused:
        _model().train(_params(_other_data(), resume="auto"), root=root)
    assert "drop resume='auto' and pass overwrite_existing=True" in str(refused.value)  # the advice stays
    with pytest.raises(nnx.NonFiniteLossError):  # the advice followed, and the new attempt fails in its first epoch
        _model().train(_params(_other_data(nan_batch=3), overwrite_existing=True), root=root)
    after = _files(root / run.id)
    assert after.pop(replacement.NOTE) is not None  # the rollback's note, and nothing else changed
    assert after == before
    kept = nnx.NNRun.load(run.id, root)
    assert kept.checkpoint("last").epoch == 1 and kept.checkpoint("best") is not None
    assert [r.epoch_idx for r in kept.idps] == [r.epoch_idx for r in run.idps]
    assert not (root / replacement.aside(run.id)).exists()


def test_the_cli_says_what_happened_to_a_replacement(finished, capsys):
    root, run, _ = finished
    with pytest.raises(nnx.NonFiniteLossError):
        _model().train(_params(_other_data(nan_batch=3), overwrite_existing=True), root=root)
    assert cli(["runs", "list", "--root", str(root)]) == 0
    assert "replacement failed; previous run kept" in capsys.readouterr().out
    assert cli(["runs", "verify", run.id[:8], "--root", str(root)]) == 0
    assert "replacement failed; previous run kept" in capsys.readouterr().out
    replaced = _model().train(_params(_other_data(), overwrite_existing=True), root=root)
    assert replaced.id == run.id and replaced.checkpoint("last").epoch == 1
    assert cli(["runs", "list", "--root", str(root)]) == 0
    assert "replaced by attempt" in capsys.readouterr().out
    assert not (root / replacement.aside(run.id)).exists()


@pytest.mark.parametrize("async_commits", [False, True])
def test_the_previous_run_is_retired_once_the_first_epoch_is_durable(finished, async_commits):
    """Synchronous commits: the next epoch begins with the first commit durable and the old run
    gone. Asynchronous ones: the first commit may still be in flight then, and a reader sees the
    old run whole or the new one, never a mix."""
    root, run, before = finished
    seen = []

    def read():
        loaded = nnx.NNRun.load(run.id, root)
        last = loaded.checkpoint("last")
        return (root / replacement.aside(run.id)).exists(), last.epoch, _digest(last.weights())

    class Probe(nnx.Callback):
        def on_epoch_begin(self, ctx):  # what readers see before each epoch of the replacement
            try:
                seen.append((ctx.epoch, *read()))
            except nnx.StaleCheckpointError:  # the old run was retired between reading its LAST and its blob
                assert async_commits and not (root / replacement.aside(run.id)).exists()
                seen.append((ctx.epoch, *read()))  # a reader loads again: the new run, whole

    old = _digest(nnx.NNRun.load(run.id, root).checkpoint("last").weights())
    replaced = _model().train(_params(_other_data(), overwrite_existing=True, async_commits=async_commits), root=root,
                              callbacks=[Probe()])
    (epoch0, aside0, last0, weights0), (epoch1, aside1, last1, weights1) = seen
    assert (epoch0, aside0, last0, weights0) == (0, True, 1, old)  # the old run, read from where it is kept
    if async_commits and (aside1, last1, weights1) == (True, 1, old):  # the first commit still in flight: the old run
        pass
    else:  # the new run's first commit (its writer may not have removed the old one yet)
        assert last1 == 0 and weights1 != old and (aside1 is False or async_commits)
    assert replaced.checkpoint("last").epoch == 1 and not (root / replacement.aside(run.id)).exists()


def test_a_checkpoint_of_the_old_run_read_before_the_replacement_committed_is_stale_after(finished):
    """A reader holds the old run's LAST (read from the folder aside) while the replacement trains;
    once the replacement has committed, the old run's files are gone. Its payload read then says
    so and what to do, and is never reported as a corrupt run; loaded again, the new run reads whole."""
    root, run, _ = finished
    held = []

    class Reader(nnx.Callback):
        def on_epoch_begin(self, ctx):
            if ctx.epoch == 0:
                held.append(nnx.NNRun.load(run.id, root).checkpoint("last"))

    replaced = _model().train(_params(_other_data(), overwrite_existing=True), root=root, callbacks=[Reader()])
    assert not (root / replacement.aside(run.id)).exists()
    with pytest.raises(nnx.StaleCheckpointError, match="read the checkpoint again") as stale:
        held[0].weights()
    assert not isinstance(stale.value, nnx.CorruptRunError)
    again = nnx.NNRun.load(run.id, root).checkpoint("last")
    assert again.epoch == 1 and _digest(again.weights()) == _digest(replaced.checkpoint("last").weights())


def test_a_history_streamed_from_the_old_run_is_stale_once_the_replacement_committed(tmp_path):
    """A journal run's history streamed lazily (``iter_history``) from the folder aside: once the
    replacement has committed, its next chunk is gone. The stream says so and what to do, never
    that the history is corrupt; started again, it streams the new run."""
    root, journal = tmp_path / "runs", nnx.HistoryJournal(chunk_size=1)
    run = _model().train(_params(batches(*tiny_data(), 8)), root=root, history=journal)
    old = list(nnx.iter_history(run.id, root))
    streams = []

    class Reader(nnx.Callback):
        def on_epoch_begin(self, ctx):
            if ctx.epoch == 0:
                stream = nnx.iter_history(run.id, root)
                streams.append((next(stream), stream))  # the old run's first record, read from the folder aside

    replaced = _model().train(_params(_other_data(), overwrite_existing=True), root=root,
                              history=journal, callbacks=[Reader()])
    first, stream = streams[0]
    assert first == old[0] and len(old) > 1
    with pytest.raises(nnx.StaleCheckpointError, match="read the history again") as stale:
        list(stream)
    assert not isinstance(stale.value, nnx.HistoryCorruptionError)
    assert list(nnx.iter_history(run.id, root)) == list(replaced.committed_records())


def test_a_killed_replacement_is_settled_by_the_next_train(finished, monkeypatch):
    """The replacement's writer dies inside its first epoch (no ``Exception``: nothing is cleaned up);
    readers still get the previous run, and the next ``train()`` restores it before anything else."""
    root, run, before = finished

    class Killed(BaseException):
        pass

    class Kill(nnx.Callback):
        def on_epoch_end(self, ctx):
            raise Killed

    with pytest.raises(Killed):
        _model().train(_params(_other_data(), overwrite_existing=True), root=root, callbacks=[Kill()])
    assert (root / replacement.aside(run.id)).is_dir()
    assert nnx.NNRun.load(run.id, root).checkpoint("last").epoch == 1  # readers: the previous run
    assert [r.id for r in nnx.NNRun.all(root)] == [run.id]
    with pytest.warns(RuntimeWarning, match="previous run kept"):
        again = _model().train(_params(batches(*tiny_data(), 8), resume="auto"), root=root)  # the first command again
    assert again.checkpoint("last").epoch == 1
    after = _files(root / run.id)
    assert after.pop(replacement.NOTE) is not None and after == before


def test_verify_repair_settles_a_killed_replacement(finished, capsys):
    root, run, before = finished
    storage = FileStorage(root)
    files = RunFiles(storage, run.id)
    replacement.begin(files, "f" * 32, "2026-12-03T00:00:00+00:00")  # as a killed replacement leaves it
    storage.write(f"{run.id}/run.yaml", b"id: other\n")
    assert cli(["runs", "verify", run.id[:8], "--root", str(root)]) == 0
    assert "being replaced" in capsys.readouterr().out
    assert cli(["runs", "verify", run.id[:8], "--root", str(root), "--repair"]) == 0
    assert "repair: previous run kept" in capsys.readouterr().out
    after = _files(root / run.id)
    assert after.pop(replacement.NOTE) is not None and after == before


def test_a_second_process_meets_the_lease_during_a_replacement(finished):
    root, run, _ = finished
    errors = []

    class Second(nnx.Callback):
        def on_epoch_begin(self, ctx):
            if ctx.epoch == 0:
                try:
                    _model().train(_params(_other_data(), overwrite_existing=True), root=root)
                except nnx.RunLeaseError as exc:
                    errors.append(exc)

    _model().train(_params(_other_data(), overwrite_existing=True), root=root, callbacks=[Second()])
    assert len(errors) == 1


def test_a_replacement_that_committed_keeps_going_after_a_kill(finished):
    """Killed after its first commit: the new run is the run, and resume='auto' continues it."""
    root, run, _ = finished

    class Killed(BaseException):
        pass

    class Kill(nnx.Callback):
        def on_epoch_begin(self, ctx):
            if ctx.epoch == 1:
                raise Killed

    with pytest.raises(Killed):
        _model().train(_params(_other_data(), overwrite_existing=True), root=root, callbacks=[Kill()])
    loaded = nnx.NNRun.load(run.id, root)
    assert loaded.checkpoint("last").epoch == 0 and not (root / replacement.aside(run.id)).exists()
    assert _model().train(_params(_other_data(), resume="auto"), root=root).checkpoint("last").epoch == 1
    assert os.listdir(root) == [run.id] or sorted(os.listdir(root)) == sorted([run.id, ".leases"])


def test_ctrl_c_during_a_replacement_puts_the_previous_run_back_at_once(finished):
    root, run, before = finished

    class CtrlC(nnx.Callback):
        def on_epoch_end(self, ctx):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _model().train(_params(_other_data(), overwrite_existing=True), root=root, callbacks=[CtrlC()])
    assert not (root / replacement.aside(run.id)).exists()
    after = _files(root / run.id)
    assert b"KeyboardInterrupt" in (root / run.id / replacement.NOTE).read_bytes()
    assert after.pop(replacement.NOTE) is not None and after == before
