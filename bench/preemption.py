"""Preemption: the seconds from a signal to a durable commit, and to the process's exit (docs/concepts.md,
"Preemption recipes": what a grace period must cover).

    .venv/bin/python bench/preemption.py           # about a minute on 2 cores
    .venv/bin/python bench/preemption.py --quick   # the two smaller states

For each state size a child process trains an MLP (``commit_every`` unset: the epoch-end commits
only; ``SIGTERM`` preempts, the default) whose weights and Adam state are S MB. Once it has made a
few updates it says so on stdout; the parent then sends ``SIGTERM`` and notes the time. The child
notes when ``train()`` raised ``TrainingPreempted`` (the update in progress finished, its commit
durable: LAST renamed and its folder fsynced before the raise), and the parent when the child
exited. Both are ``time.monotonic()`` (CLOCK_MONOTONIC, one clock for the machine on Linux). A
step's time is printed beside them: the signal waits for the update in progress. Medians of
several signals per size; then what a bare process (torch and nnx_api imported) takes to exit. Timings are printed, never asserted; the script always exits 0.
"""

from __future__ import annotations

import argparse
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import torch
from _common import machine, setup_threads
from torch.utils.data import DataLoader, TensorDataset

import nnx_api as nnx

READY_AT = 3  # updates before the child says it is ready for the signal


class Ready(nnx.Callback):
    """Says ``ready`` once, after update ``READY_AT``, and notes every update's time."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def on_optimizer_update(self, ctx: Any, event: Any) -> None:
        self.times.append(time.monotonic())
        if ctx.update_count == READY_AT:
            print("ready", flush=True)


def child(width: int, root: str) -> None:
    """Train until the signal; print ``committed <t> step <s>`` when TrainingPreempted is raised."""
    setup_threads()
    torch.manual_seed(0)
    x, y = torch.randn(64 * 400, 32), torch.randint(0, 4, (64 * 400,))
    loader = DataLoader(TensorDataset(x, y), batch_size=64, shuffle=True)
    model = nnx.NNModel(nnx.NNParams(input_dim=32, output_dim=4, hidden_dims=(width, width)), nnx.NNModelParams())
    params = nnx.NNTrainParams(n_epochs=1_000, seed=0, train_loader=loader, progress=False,
                               optim=nnx.NNOptimParams(name="adam", max_lr=1e-3))
    ready = Ready()
    try:
        model.train(params, root=root, callbacks=[ready])
    except nnx.TrainingPreempted as exc:
        done = time.monotonic()
        steps = [b - a for a, b in zip(ready.times, ready.times[1:], strict=False)]
        print(f"committed {done} step {statistics.median(steps)} update {exc.update}", flush=True)
        sys.exit(75)


def one_signal(width: int) -> tuple[float, float, float]:
    """(signal → committed, signal → exit, a step), in seconds."""
    with tempfile.TemporaryDirectory() as root:
        proc = subprocess.Popen([sys.executable, __file__, "--child", str(width), root], stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        line = proc.stdout.readline().split()
        proc.wait(timeout=600)
        exited = time.monotonic()
        assert proc.returncode == 75 and line[0] == "committed", (proc.returncode, line)
        return float(line[1]) - sent, exited - sent, float(line[3])


def bare_exit() -> float:
    """Seconds from a process's last line to its exit when it only imported torch and nnx_api:
    what an exit costs whatever training did."""
    code = "import time, torch, nnx_api; print(time.monotonic(), flush=True)"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    printed = float(proc.stdout.readline())
    proc.wait(timeout=120)
    return time.monotonic() - printed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--child", nargs=2)
    args = parser.parse_args()
    if args.child:
        child(int(args.child[0]), args.child[1])
        return
    setup_threads()
    print(f"bench/preemption.py: {machine()}, one process, Adam, SIGTERM after update {READY_AT}\n")
    print("| weights + Adam state | a step, ms | signal → committed, ms (median, min–max) | signal → exit, ms (median) | signals |")
    print("|---|---|---|---|---|")
    widths = (64, 1000) if args.quick else (64, 1000, 2900)
    reps = 3 if args.quick else 5
    for width in widths:
        state_mb = (32 * width + width + width * width + width + width * 4 + 4) * 4 * 3 / 1e6
        runs = [one_signal(width) for _ in range(reps)]
        committed, exited, steps = ([r[i] * 1e3 for r in runs] for i in range(3))
        print(f"| {state_mb:.2f} MB | {statistics.median(steps):.1f} | {statistics.median(committed):.0f} "
              f"({min(committed):.0f}–{max(committed):.0f}) | {statistics.median(exited):.0f} | {reps} |")
    exits = [bare_exit() * 1e3 for _ in range(reps)]
    print(f"\nA process that only imports torch and nnx_api exits {statistics.median(exits):.0f} ms after its last line "
          "(median): the interpreter's and torch's own teardown, part of every signal → exit above.")


if __name__ == "__main__":
    main()
