"""This project side by side with skorch, Lightning and NNx 0.4.1, against a plain PyTorch loop.

    make bench-peers                                  # builds .venv-peers once, then runs this (~5 min)
    .venv-peers/bin/python bench/peers.py --quick     # one timed round per row, for a smoke run
    .venv-peers/bin/python bench/peers.py --rows 0,3  # some rows only
    .venv-peers/bin/python bench/peers.py --rows 4 --reps 15 --arms this,skorch  # a closer look at two arms

Runs in its own virtualenv (``.venv-peers``: torch 2.13.0 CPU, this project, ``lightning``,
``skorch`` and ``thekaveh-nnx==0.4.1``, whose import name is ``nnx``), so none of them is a
dependency of this project. Every arm trains the same job in the same process: the same data,
the same initial weights, cross-entropy, Adam (lr 1e-2), validation accuracy every epoch, a
checkpoint every epoch, ``torch.set_num_threads(1)``:

* ``plain``       the loop everyone writes, ``torch.save`` of model + optimizer each epoch
* ``durable``     the same with the atomic durable save (temporary, fsync, rename, folder fsync:
                  ``_common.atomic_durable_save``) — the honest minimum of a crash-safe
                  checkpoint and the baseline of every ratio
* ``this``        ``nnx_api.NNModel(module=net).train(...)`` with its defaults (durable commits)
* ``skorch``      ``NeuralNetClassifier`` with ``Checkpoint(monitor=None)`` (saves every epoch)
* ``lightning``   ``Trainer`` with ``ModelCheckpoint`` (every epoch), logger and progress bar off
* ``nnx-0.4.1``   NNx 0.4.1's ``NNModel(module=net).train(...)`` (its runs root is the working
                  directory, so it runs in a fresh temporary folder)

Each round runs every arm once, the order rotating (``_common.interleaved``, after a warm-up
round). An arm's *epoch* is its steady-state epoch: from the start of epoch 1 to the end of
training, divided by the epochs after the first (epoch 0 pays first-call costs), stamped by each
framework's own epoch-begin and train-end hooks. The ratio of a round is the arm's epoch over the
durable loop's epoch in that round; the table gives the median over rounds and the min–max.
Two tables: wall time (the result), and the training thread's CPU time (``time.thread_time``:
the same epochs without fsync and scheduler waits; when the two agree, the spread is the CPU's
speed varying between rounds, not the disk).
Prints the load average and the fsync latency at the start and the end. Timings are printed,
never asserted; exits 0.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import os
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import _common as C

C.setup_threads()
os.environ.setdefault("NNX_TQDM_DISABLE", "1")  # NNx 0.4.1's progress bar
os.environ.setdefault("NNX_PROGRESS", "0")

import lightning as L  # noqa: E402
import nnx as nnx041  # noqa: E402  # thekaveh-nnx 0.4.1
import skorch  # noqa: E402
from skorch.callbacks import Callback as SkorchCallback  # noqa: E402
from skorch.callbacks import Checkpoint  # noqa: E402
from skorch.helper import predefined_split  # noqa: E402

import nnx_api  # noqa: E402  # this project

logging.getLogger("lightning").setLevel(logging.ERROR)
logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
warnings.filterwarnings("ignore", module="lightning")

ARMS = ("plain", "durable", "this", "skorch", "lightning", "nnx-0.4.1")
BASE = "durable"


def now() -> tuple[float, float]:
    """Wall time and this thread's CPU time (every arm trains on the calling thread)."""
    return time.perf_counter(), time.thread_time()


def steady(stamps: list[tuple[float, float]]) -> dict[str, float]:
    """``stamps``: every epoch start, then the end of training; the steady-state epoch's wall
    time (``epoch``) and CPU time of the training thread (``cpu``: no fsync or scheduler waits)."""
    epochs = len(stamps) - 1
    return {key: (stamps[-1][i] - stamps[1][i]) / (epochs - 1) for i, key in enumerate(("epoch", "cpu"))}


# ------------------------------------------------------------------------------- arms
def plain_arm(job: C.Job, epochs: int, *, durable: bool) -> dict[str, float]:
    train_loader, val_loader = job.loaders(0)
    net = job.net()
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    loss_fn = nn.CrossEntropyLoss()
    stamps = []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "checkpoint.pt")
        for epoch in range(epochs):
            stamps.append(now())
            C.plain_epoch(net, opt, loss_fn, train_loader, val_loader)
            state = {"epoch": epoch, "model": net.state_dict(), "optimizer": opt.state_dict()}
            if durable:
                C.atomic_durable_save(state, path)
            else:
                torch.save(state, path)
        stamps.append(now())
    return steady(stamps)


class Stamps:
    """Every epoch start, then the end of training (a callback of either NNx)."""

    def __init__(self) -> None:
        self.times: list[tuple[float, float]] = []

    def on_epoch_begin(self, ctx: Any) -> None:
        self.times.append(now())

    def on_train_end(self, ctx: Any) -> None:
        self.times.append(now())


class ThisStamps(Stamps, nnx_api.Callback):
    pass


def nnx_job(api: Any, job: C.Job, epochs: int, optim: dict[str, Any], train: dict[str, Any]) -> tuple[Any, Any]:
    """The same model and training parameters through either NNx's API (the same names in both)."""
    train_loader, val_loader = job.loaders(0)
    model = api.NNModel(module=job.net(), params=api.NNModelParams(loss=api.Losses.CROSS_ENTROPY))
    params = api.NNTrainParams(
        n_epochs=epochs, optim=api.NNOptimParams(name=api.Optims.ADAM, max_lr=1e-2, weight_decay=0.0, **optim),
        train_loader=train_loader, val_loader=val_loader, **train,
    )
    return model, params


def this_arm(job: C.Job, epochs: int) -> dict[str, float]:
    model, params = nnx_job(nnx_api, job, epochs, {}, {"progress": False})
    stamps = ThisStamps()
    with tempfile.TemporaryDirectory() as root:
        model.train(params, callbacks=[stamps], root=root)
    return steady(stamps.times)


class Nnx041Stamps(Stamps, nnx041.Callback):
    pass


def nnx041_arm(job: C.Job, epochs: int) -> dict[str, float]:
    model, params = nnx_job(nnx041, job, epochs, {"momentum": (0.9, 0.999)}, {})
    stamps = Nnx041Stamps()
    here = os.getcwd()
    with tempfile.TemporaryDirectory() as cwd, contextlib.redirect_stdout(io.StringIO()):
        os.chdir(cwd)  # NNx 0.4.1 writes its runs under the working directory
        try:
            model.train(params, callbacks=[stamps])
        finally:
            os.chdir(here)
    return steady(stamps.times)


class SkorchStamps(SkorchCallback):
    def __init__(self) -> None:
        self.times: list[tuple[float, float]] = []

    def on_epoch_begin(self, net: Any, **kwargs: Any) -> None:
        self.times.append(now())

    def on_train_end(self, net: Any, **kwargs: Any) -> None:
        self.times.append(now())


def skorch_arm(job: C.Job, epochs: int) -> dict[str, float]:
    stamps = SkorchStamps()
    with tempfile.TemporaryDirectory() as tmp:
        net = skorch.NeuralNetClassifier(
            job.net(),
            criterion=nn.CrossEntropyLoss,
            optimizer=torch.optim.Adam,
            lr=1e-2,
            batch_size=job.batch,
            max_epochs=epochs,
            train_split=predefined_split(job.val),
            iterator_train__shuffle=True,
            iterator_train__generator=torch.Generator().manual_seed(0),
            callbacks=[stamps, Checkpoint(monitor=None, dirname=tmp, load_best=False)],
            classes=list(range(job.classes)),
            verbose=0,
        )
        net.fit(job.train, y=None)
    return steady(stamps.times)


class LitModule(L.LightningModule):
    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net
        self.loss_fn = nn.CrossEntropyLoss()

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return self.loss_fn(self.net(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_acc", (self.net(x).argmax(-1) == y).float().mean(), prog_bar=False)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.net.parameters(), lr=1e-2)


class LitStamps(L.Callback):
    def __init__(self) -> None:
        self.times: list[tuple[float, float]] = []

    def on_train_epoch_start(self, trainer: Any, module: Any) -> None:
        self.times.append(now())

    def on_train_end(self, trainer: Any, module: Any) -> None:
        self.times.append(now())


def lightning_arm(job: C.Job, epochs: int) -> dict[str, float]:
    train_loader, val_loader = job.loaders(0)
    stamps = LitStamps()
    with tempfile.TemporaryDirectory() as tmp:
        trainer = L.Trainer(
            max_epochs=epochs, accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
            enable_model_summary=False, default_root_dir=tmp,
            callbacks=[stamps, L.pytorch.callbacks.ModelCheckpoint(dirpath=tmp, every_n_epochs=1)],
        )
        trainer.fit(LitModule(job.net()), train_loader, val_loader)
    return steady(stamps.times)


# ------------------------------------------------------------------------------- rows
class MLPJob(C.Job):
    classes = C.CLASSES


class CNNJob(C.DigitsJob):
    classes = 10


ROWS: list[dict[str, Any]] = [
    {"name": "MLP 32-64-2, batch 16", "job": lambda: MLPJob(batch=16, batches=313)},
    {"name": "MLP 32-64-2, batch 64", "job": lambda: MLPJob(batch=64, batches=313)},
    {"name": "MLP 32-64-2, batch 256", "job": lambda: MLPJob(batch=256, batches=79)},
    {"name": "MLP 32-512-512-2, batch 64", "job": lambda: MLPJob(batch=64, hidden=(512, 512), batches=313)},
    {"name": "MLP 32-1024-1024-2 (1M), batch 64", "job": lambda: MLPJob(batch=64, hidden=(1024, 1024), batches=64)},
    {"name": "digits CNN, batch 64", "job": lambda: CNNJob(batch=64)},
]


def arms_of(job: C.Job, epochs: int) -> dict[str, Callable[[], dict[str, float]]]:
    return {
        "plain": lambda: plain_arm(job, epochs, durable=False),
        "durable": lambda: plain_arm(job, epochs, durable=True),
        "this": lambda: this_arm(job, epochs),
        "skorch": lambda: skorch_arm(job, epochs),
        "lightning": lambda: lightning_arm(job, epochs),
        "nnx-0.4.1": lambda: nnx041_arm(job, epochs),
    }


def cell(arm: list[float], base: list[float]) -> str:
    """Median and min–max of the per-round ratios arm / base."""
    r = [a / b for a, b in zip(arm, base, strict=True)]
    return f"{statistics.median(r):.2f} ({min(r):.2f}–{max(r):.2f})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one timed round of 3 epochs per row")
    parser.add_argument("--rows", default=None, help="comma-separated row indices (default: all)")
    parser.add_argument("--reps", type=int, default=3, help="timed rounds per row (default 3)")
    parser.add_argument("--epochs", type=int, default=3, help="epochs per call (default 3: two steady-state)")
    parser.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated arms (default: all; {BASE} always runs)")
    args = parser.parse_args(argv)
    rows = ROWS if args.rows is None else [ROWS[int(i)] for i in args.rows.split(",")]
    arms = [a for a in ARMS if a == BASE or a in args.arms.split(",")]
    reps = 1 if args.quick else args.reps
    versions = (
        f"lightning {L.__version__}, skorch {skorch.__version__}, "
        f"nnx {getattr(nnx041, '__version__', '0.4.1')} (thekaveh-nnx)"
    )
    print(f"machine: {C.machine()}; {versions}")
    print(f"load average {' / '.join(f'{x:.1f}' for x in os.getloadavg())}; fsync latency {C.fsync_latency()}")
    print(
        f"\nsteady-state epoch ÷ the durable plain loop's, per round; median (min–max) over {reps} round(s) "
        f"of {args.epochs} epochs; wall time, then the training thread's CPU time\n"
    )
    header = " | ".join(f"{a}" for a in arms if a != BASE)
    tables: dict[str, list[str]] = {"epoch": [], "cpu": []}
    started = time.perf_counter()
    for row in rows:
        job = row["job"]()
        every = arms_of(job, args.epochs)
        samples = C.interleaved({a: every[a] for a in arms}, reps)
        for key, lines in tables.items():
            base = samples[BASE][key]
            cells = " | ".join(cell(samples[a][key], base) for a in arms if a != BASE)
            lines.append(
                f"| {row['name']} | {C.n_params(job.net()):,} | {job.rows:,} | {statistics.median(base) * 1e3:.1f} | {cells} |"
            )
        print(f"{row['name']}: {tables['epoch'][-1]}", flush=True)
    for key, title in (("epoch", "wall time"), ("cpu", "CPU time of the training thread")):
        print(f"\n{title}\n\n| row | params | rows/epoch | durable ms/epoch | {header} |")
        print("|---|---:|---:|---:|" + "---:|" * (len(arms) - 1))
        print("\n".join(tables[key]))
    print(
        f"\n{time.perf_counter() - started:.0f} s; load average {' / '.join(f'{x:.1f}' for x in os.getloadavg())} "
        f"at the end; fsync latency {C.fsync_latency()}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
