"""Rough edges an experienced PyTorch user meets after the first hour: each gets a clear answer
or the behaviour they expect from other tools (a shell's ``~``, a file's usual mode, Ctrl-C)."""

from __future__ import annotations

import builtins
import errno
import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
import torch

import nnx_api as nnx
from nnx_api.cli import main

from tests.api.tiny import batches, tiny_data


def _train(root, callbacks=None, **train):
    x, y = tiny_data()
    nnx.set_seed(0)
    model = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(8,)))
    train = {"train_loader": batches(x, y, 16), **train}
    params = nnx.NNTrainParams(n_epochs=2, seed=0, progress=False, **train)
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


@pytest.fixture(scope="module")
def model():
    nnx.set_seed(0)
    return nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(8,)))


def test_one_row_given_1d_is_predicted_as_one_row(model):
    row = torch.randn(4)
    with torch.no_grad():
        expected = model.net.eval()(row.unsqueeze(0))  # plain torch: the net on a batch of one row
    assert np.array_equal(model.predict(row)[0], expected.numpy())
    spec = nnx.ProbabilitySpec("categorical")
    assert np.array_equal(model.predict_proba(row, spec).logits, expected.numpy())
    assert model.predict_proba(row, spec).probabilities.shape == (1, 3)


@pytest.mark.parametrize("inputs, pattern", [
    ([[0.1, 0.2, 0.3, 0.4]], r"Python list of numbers; pass a tensor"),
    ([0.1, 0.2, 0.3, 0.4], r"Python list of numbers; pass a tensor"),
    (torch.randn(2, 5), r"shape \[2, 5\], but NNParams.input_dim is 4"),
    (torch.randn(2, 3, 4), r"shape \[2, 3, 4\], but NNParams.input_dim is 4"),
    (torch.randn(3), r"shape \[3\], but NNParams.input_dim is 4"),
    (torch.randn(2, 4, dtype=torch.float64), r"torch.float64 .* x.float\(\)"),
    (torch.ones(2, 4, dtype=torch.long), r"torch.int64 .* x.float\(\)"),
    (np.random.default_rng(0).normal(size=(2, 4)), r"torch.float64 .* x.float\(\)"),
], ids=["list of rows", "flat list", "wrong width", "3-D", "short 1-D row", "float64", "int64", "ndarray float64"])
def test_wrong_inference_inputs_get_a_typed_error_that_names_the_fix(model, inputs, pattern):
    spec = nnx.ProbabilitySpec("categorical")
    for call in (model.predict, lambda x: model.predict_proba(x, spec)):
        with pytest.raises(nnx.PredictionInputError, match=pattern) as raised:
            call(inputs)
        assert isinstance(raised.value, (nnx.TrainingInputError, RuntimeError))  # RuntimeError: what NNx raises


def test_evaluate_checks_its_first_batch_as_predict_checks_rows(model):
    x, y = tiny_data()
    assert model.evaluate(batches(x, y, 16)).loss is not None
    with pytest.raises(nnx.PredictionInputError, match=r"NNParams.input_dim is 4"):
        model.evaluate([(torch.randn(8, 5), y[:8])])
    with pytest.raises(nnx.PredictionInputError, match=r"x.float\(\)"):
        model.evaluate([(x[:8].double(), y[:8])])


def _good_batches():
    x, y = tiny_data(n=48)
    return [(x[i:i + 8], y[i:i + 8]) for i in range(0, 48, 8)]


@pytest.mark.parametrize("bad, error, pattern", [
    (lambda x, y: (x, torch.full_like(y, 5)), nnx.TrainingInputError, r"holds class label 5, but NNParams.output_dim is 3"),
    (lambda x, y: (torch.randn(8, 5), y), nnx.TrainingInputError, r"inputs of shape \[8, 5\].*input_dim is 4"),
    (lambda x, y: (x, y.int()), nnx.TaskValidationError, r"torch.int32; convert with targets.long\(\)"),
    (lambda x, y: (x.double(), y), nnx.TrainingInputError, r"torch.float64 inputs .* x.float\(\)"),
], ids=["label too large", "wrong width", "int32 targets", "float64 inputs"])
def test_a_bad_later_batch_is_named_and_nothing_committed_is_lost(tmp_path, bad, error, pattern):
    """Epoch 0 commits; batch 3 of epoch 1 is bad: a typed error naming it, LAST still epoch 0."""
    good = _good_batches()

    class Loader:
        armed = False  # from epoch 1 on (the checks before training read the first batch too)

        def __len__(self):
            return len(good)

        def __iter__(self):
            return iter([bad(*b) if self.armed and i == 3 else b for i, b in enumerate(good)])

    loader = Loader()

    class Arm(nnx.Callback):
        def on_epoch_begin(self, ctx):
            loader.armed = ctx.epoch == 1

    with pytest.raises(error, match=r"train_loader.s batch 3 \(0-based\) of epoch 1\b.*" + pattern):
        _train(tmp_path / "runs", train_loader=loader, resume="auto", callbacks=[Arm()])
    (folder,) = [p for p in (tmp_path / "runs").iterdir() if not p.name.startswith(".")]
    assert nnx.NNRun.load(folder.name, tmp_path / "runs").checkpoint("last").epoch == 0


def test_int32_class_targets_are_refused_on_the_first_batch_before_anything_is_written(tmp_path):
    x, y = tiny_data()
    with pytest.raises(nnx.TaskValidationError, match=r"torch.int32; convert with targets.long\(\)"):
        _train(tmp_path / "runs", train_loader=batches(x, y.int(), 16))
    assert not (tmp_path / "runs").exists()


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_deleted_history_is_reported_and_refused_never_continued_over(tmp_path, capsys):
    root = tmp_path / "runs"
    with pytest.raises(KeyboardInterrupt):
        _train(root, callbacks=[CtrlC(1)], resume="auto")  # epoch 0 committed
    (folder,) = [p for p in root.iterdir() if not p.name.startswith(".")]
    (folder / "idps.csv").unlink()
    before = _files(folder)
    with pytest.warns(RuntimeWarning, match=r"idps.csv\) is missing, though LAST committed epoch 0"):
        assert nnx.NNRun.load(folder.name, root).idps == ()
    assert main(["runs", "verify", folder.name[:8], "--root", str(root)]) == 1
    assert "its history (idps.csv) is missing" in capsys.readouterr().out
    with pytest.raises(nnx.CorruptRunError, match=r"idps.csv\) is missing.*put idps.csv back.*overwrite_existing=True"):
        _train(root, resume="auto")
    assert _files(folder) == before  # nothing written, nothing dropped


def test_a_deleted_best_is_reported_and_the_continuation_writes_it_again(tmp_path, capsys):
    root = tmp_path / "runs"
    with pytest.raises(KeyboardInterrupt):
        _train(root, callbacks=[CtrlC(1)], resume="auto", val_loader=batches(*tiny_data(), 16))
    (folder,) = [p for p in root.iterdir() if not p.name.startswith(".")]
    assert nnx.NNRun.load(folder.name, root).best() is not None
    (folder / "checkpoints" / "best.json").unlink()
    # LAST is epoch 0's commit, which lists BEST: readers take LAST's for it, verify says so, and the
    # continuation writes BEST again from it, and says so
    assert nnx.NNRun.load(folder.name, root).checkpoint("best").epoch == 0
    assert main(["runs", "verify", folder.name[:8], "--root", str(root)]) == 0
    assert "checkpoints/best.json is missing; LAST lists it (a commit stopped after LAST), so it reads as LAST" in (
        capsys.readouterr().out)
    with pytest.warns(RuntimeWarning, match=r"checkpoints/best.json lagged behind LAST.*written again from LAST"):
        _, run = _train(root, resume="auto", val_loader=batches(*tiny_data(), 16))
    assert (folder / "checkpoints" / "best.json").exists() and run.best() is not None


class CtrlCAtUpdate(nnx.Callback):
    """Ctrl-C right after committed update ``update`` (a commit inside the epoch before it)."""

    def __init__(self, update: int) -> None:
        self.update = update

    def on_train_begin(self, ctx) -> None:
        ctx.update_listeners.append(self._after)

    def _after(self, ctx) -> None:
        if ctx.update_count == self.update:
            raise KeyboardInterrupt


def test_a_deleted_best_that_last_does_not_list_is_warned_of_when_the_run_continues(tmp_path):
    root = tmp_path / "runs"
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(*tiny_data()), batch_size=16)
    with pytest.raises(KeyboardInterrupt):  # 3 updates an epoch: LAST is update 4's, inside epoch 1 (no tags)
        _train(root, callbacks=[CtrlCAtUpdate(5)], resume="auto", val_loader=batches(*tiny_data(), 16),
               train_loader=loader, commit_every=1)
    (folder,) = [p for p in root.iterdir() if not p.name.startswith(".")]
    (folder / "checkpoints" / "best.json").unlink()
    with pytest.warns(RuntimeWarning, match="best.json is missing, though epoch 0 was the best"):
        _train(root, resume="auto", val_loader=batches(*tiny_data(), 16), train_loader=loader, commit_every=1)


def test_mps_on_a_machine_without_it_is_a_typed_error(monkeypatch):
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    with pytest.raises(nnx.ParamsError, match=r"NNModelParams.device: MPS is not available on this machine; use Devices.CPU"):
        nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3), nnx.NNModelParams(device="mps"))


def test_a_root_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "runs").write_text("not a folder")
    with pytest.raises(nnx.ParamsError, match=r"root: .* is a file; the runs root is a folder"):
        _train(tmp_path / "runs")


def test_weights_of_another_shape_are_refused_before_anything_is_written(tmp_path):
    root = tmp_path / "runs"
    _, run = _train(root)
    before = _files(root)
    nnx.set_seed(0)
    wider = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(5,)))
    x, y = tiny_data()
    params = nnx.NNTrainParams(n_epochs=1, train_loader=batches(x, y, 16), progress=False,
                               resume_from_run_id=run.id, resume_mode="weights_only")
    with pytest.raises(nnx.ResumeMismatchError, match=r"weights do not fit this model \(shapes \(checkpoint → model\): "
                       r"net.layers.0.bias|layers.0.bias"):
        wider.train(params, root=root)
    assert _files(root) == before  # not even a lease file


def test_model_checkpoint_epochs_beyond_the_run_are_warned_of(tmp_path):
    with pytest.warns(RuntimeWarning, match=r"epoch\(s\) \[10\] lie beyond this run's last epoch 1"):
        _, run = _train(tmp_path / "runs", callbacks=[nnx.ModelCheckpoint(epochs=[1, 10])])
    assert "custom_e1" in run.tags()


def test_nan_in_the_validation_inputs_is_warned_of_once(tmp_path):
    x, y = tiny_data()
    x = x.clone()
    x[3] = float("nan")
    with pytest.warns(RuntimeWarning, match=r"epoch 0: the validation loss is nan") as seen:
        _, run = _train(tmp_path / "runs", val_loader=batches(x, y, 16))
    assert sum("validation loss is" in str(w.message) for w in seen) == 1  # once a run, not every epoch
    assert all(math.isnan(r.val_edp.loss) for r in run.epochs.values())  # recorded as it is


# -- custom steps ----------------------------------------------------------------------------------
def _step(returned, *, reports: int = 1, seen: list | None = None):
    """A documented custom step: forward, loss, backward, optimizer.step(), report; returns ``returned(loss, y)``."""
    def step(ctx):
        xb, yb = ctx.batch
        ctx.optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(ctx.model.net(xb), yb)
        loss.backward()
        ctx.optimizer.step()
        for _ in range(reports):
            ctx.report_update()
        if seen is not None:
            seen.append((loss.item(), len(yb)))
        return returned(loss, yb)
    return step


def _custom(root, step, **train):
    x, y = tiny_data(n=40)
    nnx.set_seed(0)
    model = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3))
    params = nnx.NNTrainParams(n_epochs=2, seed=0, train_loader=batches(x, y, 16), progress=False, **train)
    return model.train(params, train_step_fn=step, root=root)


def test_a_custom_steps_nan_loss_is_warned_of_once(tmp_path):
    with pytest.warns(RuntimeWarning, match=r"train_step_fn returned a non-finite loss \(nan\) in epoch 0 batch 0") as seen:
        _custom(tmp_path, _step(lambda loss, y: nnx.EvaluationDataPoint(loss=float("nan"))))
    assert sum("non-finite loss" in str(w.message) for w in seen) == 1


def test_a_loss_tensor_with_its_graph_is_recorded_as_its_number(tmp_path):
    run = _custom(tmp_path, _step(lambda loss, y: nnx.EvaluationDataPoint(loss=loss, count=len(y))))
    assert all(type(r.train_edp.loss) is float for r in run.idps)
    assert nnx.NNRun.load(run.id, tmp_path).idps == run.idps  # written and read back


def test_a_second_report_in_one_step_names_the_step_not_the_schedule(tmp_path):
    sched = nnx.NNSchedulerParams(kind=nnx.Schedulers.ONE_CYCLE, clock="optimizer_update")
    with pytest.raises(nnx.UpdateOwnerError, match=r"report_update\(\) was called 2 times in epoch 0 batch 0 after 1 "):
        _custom(tmp_path, _step(lambda loss, y: nnx.EvaluationDataPoint(loss=loss.item()), reports=2), scheduler=sched)


def test_a_custom_steps_epoch_summary_is_its_records_weighted_by_their_counts(tmp_path):
    seen: list = []
    run = _custom(tmp_path, _step(lambda loss, y: nnx.EvaluationDataPoint(loss=loss.item(), count=len(y)), seen=seen),
                  monitor=nnx.MonitorSpec("loss", split="train"))
    first = seen[:3]  # epoch 0: batches of 16, 16 and 8 rows
    expected = sum(v * n for v, n in first) / sum(n for _, n in first)
    summary = run.epochs[0].train_summary
    assert summary.count == 40 and summary.loss == pytest.approx(expected, rel=1e-12)


# -- a read-only runs root, refusals that leave no lease file, a step schedule's default ----------
_WRITES = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def read_only(monkeypatch, root: Path) -> None:
    """Make ``root`` behave as a read-only mount (``EROFS`` on every write under it), as
    ``chmod -R a-w`` does for a user who is not root (the sandbox runs as root, which may write
    whatever the mode bits say): opening for writing, creating, renaming and removing fail there;
    reading and ``flock`` do not."""
    top = os.path.realpath(root)

    def inside(path) -> bool:
        if isinstance(path, int):
            return False
        real = os.path.realpath(os.fspath(path))
        return real == top or real.startswith(top + os.sep)

    def refuse(path):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), os.fspath(path))

    def guard(real, *, writes=lambda *a, **k: True, paths=1):
        def call(*args, **kwargs):
            if any(inside(p) for p in args[:paths]) and writes(*args, **kwargs):
                refuse(args[0])
            return real(*args, **kwargs)
        return call

    real_open = builtins.open
    monkeypatch.setattr(builtins, "open", guard(real_open, writes=lambda f, mode="r", *a, **k: set(mode) & set("wax+")))
    monkeypatch.setattr(os, "open", guard(os.open, writes=lambda p, flags, *a, **k: bool(flags & _WRITES)))
    for name in ("mkdir", "unlink", "remove", "rmdir"):
        monkeypatch.setattr(os, name, guard(getattr(os, name)))
    for name in ("rename", "replace", "link"):
        monkeypatch.setattr(os, name, guard(getattr(os, name), paths=2))


def _chmod_tree(root: Path, writable: bool) -> None:
    for p in [root, *root.rglob("*")]:
        p.chmod(p.stat().st_mode | 0o200 if writable else p.stat().st_mode & ~0o222)


@pytest.mark.parametrize("how", ["chmod", "simulated"])
def test_a_finished_run_is_returned_from_a_read_only_root(tmp_path, monkeypatch, how):
    """``resume="auto"`` over a finished run writes nothing, so a read-only root (an archive, a
    shared mount) returns the run as a writable one does."""
    root = tmp_path / "runs"
    _, run = _train(root, resume="auto")
    before = _files(root)
    if how == "chmod":
        _chmod_tree(root, writable=False)
        if os.access(root, os.W_OK):  # uid 0 writes whatever the mode bits say
            _chmod_tree(root, writable=True)
            pytest.skip("this user writes to a chmod a-w folder (the simulated case covers it; as root, run under "
                        "`setpriv --bounding-set=-dac_override,-dac_read_search --inh-caps=-dac_override,-dac_read_search`)")
    else:
        read_only(monkeypatch, root)
    try:
        model, again = _train(root, resume="auto")
    finally:
        monkeypatch.undo()
        if how == "chmod":
            _chmod_tree(root, writable=True)
    assert again.id == run.id and again.idps == run.idps
    finished = nnx.NNModel.from_checkpoint(run.id, root=root)
    assert np.array_equal(model.predict(torch.ones(1, 4)).logits, finished.predict(torch.ones(1, 4)).logits)
    assert _files(root) == before


def _tree(root: Path) -> dict[str, bytes | None]:
    """Every file (its bytes) and folder (None) under ``root``."""
    return {str(p.relative_to(root)): p.read_bytes() if p.is_file() else None for p in sorted(root.rglob("*"))}


@pytest.mark.parametrize("change", [
    {"optim": nnx.NNOptimParams(name="sgd")},
    {"scheduler": nnx.NNSchedulerParams(kind="one_cycle", clock="optimizer_update", total_steps=100)},
], ids=["another optimizer", "another schedule"])
def test_a_refused_resume_from_run_id_leaves_the_root_as_it_was(tmp_path, change):
    """The resume point's components do not fit (refused after the new run's lease is taken):
    no lease file for the new run, no folder, nothing else."""
    root = tmp_path / "runs"
    _, run = _train(root)
    before = _tree(root)
    with pytest.raises(nnx.ComponentRestoreError, match=r"cannot restore components:\n  - optimizer 'default'"):
        _train(root, resume_from_run_id=run.id, resume_mode="stateful", **change)
    assert _tree(root) == before


def _scheduled(root, sched, n_epochs):
    """The history's learning rate, batch by batch, of a run with schedule ``sched`` (SGD at 0.1)."""
    x, y = tiny_data()
    nnx.set_seed(0)
    model = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(8,)))
    params = nnx.NNTrainParams(n_epochs=n_epochs, seed=0, progress=False, train_loader=batches(x, y, 16),
                               optim=nnx.NNOptimParams(name="sgd", max_lr=0.1), scheduler=sched)
    return [r.lr for r in model.train(params, root=root).idps]


@pytest.mark.parametrize("kind", ["step", nnx.Schedulers.STEP], ids=["text", "member"])
def test_a_step_schedule_without_step_size_takes_the_documented_default(tmp_path, kind):
    """NNx's documented default (REFERENCE §7.1, as NNx 0.4.1 does): ``step_size = max(1, n //
    3)`` ticks of the schedule's clock, where n is the run's length on that clock: epochs, or
    committed updates on the optimizer_update clock. PyTorch's StepLR over the same ticks agrees."""
    sched = nnx.NNSchedulerParams(kind=kind, factor=0.5)
    assert sched.step_size is None and "step_size" not in sched.state()  # the run id is NNx 0.4.1's

    def torch_lrs(ticks: int, step_size: int) -> list[float]:
        opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
        steplr = torch.optim.lr_scheduler.StepLR(opt, step_size=step_size, gamma=0.5)
        lrs = []
        for _ in range(ticks):
            lrs.append(opt.param_groups[0]["lr"])
            opt.step()
            steplr.step()
        return lrs

    per_epoch = _scheduled(tmp_path / "epoch", sched, n_epochs=7)  # 3 batches an epoch, the LR constant in one
    assert per_epoch == pytest.approx([lr for lr in torch_lrs(7, 7 // 3) for _ in range(3)])
    clock = nnx.NNSchedulerParams(kind=kind, factor=0.5, clock="optimizer_update")
    per_update = _scheduled(tmp_path / "update", clock, n_epochs=2)  # each row: the LR its update used (as NNx)
    assert per_update == pytest.approx(torch_lrs(6, 6 // 3))  # 2 epochs × 3 updates
    assert _scheduled(tmp_path / "short", sched, n_epochs=2) == pytest.approx([0.1] * 3 + [0.05] * 3)  # max(1, 0)


def test_a_lease_on_a_run_never_written_leaves_no_lease_file(tmp_path):
    from nnx_adapters.storage.fs import FileStorage

    fresh = FileStorage(tmp_path / "new" / "runs")
    with fresh.lease("r1"):  # a fresh run that is discarded before its first commit
        assert (tmp_path / "new" / "runs" / ".leases" / "r1.lock").is_file()
        fresh.write("r1/run.yaml", b"x")
        fresh.remove_tree("r1")
    assert list(tmp_path.iterdir()) == []  # the lease made the root's folders: they are gone with the file
    fresh.write("r1/run.yaml", b"x")  # the same store writes there again (it makes the root again)
    with fresh.lease("r1"):
        pass
    assert (tmp_path / "new" / "runs" / ".leases" / "r1.lock").is_file()
    store = FileStorage(tmp_path / "runs")
    store.write("r2/run.yaml", b"x")
    with store.lease("r2"):
        pass
    with store.lease("r3"):
        pass
    assert sorted(p.name for p in (tmp_path / "runs" / ".leases").iterdir()) == ["r2.lock"]  # a written run's stays


def test_a_lease_file_removed_while_it_was_being_taken_is_taken_afresh(tmp_path, monkeypatch):
    """The holder that removes its lease file does so while it holds the lock; a taker that
    opened the old file first and locks it afterwards finds the path no longer names it, and takes
    the new one, so two holders never lock two different files of one run."""
    import portalocker

    from nnx_adapters.storage import fs

    store = fs.FileStorage(tmp_path)
    path = tmp_path / ".leases" / "r1.lock"
    path.parent.mkdir()
    path.write_bytes(b"")
    real_lock, calls = portalocker.lock, []

    def lock(handle, flags):
        calls.append(os.fstat(handle.fileno()).st_ino)
        if len(calls) == 1:  # the holder released and removed the file between our open and our lock
            path.unlink()
        real_lock(handle, flags)

    monkeypatch.setattr(fs.portalocker, "lock", lock)
    with store.lease("r1"):
        monkeypatch.undo()
        assert len(calls) == 2 and path.is_file() and path.stat().st_ino == calls[1]
        with open(path, "a+b") as other, pytest.raises(portalocker.LockException):
            portalocker.lock(other, portalocker.LOCK_EX | portalocker.LOCK_NB)  # the file the path names is held
    assert not path.exists()  # created by this lease, for a run that has no folder


def test_a_stateful_resume_of_a_budgeted_schedule_needs_an_explicit_horizon_before_anything(tmp_path):
    """Its default horizon is this call's length, which the source's ticks always exceed: refused
    before the source run is even looked up (a missing one included); weights-only needs none."""
    root = tmp_path / "runs"
    cycle = nnx.NNSchedulerParams(kind="one_cycle", max_lr=0.1)
    with pytest.raises(nnx.ScheduleBudgetError, match="requires scheduler.total_steps"):
        _train(root, resume_from_run_id="0" * 32, scheduler=cycle)
    assert not root.exists()
    _, run = _train(root)
    warm = _train(root, resume_from_run_id=run.id, resume_mode="weights_only", scheduler=cycle)[1]
    assert warm.resume_status.mode == "weights_only"
