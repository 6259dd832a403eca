"""Make the README's and getting-started's screenshots from real runs: ``nnx runs list``, a
progress bar mid-epoch, and ``nnx runs plot``.

    .venv/bin/python docs/img/make_screenshots.py [--out docs/img] [--keep DIR]

It trains three digits runs (examples/quickstart.py's data and net, three learning rates, a step
schedule), kills
a fourth with SIGKILL after its first commits (so ``list`` shows a real ``interrupted`` run),
captures the progress bar as a terminal would show it halfway through an epoch, and renders the
terminal text to PNG with matplotlib (a monospace font on a dark background: no terminal,
tmux or display needed). The plot is what ``nnx runs plot`` writes. Needs the ``plots`` extra.
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from matplotlib.figure import Figure

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))

import nnx_api as nnx  # noqa: E402
from nnx_api.cli import main as cli  # noqa: E402

from quickstart import digits_loaders  # noqa: E402

BACKGROUND, FOREGROUND, PROMPT = "#1e1e1e", "#d4d4d4", "#6a9955"


def render(lines: list[str], target: Path, *, columns: int | None = None) -> Path:
    """Terminal text as a PNG: one monospace line per line, a prompt line in green."""
    columns = columns or max(len(line) for line in lines)
    fig = Figure(figsize=(0.085 * columns + 0.4, 0.22 * len(lines) + 0.35), dpi=130, facecolor=BACKGROUND)
    for i, line in enumerate(lines):
        fig.text(0.012, 1 - (i + 0.9) / (len(lines) + 0.6), line, family="monospace", fontsize=9.5,
                 color=PROMPT if line.startswith("$ ") else FOREGROUND, va="baseline")
    fig.savefig(target, facecolor=BACKGROUND)
    return target


class Terminal(io.StringIO):
    """What tqdm writes to a terminal, kept (carriage returns and all)."""

    encoding = "utf-8"  # tqdm draws unicode blocks, as on a real terminal

    def isatty(self) -> bool:
        return True

    def screen(self) -> str:
        """The line a terminal shows now: the text after the last carriage return."""
        return self.getvalue().replace("\x1b[A", "").split("\r")[-1].rstrip("\n")


def digits_model(lr: float) -> tuple[nnx.NNModel, nnx.NNTrainParams]:
    nnx.set_seed(0)
    train, val = digits_loaders()
    model = nnx.NNModel(nnx.NNParams(input_dim=64, output_dim=10, hidden_dims=(128, 64), dropout_prob=0.1))
    params = nnx.NNTrainParams(n_epochs=12, optim=nnx.NNOptimParams(max_lr=lr), seed=0, train_loader=train,
                               val_loader=val, resume="auto", monitor=nnx.MonitorSpec("loss"),
                               scheduler=nnx.NNSchedulerParams(kind="step", step_size=4, factor=0.3))  # LR × 0.3 every 4 epochs
    return model, params


class Snapshot(nnx.Callback):
    """Keeps the terminal's line halfway through the third epoch."""

    def __init__(self, terminal: Terminal) -> None:
        self.terminal, self.line = terminal, ""

    def on_optimizer_update(self, ctx, event) -> None:
        if ctx.epoch == 2 and event.batch_idx == 12:
            self.line = self.terminal.screen()


def progress_line(root: Path) -> str:
    terminal = Terminal()
    model, params = digits_model(3e-3)
    snap = Snapshot(terminal)
    saved, sys.stderr = sys.stderr, terminal
    os.environ.update(NNX_PROGRESS="1", COLUMNS="110", TQDM_MININTERVAL="0")  # every update drawn
    try:
        model.train(params, root=root, callbacks=[snap], salt="progress")  # a run of its own
    finally:
        sys.stderr = saved
    return snap.line


KILLED = """
import sys, time
sys.path.insert(0, {examples!r})
import nnx_api as nnx
from quickstart import digits_loaders

class Slow(nnx.Callback):
    def on_epoch_end(self, ctx):
        time.sleep(0.5)

nnx.set_seed(0)
train, val = digits_loaders()
model = nnx.NNModel(nnx.NNParams(input_dim=64, output_dim=10, hidden_dims=(128, 64)))
model.train(nnx.NNTrainParams(n_epochs=200, seed=0, train_loader=train, val_loader=val, resume="auto",
                              progress=False), root={root!r}, callbacks=[Slow()])
"""


def interrupted_run(root: Path) -> None:
    """A real run killed with SIGKILL after its third commit (the attempt record says running)."""
    script = KILLED.format(examples=str(ROOT / "examples"), root=str(root))
    child = subprocess.Popen([sys.executable, "-c", script])
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        runs = [r for r in nnx.NNRun.all(root) if r.config["train"]["n_epochs"] == 200]
        if runs and len(runs[0].epochs) >= 3:
            break
        time.sleep(0.2)
    child.send_signal(signal.SIGKILL)
    child.wait()


def run_cli(*argv: str) -> list[str]:
    out = io.StringIO()
    cli(list(argv), out=out, err=out)
    return out.getvalue().rstrip("\n").splitlines()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "docs" / "img"))
    parser.add_argument("--keep", help="keep the runs root here instead of a temporary folder")
    args = parser.parse_args(argv)
    out = Path(args.out)
    work = Path(args.keep or tempfile.mkdtemp(prefix="nnx-shots-"))
    root = work / "runs"
    os.environ["NNX_PROGRESS"] = "0"
    ids = []
    for lr in (1e-3, 3e-3, 3e-2):
        model, params = digits_model(lr)
        ids.append(model.train(params, root=root).id)
    interrupted_run(root)
    bar = progress_line(root)
    listing = run_cli("runs", "list", "--root", str(root), "--sort", "monitor")
    render(["$ nnx runs list --sort monitor", *listing], out / "runs-list.png")
    render(["$ python train.py", bar], out / "progress.png", columns=max(len(bar), 60))
    plotted = run_cli("runs", "plot", ids[1][:8], "-o", str(out / "runs-plot.png"), "--root", str(root))
    print("\n".join([*listing, bar, *plotted]))
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
