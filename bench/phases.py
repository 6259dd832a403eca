"""Where an epoch's CPU time goes, phase by phase: ``NNModel.train`` against the durable plain loop.

    .venv/bin/python bench/phases.py                  # MLP 32-64-2 at batch 16 and 64 (about 1 minute)
    .venv/bin/python bench/phases.py --batch 64 --hidden 1024,1024 --batches 64 --reps 7
    .venv/bin/python bench/phases.py --quick          # a smoke run

The same job as ``bench/peers.py``'s rows (its data, initial weights, loaders, Adam 1e-2, one
thread, the module passed as ``NNModel(module=...)``). Thread CPU time (``time.thread_time``: no
fsync or scheduler waits) of each phase of the steady-state epochs (epochs 1..):

* the durable plain loop: its training batches, its validation accuracy, its atomic durable save
  (``_common.atomic_durable_save``), timed inline;
* this project: the session's ``train_epoch``, ``validate`` (with the epoch's records),
  ``decide`` (with the history rows) and ``commit``, timed by wrapping those methods of
  ``nnx_api.training.session.TrainingSession`` for the measurement.

The arms alternate, the order flipping every repetition, after one untimed warm-up of each;
prints medians (and minimums) in ms per epoch. Timings are printed, never asserted; exits 0.
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import tempfile
import time
from typing import Any

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C

C.setup_threads()

import nnx_api as nnx  # noqa: E402
from nnx_api.training.session import TrainingSession  # noqa: E402

PHASES = ("train_epoch", "validate", "decide", "commit")


class PhaseClock:
    """Wraps ``TrainingSession``'s phase methods to add up their thread CPU time per epoch."""

    def __init__(self) -> None:
        self.spent: dict[str, list[float]] = collections.defaultdict(list)
        for name in PHASES:
            setattr(TrainingSession, name, self._timed(name, getattr(TrainingSession, name)))

    def _timed(self, name: str, method: Any) -> Any:
        def timed(session: Any, epoch: int, *args: Any) -> Any:
            start = time.thread_time()
            try:
                return method(session, epoch, *args)
            finally:
                self.spent[name].append(time.thread_time() - start)

        return timed


def durable_arm(job: C.Job, epochs: int) -> dict[str, float]:
    train_loader, val_loader = job.loaders(0)
    net = job.net()
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    loss_fn = nn.CrossEntropyLoss()
    spent: dict[str, float] = collections.defaultdict(float)
    with tempfile.TemporaryDirectory() as tmp:
        for epoch in range(epochs):
            t0 = time.thread_time()
            C.plain_train(net, opt, loss_fn, train_loader)
            t1 = time.thread_time()
            C.plain_accuracy(net, val_loader)
            t2 = time.thread_time()
            C.atomic_durable_save({"model": net.state_dict(), "optimizer": opt.state_dict()}, os.path.join(tmp, "c.pt"))
            t3 = time.thread_time()
            if epoch:
                spent["train"] += t1 - t0
                spent["validation"] += t2 - t1
                spent["save"] += t3 - t2
    return {k: v / (epochs - 1) for k, v in spent.items()}


def this_arm(job: C.Job, epochs: int, clock: PhaseClock) -> dict[str, float]:
    train_loader, val_loader = job.loaders(0)
    model = nnx.NNModel(module=job.net(), params=nnx.NNModelParams(loss=nnx.Losses.CROSS_ENTROPY))
    params = nnx.NNTrainParams(
        n_epochs=epochs, optim=nnx.NNOptimParams(name=nnx.Optims.ADAM, max_lr=1e-2), train_loader=train_loader,
        val_loader=val_loader, progress=False,
    )
    clock.spent.clear()
    with tempfile.TemporaryDirectory() as root:
        model.train(params, root=root)
    return {name: sum(times[1:]) / (epochs - 1) for name, times in clock.spent.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=None, help="one batch size (default: 16, then 64)")
    parser.add_argument("--hidden", default="64", help="hidden widths, e.g. 1024,1024")
    parser.add_argument("--batches", type=int, default=313, help="training batches per epoch")
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="2 repetitions of 3 epochs, for a smoke run")
    args = parser.parse_args(argv)
    if args.quick:
        args.reps, args.epochs = 2, 3
    hidden = tuple(int(h) for h in args.hidden.split(","))
    print(f"machine: {C.machine()}; load average {os.getloadavg()[0]:.1f}")
    print(f"thread CPU ms per steady-state epoch, median (min) of {args.reps} repetitions of {args.epochs} epochs\n")
    clock = PhaseClock()
    for batch in [args.batch] if args.batch else [16, 64]:
        job = C.Job(batch=batch, hidden=hidden, batches=args.batches)
        arms = {"durable": lambda job=job: durable_arm(job, args.epochs), "this": lambda job=job: this_arm(job, args.epochs, clock)}
        samples: dict[str, dict[str, list[float]]] = {name: collections.defaultdict(list) for name in arms}
        for rep in range(-1, args.reps):
            for name in list(arms)[:: 1 if rep % 2 else -1]:
                result = arms[name]()
                if rep >= 0:
                    for key, value in result.items():
                        samples[name][key].append(value)
        print(f"MLP 32-{'-'.join(map(str, hidden))}-2, batch {batch}, {args.batches} batches\n")
        print("| arm | phase | ms/epoch | min |\n|---|---|---:|---:|")
        for name, phases in samples.items():
            for phase, values in phases.items():
                print(f"| {name} | {phase} | {statistics.median(values) * 1e3:.2f} | {min(values) * 1e3:.2f} |")
            print(f"| {name} | **sum** | {sum(statistics.median(v) for v in phases.values()) * 1e3:.2f} | |")
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
