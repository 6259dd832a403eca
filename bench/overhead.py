"""NNx ``NNModel.train`` against a plain PyTorch loop on the same job, data, initial weights and loaders.

    .venv/bin/python bench/overhead.py            # every row (about 2–3 minutes on 2 cores)
    .venv/bin/python bench/overhead.py --quick    # fewer repetitions, for a smoke run

The job (issue 7): MLP 32 → 64 → 2, Adam (lr 1e-2), cross-entropy, validation accuracy every
epoch, ``torch.set_num_threads(1)``, 64 training batches per epoch and 16 validation batches.
Arms, run in the same process and interleaved (the order rotates every repetition):

* ``plain``        train, validation accuracy, ``torch.save`` of model + optimizer state each epoch
* ``plain+fsync``  the same, with an ``fsync`` of the saved file (the fair baseline for NNx,
                   whose every epoch commit is durable)
* ``nnx``          ``NNModel.train`` with ``NNTrainParams(progress=False)``, into a fresh runs root
                   (a new temporary folder) each repetition; the default everything else

Each arm records a timestamp at the start of every epoch and at the end of the last one. The
*steady-state epoch* is the median over repetitions of the mean epoch time of epochs 1.. (epoch 0
pays first-call costs in both arms); it includes validation and the per-epoch save/commit. The
*per-call fixed cost* is the rest of the call (NNx: validation of inputs, run admission, lease,
attempt record, the final LAST refresh and loading the returned run). CPU seconds (process time)
of the steady-state epochs are reported too: they leave out fsync waits and most of the noise
from other processes on the machine. Timings are printed, never asserted; the script always
exits 0.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C

C.setup_threads()

import nnx_api as nnx  # noqa: E402


class Stamps(nnx.Callback):
    """Records a timestamp at every epoch start and at the end of the loop."""

    def __init__(self) -> None:
        self.times: list[tuple[float, float]] = []

    def on_epoch_begin(self, ctx: Any) -> None:
        self.times.append(now())

    def on_train_end(self, ctx: Any) -> None:
        self.times.append(now())


def now() -> tuple[float, float]:
    """(wall seconds, process CPU seconds)."""
    return time.perf_counter(), time.process_time()


def plain_arm(job: C.Job, epochs: int, *, fsync: bool, folder: str | None) -> dict[str, float]:
    """The plain loop of ``_common.plain_loop``, with per-epoch timestamps."""
    train_loader, val_loader = job.loaders(0)
    net = job.net()
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    loss_fn = nn.CrossEntropyLoss()
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        path = os.path.join(tmp, "checkpoint.pt")
        start = time.perf_counter()
        stamps = []
        for epoch in range(epochs):
            stamps.append(now())
            C.plain_epoch(net, opt, loss_fn, train_loader, val_loader)
            with open(path, "wb") as f:
                torch.save({"epoch": epoch, "model": net.state_dict(), "optimizer": opt.state_dict()}, f)
                if fsync:
                    f.flush()
                    os.fsync(f.fileno())
        stamps.append(now())
        total_s = time.perf_counter() - start
    return summarize(stamps, total_s, epochs)


def nnx_arm(job: C.Job, epochs: int, *, folder: str | None) -> dict[str, float]:
    """``NNModel.train`` on the same loaders and initial weights, into a fresh runs root."""
    model, params = job.nnx_job(epochs)
    stamps = Stamps()
    with tempfile.TemporaryDirectory(dir=folder) as root:
        start = time.perf_counter()
        model.train(params, callbacks=[stamps], root=root)
        total_s = time.perf_counter() - start
    return summarize(stamps.times, total_s, epochs)


def summarize(stamps: list[tuple[float, float]], total_s: float, epochs: int) -> dict[str, float]:
    return {
        "epoch": (stamps[-1][0] - stamps[1][0]) / (epochs - 1),
        "cpu_epoch": (stamps[-1][1] - stamps[1][1]) / (epochs - 1),
        "fixed": total_s - (stamps[-1][0] - stamps[0][0]),
        "call_epoch": total_s / epochs,
    }


ROWS: list[dict[str, Any]] = [
    {"name": "batch 64 (headline)", "batch": 64, "hidden": (64,), "epochs": 6, "reps": 11},
    {"name": "batch 16", "batch": 16, "hidden": (64,), "epochs": 6, "reps": 9},
    {"name": "batch 256", "batch": 256, "hidden": (64,), "epochs": 5, "reps": 7},
    {"name": "1M params (1024, 1024), batch 64", "batch": 64, "hidden": (1024, 1024), "epochs": 3, "reps": 5},
    {"name": "batch 64, runs on tmpfs", "batch": 64, "hidden": (64,), "epochs": 6, "reps": 9, "tmpfs": True},
]


def measure(row: dict[str, Any], quick: bool) -> dict[str, dict[str, list[float]]]:
    job = C.Job(batch=row["batch"], hidden=row["hidden"])
    folder = "/dev/shm" if row.get("tmpfs") else None
    epochs, reps = row["epochs"], (3 if quick else row["reps"])
    arms: dict[str, Callable[[], dict[str, float]]] = {
        "plain": lambda: plain_arm(job, epochs, fsync=False, folder=folder),
        "plain+fsync": lambda: plain_arm(job, epochs, fsync=True, folder=folder),
        "nnx": lambda: nnx_arm(job, epochs, folder=folder),
    }
    results = C.interleaved(arms, reps)
    row["params"], row["rows"] = C.n_params(job.net()), job.rows
    return results


def paired(res: dict[str, dict[str, list[float]]], key: str, base: str = "plain+fsync") -> str:
    """Median and quartiles of the per-repetition ratios nnx / ``base`` (one round's arms ran back to
    back, so slow drifts of the machine's load cancel)."""
    ratios = [n / b for n, b in zip(res["nnx"][key], res[base][key], strict=True)]
    q1, _, q3 = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else (ratios[0],) * 3
    return f"{statistics.median(ratios):.3f} ({q1:.2f}–{q3:.2f})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 repetitions per row")
    parser.add_argument("--rows", default=None, help="comma-separated row indices (default: all)")
    args = parser.parse_args(argv)
    rows = ROWS if args.rows is None else [ROWS[int(i)] for i in args.rows.split(",")]
    if not os.path.isdir("/dev/shm"):
        rows = [r for r in rows if not r.get("tmpfs")]
    print(f"machine: {C.machine()}; load average {os.getloadavg()[0]:.1f}")
    print(f"fsync latency (median) at the start: {C.fsync_latency()}")
    print(
        "steady-state ms/epoch (median over repetitions); ratios are medians of per-repetition ratios "
        "(quartiles in brackets)\n"
    )
    print(
        "| row | params | rows/epoch | plain ms | plain+fsync ms | nnx ms | **ratio** | vs no-fsync "
        "| CPU ratio | whole call | nnx fixed ms/call |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        res = measure(row, args.quick)
        med = {arm: {k: statistics.median(v) for k, v in r.items()} for arm, r in res.items()}
        plain, ours = med["plain"], med["nnx"]

        print(
            f"| {row['name']} | {row['params']:,} | {row['rows']:,} | {plain['epoch'] * 1e3:.1f} "
            f"| {med['plain+fsync']['epoch'] * 1e3:.1f} | {ours['epoch'] * 1e3:.1f} | **{paired(res, 'epoch')}** "
            f"| {paired(res, 'epoch', 'plain')} | {paired(res, 'cpu_epoch')} | {paired(res, 'call_epoch')} "
            f"| {ours['fixed'] * 1e3:.0f} |",
            flush=True,
        )
    print(f"\nfsync latency (median) at the end: {C.fsync_latency()}; load average {os.getloadavg()[0]:.1f}")
    print(
        "ratio: steady-state epoch (wall), nnx / plain+fsync. vs no-fsync: nnx / plain. CPU ratio: "
        "steady-state process CPU seconds, nnx / plain+fsync (leaves out fsync waits and most of the noise "
        "from other processes). whole call: wall time of the whole call (fixed costs included) / epochs, "
        "nnx / plain+fsync."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
