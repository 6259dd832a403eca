"""Examples and documentation snippets run in the suite so they never rot."""

from __future__ import annotations

import re
import runpy
import sys
from pathlib import Path

import pytest

from nnx_api.cli import main as cli

ROOT = Path(__file__).resolve().parents[2]


def test_quickstart_reaches_high_accuracy_and_resumes_to_the_same_run(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["quickstart.py", "--root", str(tmp_path), "--epochs", "30"])
    first = runpy.run_path(str(ROOT / "examples" / "quickstart.py"), run_name="example")["main"]()
    # "it learned": chance is 0.1 on digits' 10 classes. The exact accuracy follows the training
    # trajectory, which kernels that round differently (another processor, thread count) move, so
    # the bar sits well below what this run reaches here (over 0.95), not at it.
    assert first.best().val_edp.accuracy >= 0.9
    assert {"run.yaml", "metadata.yaml", "idps.csv", "checkpoints"} <= {p.name for p in first.path.iterdir()}
    monkeypatch.setenv("NNX_PROGRESS", "1")  # the suite turns console output off; a user sees it
    again = runpy.run_path(str(ROOT / "examples" / "quickstart.py"), run_name="example")["main"]()
    assert again.id == first.id and again.idps == first.idps  # resume="auto" returns the finished run
    out = capsys.readouterr().out
    assert "validation accuracy:" in out and f"nnx runs show {first.id[:8]}" in out
    assert f"run {first.id[:8]} already finished" in out


def test_getting_started_runs_top_to_bottom_in_one_session(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    doc = ROOT / "docs" / "getting-started.md"
    for snippet in re.findall(r"```python\n(.*?)```", doc.read_text(), flags=re.S):
        exec(compile(snippet, doc.name, "exec"), namespace)
    out = capsys.readouterr().out
    assert "refused: run " in out and "[4, 5]" in out and "['best', 'last']" in out
    ids = {"$RUN": namespace["run"].id[:8], "$OTHER": namespace["plain"].id[:8]}
    commands = [line.split("#")[0].split() for block in re.findall(r"```bash\n(.*?)```", doc.read_text(), flags=re.S)
                for line in block.splitlines() if line.startswith("nnx ")]
    assert len(commands) == 6
    for argv in commands:
        assert cli([ids.get(a, a) for a in argv[1:]]) == 0, argv
    assert (tmp_path / "curves.png").exists() and (tmp_path / "model.safetensors").exists()


def test_python_snippets_in_docs_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for doc in (ROOT / "README.md", ROOT / "docs" / "concepts.md"):
        for snippet in re.findall(r"```python\n(.*?)```", doc.read_text(), flags=re.S):
            exec(compile(snippet, doc.name, "exec"), {})


def test_the_screenshot_script_renders_real_terminal_text_to_png(tmp_path):
    """docs/img/make_screenshots.py (run by hand: it trains five runs) keeps importing and drawing."""
    pytest.importorskip("matplotlib")
    shots = runpy.run_path(str(ROOT / "docs" / "img" / "make_screenshots.py"), run_name="shots")
    target = shots["render"](["$ nnx runs list", "ID        STATUS", "1a2b3c4d  completed"], tmp_path / "t.png")
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    terminal = shots["Terminal"]()
    terminal.write("run 1a2b · epoch 0:  10%\rrun 1a2b · epoch 0:  50%")
    assert terminal.screen() == "run 1a2b · epoch 0:  50%"  # what a terminal shows after the carriage returns


def test_vae_example_matches_its_plain_pytorch_twin(tmp_path, capsys):
    """examples/vae.py: two summed LossTerms; it asserts itself that the final weights equal a
    hand-written PyTorch loop's and that each epoch's ``train_summary.loss`` is the loop's
    per-sample average; here its summary holds each term and their sum."""
    run = runpy.run_path(str(ROOT / "examples" / "vae.py"), run_name="example")["main"](["--root", str(tmp_path), "--epochs", "2"])
    summary = run.idps[-1].train_summary
    assert set(summary.extra) == {"reconstruction", "kl"}
    assert summary.loss == summary.extra["reconstruction"] + summary.extra["kl"]
    out = capsys.readouterr().out
    assert "final weights match the plain PyTorch loop" in out and out.count("; plain PyTorch ") == 2


def test_word_lm_example_carries_its_hidden_state_like_its_plain_pytorch_twin(tmp_path, capsys):
    """examples/word_lm.py: truncated BPTT through a custom step whose hidden state is carried
    across batches and reset at each epoch's first batch; it asserts itself that the final weights
    and each epoch's per-token perplexity equal a hand-written PyTorch loop's."""
    run = runpy.run_path(str(ROOT / "examples" / "word_lm.py"), run_name="example")["main"](["--root", str(tmp_path)])
    assert [r.epoch_idx for r in run.idps].count(1) == [r.epoch_idx for r in run.idps].count(0) > 1  # 2 epochs
    assert all(r.train_edp.count == 16 * 24 for r in run.idps)  # every record weighs its window's words
    out = capsys.readouterr().out
    assert "final weights match the plain PyTorch loop" in out and out.count("per-token perplexity") == 2
