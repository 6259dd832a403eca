"""What a new user meets first: the data fingerprint, the first-batch probe that changes nothing,
the console output, a finished run's one line, a failed write's note, plots that name things."""

from __future__ import annotations

import errno
import io
import os
import re
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from nnx_core.commit import LAST, RunFiles
import nnx_api as nnx
from nnx_api.callbacks.progress import ProgressBar
from nnx_api.distributed.loaders import ShardedTrainLoader, ShardedValidationLoader
from nnx_api.runs.curves import epoch_training
from nnx_api.training import batch_checks, fingerprint

README = Path(__file__).resolve().parents[2] / "README.md"
X, Y = torch.randn(40, 4, generator=torch.Generator().manual_seed(0)), torch.arange(40) % 3


def shuffled(seed: int, x=X, y=Y, batch_size: int = 8) -> DataLoader:
    return DataLoader(TensorDataset(x, y), batch_size=batch_size, shuffle=True, generator=torch.Generator().manual_seed(seed))


def fp(loader):
    return fingerprint.loader_fingerprint(loader, fingerprint.take_first_batch(loader))


def test_the_fingerprint_does_not_depend_on_the_shuffle_order_but_on_the_data():
    assert fp(shuffled(1)) == fp(shuffled(2))
    assert fp(shuffled(1))["sample"] != fp(shuffled(1, x=X + 1e-3))["sample"]
    assert fp(shuffled(1))["rows"] == 40 and fp(shuffled(1))["batches"] == 5
    assert fp(shuffled(1, batch_size=16))["batch"] == ["tensor[16, 4] torch.float32", "tensor[16] torch.int64"]
    assert fingerprint.sample_indices(1000)[:2] == [0, 32] and fingerprint.sample_indices(1000)[-1] == 999
    assert len(fingerprint.sample_indices(10**9)) == fingerprint.SAMPLE_ROWS  # bounded, whatever the size


def test_the_fingerprint_of_distributed_loaders_is_the_same_on_every_rank():
    data = TensorDataset(X, Y)
    ranks = [ShardedTrainLoader(data, 8, "pad", 0, r, 2) for r in range(2)]
    assert fp(ranks[0])["sample"] == fp(ranks[1])["sample"] == fp(DataLoader(data, batch_size=8))["sample"]
    assert fp(ranks[0])["batches"] is None and fp(ranks[0])["rows"] == 40  # per-rank steps depend on the world
    vals = [ShardedValidationLoader(data, 8, r, 2) for r in range(2)]
    assert fp(vals[0])["sample"] == fp(vals[1])["sample"] and fp(vals[0])["rows"] == 40


def test_a_random_augmentation_draws_the_same_for_every_fingerprint():
    class Noisy(TensorDataset):
        def __getitem__(self, i):
            x, y = super().__getitem__(i)
            return x + torch.randn(()), y

    torch.manual_seed(5)
    first = fp(DataLoader(Noisy(X, Y), batch_size=8))
    torch.manual_seed(6)
    assert fp(DataLoader(Noisy(X, Y), batch_size=8)) == first


def test_taking_the_first_batch_leaves_every_rng_stream_and_the_loader_as_they_were():
    loader = shuffled(3)
    global_before, loader_before = torch.get_rng_state(), loader.generator.get_state()
    fingerprint.take_first_batch(loader)
    assert torch.equal(torch.get_rng_state(), global_before) and torch.equal(loader.generator.get_state(), loader_before)
    unseeded = DataLoader(TensorDataset(X, Y), batch_size=8, shuffle=True)  # draws its order from the global RNG
    before = torch.get_rng_state()
    fingerprint.take_first_batch(unseeded)
    assert torch.equal(torch.get_rng_state(), before)


def test_persistent_workers_started_for_the_first_batch_are_dropped():
    loader = DataLoader(TensorDataset(X, Y), batch_size=8, num_workers=1, persistent_workers=True)
    assert fingerprint.take_first_batch(loader) is not None
    assert loader._iterator is None  # epoch 0 starts its workers as without the probe


class BatchNormNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Dropout(0.3), nn.Linear(8, 3))

    def forward(self, x):
        return self.body(x)


def _train(root):
    torch.manual_seed(0)
    model = nnx.NNModel(params=nnx.NNModelParams(task=nnx.TaskSpec.categorical(n=3)), module=BatchNormNet())
    loader = DataLoader(TensorDataset(X, Y), batch_size=8, shuffle=True)  # unseeded: the global RNG orders it
    model.train(nnx.NNTrainParams(n_epochs=2, train_loader=loader, val_loader=shuffled(4), progress=False), root=root)
    return {k: v.clone() for k, v in model.net.state_dict().items()}


def test_training_is_bit_identical_with_and_without_the_first_batch_probe(tmp_path, monkeypatch):
    probed = _train(tmp_path / "a")
    fixed = {"train_loader": (X[:8], Y[:8]), "val_loader": (X[:8], Y[:8])}
    with monkeypatch.context() as mp:  # no probe: the batches are handed in, the loaders never touched
        mp.setattr(fingerprint, "take_first_batch", lambda ld: fixed["train_loader"])
        mp.setattr(batch_checks, "check_first_batches", lambda *a, **k: None)
        plain = _train(tmp_path / "b")
    assert probed.keys() == plain.keys() and all(torch.equal(probed[k], plain[k]) for k in probed)


def _tiny(root, **train):
    nnx.set_seed(0)
    model = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(8,)))
    params = nnx.NNTrainParams(n_epochs=2, seed=0, train_loader=shuffled(1), val_loader=shuffled(2), **train)
    return model.train(params, root=root)


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_plain_lines_off_a_terminal_with_the_epoch_mean_loss_and_a_summary_that_stays(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("NNX_PROGRESS", "1")
    run = _tiny(tmp_path / "runs")
    out, err = capsys.readouterr()
    assert "\r" not in err
    lines = [line for line in err.splitlines() if " epoch " in line and " epochs in " not in line]
    assert [line.split()[2:5] for line in lines] == [["epoch", "0", "[1/2]"], ["epoch", "1", "[2/2]"]]
    for epoch, line in enumerate(lines):
        mean = epoch_training([r for r in run.idps if r.epoch_idx == epoch]).loss
        assert f"loss {mean:.4g} " in line  # the whole epoch's, not the last batch's
    summary = err.splitlines()[-1]  # everything with a clock goes to stderr: stdout is the same each time
    assert re.match(rf"run {run.id[:8]}: 2 epochs in [\d.]+s · loss [\d.]+ · val_loss [\d.]+ · val_acc [\d.]+ · BEST epoch \d "
                    r"\(val\.error [\d.]+\)$", summary), summary
    (saved,) = out.splitlines()
    assert saved.startswith("Run saved to ")


def test_a_terminal_gets_a_bar_that_counts_batches(tmp_path, monkeypatch):
    monkeypatch.setenv("NNX_PROGRESS", "1")
    screen = Terminal()
    monkeypatch.setattr("sys.stderr", screen)
    counts = []
    real = ProgressBar.on_optimizer_update

    def spy(self, ctx, event):
        real(self, ctx, event)
        counts.append((ctx.epoch, self.bar.n))  # the bar's count moves inside the epoch

    monkeypatch.setattr(ProgressBar, "on_optimizer_update", spy)
    _tiny(tmp_path / "runs")
    assert counts == [(e, b) for e in range(2) for b in range(1, 6)]
    text = screen.getvalue()
    assert "epoch 1 [2/2]" in text and "5/5" in text and "batch" in text and "val_loss=" in text


def test_quiet_sends_the_lines_to_stderr_and_progress_false_silences_them(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("NNX_PROGRESS", "1")
    monkeypatch.setenv("NNX_QUIET", "1")
    _tiny(tmp_path / "a")
    out, err = capsys.readouterr()
    assert out == "" and "Run saved to" in err
    monkeypatch.delenv("NNX_QUIET")
    _tiny(tmp_path / "b", progress=False)
    assert capsys.readouterr() == ("", "")
    monkeypatch.setenv("NNX_PROGRESS", "0")
    _tiny(tmp_path / "c")
    assert capsys.readouterr() == ("", "")


def test_returning_a_finished_run_says_so_in_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("NNX_PROGRESS", "1")
    _tiny(tmp_path / "runs", resume="auto")
    capsys.readouterr()
    run = _tiny(tmp_path / "runs", resume="auto")
    out, err = capsys.readouterr()
    assert out == f"run {run.id[:8]} already finished (2 epochs committed): returning it, nothing trained. " \
                  "Pass overwrite_existing=True (without resume='auto') to train it again\n"
    assert err == ""


def test_a_full_disk_says_which_epoch_is_committed_and_how_to_continue(tmp_path, monkeypatch):
    real = RunFiles.write_tag

    def full(self, manifest):
        if manifest.tag == LAST and manifest.epoch == 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, manifest)

    monkeypatch.setattr(RunFiles, "write_tag", full)
    with pytest.raises(OSError) as raised:
        _tiny(tmp_path / "runs", progress=False)
    assert raised.value.errno == errno.ENOSPC  # the error itself, with a note
    assert any("epoch 0 is committed (LAST)" in n and "resume='auto' to continue from epoch 1" in n
               for n in raised.value.__notes__)
    monkeypatch.setattr(RunFiles, "write_tag", real)
    run = _tiny(tmp_path / "runs", progress=False, resume="auto")
    assert sorted({r.epoch_idx for r in run.idps}) == [0, 1]


def test_a_read_only_root_says_nothing_was_committed(tmp_path, monkeypatch):
    def refuse(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied", str(tmp_path / "runs" / "x"))

    monkeypatch.setattr("nnx_adapters.storage.fs.FileStorage.write", refuse)
    with pytest.raises(PermissionError) as raised:
        _tiny(tmp_path / "runs", progress=False)
    assert any("no committed epoch" in n for n in raised.value.__notes__)


def test_a_data_file_error_gets_no_note(tmp_path):
    class Missing:
        def __iter__(self):
            raise FileNotFoundError(errno.ENOENT, "No such file", "/data/train.npy")

    with pytest.raises(FileNotFoundError) as raised:
        nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3)).train(
            nnx.NNTrainParams(n_epochs=1, train_loader=Missing(), progress=False), root=tmp_path / "runs2")
    assert not getattr(raised.value, "__notes__", None)


def test_the_readme_snippet_refuses_its_own_run_after_its_data_changed(tmp_path, monkeypatch):
    code = README.read_text().split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NNX_PROGRESS", "0")
    exec(compile(code, "README.md", "exec"), {})
    exec(compile(code, "README.md", "exec"), {})  # the same data: the finished run is returned
    changed = code.replace("torch.randn(512, 8)", "torch.randn(600, 8)").replace("(512,)", "(600,)")
    assert changed != code
    with pytest.raises(nnx.DataChangedError, match="data_id="):
        exec(compile(changed, "README.md", "exec"), {})


def test_plots_name_the_fallback_quantity_and_use_a_log_lr_axis(tmp_path):
    pytest.importorskip("matplotlib")
    run = _tiny(tmp_path / "runs", progress=False)
    figure = run.plot()
    assert "fallback" not in figure.get_suptitle() and "val.error" in figure.get_suptitle()
    titles = [ax.get_title() for ax in figure.axes if ax.get_visible()]
    assert titles == ["loss", "accuracy", "error", "f1 (macro)", "learning rate"]  # error: it is the monitored one
    stars = [line for ax in figure.axes for line in ax.get_lines() if line.get_label().startswith("monitor ")]
    assert len(stars) == 1 and stars[0].get_label().startswith("monitor val.error")
    assert figure.axes[titles.index("learning rate")].get_yscale() == "log"


def test_the_readme_names_the_progress_switches():
    text = README.read_text()
    assert all(s in text for s in ("NNX_PROGRESS=0", "progress=False", "NNX_QUIET", 'device="auto"'))
    assert os.path.exists(README.parent / "docs" / "getting-started.md")
