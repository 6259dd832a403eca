"""The overhead table of docs/performance.md on a GPU: a plain PyTorch loop against ``NNModel.train``.

    .venv/bin/python bench/gpu.py                  # on CUDA (about 2–3 minutes; says so and exits 0 without CUDA)
    .venv/bin/python bench/gpu.py --quick          # 2 repetitions of 3 epochs per row, for a smoke run
    .venv/bin/python bench/gpu.py --device cpu     # the same script on the CPU (checks its logic anywhere)

Rows: the headline MLP of bench/overhead.py (32 → 64 → 2, batch 64, 64 batches per epoch), the
1M-parameter MLP (32 → 1024 → 1024 → 2), and a small CNN on scikit-learn's bundled digits (8×8
images, 1,437 training rows, batch 64), each in fp32 and in bf16 autocast (bf16 rows only where
the device runs bf16 natively: CPU, or CUDA of compute capability ≥ 8.0). Adam (lr 1e-2),
cross-entropy, validation accuracy every epoch. Arms, as in bench/overhead.py, run in the same
process and interleaved (the order rotates every repetition, after one untimed warm-up round):

* ``plain``        batches moved to the device, autocast forward, loss in float32, backward, step;
                   validation accuracy counted on the device and read once; ``torch.save`` of
                   model + optimizer state every epoch
* ``plain+fsync``  the same with an ``fsync`` of the saved file (the baseline: NNx commits durably)
* ``nnx``          ``NNModel.train`` on the same loaders and initial weights, precision through
                   ``PrecisionPolicy``, into a fresh runs root each repetition

Every arm stamps the clocks at each epoch start and at the end, after ``torch.cuda.synchronize()``
on CUDA (so queued kernels count in the epoch that queued them). Ratios are medians of the
per-repetition ratios against the plain loop measured in the same run (quartiles in brackets).
Timings are printed, never asserted; the script exits 0.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C
import overhead as O  # summarize() and paired(): the same statistics as the CPU table

from nnx_adapters.pytorch.devices import bf16_supported
import nnx_api as nnx


def autocast(device: torch.device, precision: str) -> Callable[[], Any]:
    if precision == "fp32":
        return contextlib.nullcontext
    return lambda: torch.autocast(device_type=device.type, dtype=torch.bfloat16)


def stamp(device: torch.device) -> tuple[float, float]:
    """(wall, process CPU) seconds, after the device finished what was queued."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter(), time.process_time()


class Stamps(nnx.Callback):
    """The NNx arm's clocks: every epoch start and the end of the loop."""

    def __init__(self, device: torch.device) -> None:
        self.device, self.times = device, []

    def on_epoch_begin(self, ctx: Any) -> None:
        self.times.append(stamp(self.device))

    def on_train_end(self, ctx: Any) -> None:
        self.times.append(stamp(self.device))


def plain_arm(job: Any, epochs: int, device: torch.device, precision: str, *, fsync: bool) -> dict[str, float]:
    train_loader, val_loader = job.loaders(0)
    net = job.net().to(device)
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    loss_fn = nn.CrossEntropyLoss()
    cast = autocast(device, precision)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "checkpoint.pt")
        start = stamp(device)[0]
        stamps = []
        for epoch in range(epochs):
            stamps.append(stamp(device))
            net.train()
            for x, y in train_loader:
                x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
                opt.zero_grad(set_to_none=True)
                with cast():
                    out = net(x)
                loss_fn(out.float(), y).backward()
                opt.step()
            net.eval()
            correct, total = torch.zeros((), dtype=torch.long, device=device), 0
            with torch.inference_mode(), cast():
                for x, y in val_loader:
                    x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
                    correct += (net(x).argmax(-1) == y).sum()
                    total += len(y)
            _accuracy = int(correct) / total
            with open(path, "wb") as f:
                torch.save({"epoch": epoch, "model": net.state_dict(), "optimizer": opt.state_dict()}, f)
                if fsync:
                    f.flush()
                    os.fsync(f.fileno())
        stamps.append(stamp(device))
    return O.summarize(stamps, stamps[-1][0] - start, epochs)


def nnx_arm(job: Any, epochs: int, device: torch.device, precision: str) -> dict[str, float]:
    train_loader, val_loader = job.loaders(0)
    policy = None if precision == "fp32" else nnx.PrecisionPolicy(mode=precision)
    model = nnx.NNModel(module=job.net(), params=nnx.NNModelParams(device=nnx.Devices(device.type), precision=policy))
    params = nnx.NNTrainParams(n_epochs=epochs, optim=nnx.NNOptimParams(name=nnx.Optims.ADAM, max_lr=1e-2),
                               train_loader=train_loader, val_loader=val_loader, progress=False)
    stamps = Stamps(device)
    with tempfile.TemporaryDirectory() as root:
        start = stamp(device)[0]
        model.train(params, callbacks=[stamps], root=root)
        total_s = stamp(device)[0] - start
    return O.summarize(stamps.times, total_s, epochs)


ROWS: list[dict[str, Any]] = [
    {"name": "MLP 32→64→2, batch 64", "job": lambda: C.Job(batch=64), "epochs": 5, "reps": 7},
    {"name": "MLP 32→1024→1024→2, batch 64", "job": lambda: C.Job(batch=64, hidden=(1024, 1024)), "epochs": 4, "reps": 5},
    {"name": "digits CNN, batch 64", "job": lambda: C.DigitsJob(batch=64), "epochs": 5, "reps": 7},
]


def describe(device: torch.device) -> str:
    """The device line docs/gpu.md records: GPU, compute capability, driver, CUDA and torch."""
    if device.type != "cuda":
        return f"CPU ({platform.processor() or platform.machine()}), torch {torch.__version__}"
    name, (major, minor) = torch.cuda.get_device_name(device), torch.cuda.get_device_capability(device)
    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=20).stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        driver = "unknown (no nvidia-smi)"
    return (f"{name} (compute capability {major}.{minor}), driver {driver}, CUDA {torch.version.cuda}, "
            f"cuDNN {torch.backends.cudnn.version()}, torch {torch.__version__}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="default: cuda")
    parser.add_argument("--quick", action="store_true", help="2 repetitions and 3 epochs per row")
    parser.add_argument("--rows", default=None, help="comma-separated row indices (default: all)")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("bench/gpu.py: no CUDA device on this machine; nothing measured (use --device cpu to check the script)")
        return 0
    device = torch.device(args.device, 0) if args.device == "cuda" else torch.device("cpu")
    rows = ROWS if args.rows is None else [ROWS[int(i)] for i in args.rows.split(",")]
    precisions = ["fp32"] + (["bf16"] if bf16_supported(device) else [])
    print(f"device: {describe(device)}")
    print(f"host: {C.machine()}; load average {os.getloadavg()[0]:.1f}")
    if "bf16" not in precisions:
        print("bf16 rows left out: this device does not run bf16 natively (CUDA compute capability < 8.0)")
    print("\nsteady-state ms/epoch (median over repetitions); ratios: medians of per-repetition nnx / plain+fsync\n")
    print("| row | precision | params | rows/epoch | plain ms | plain+fsync ms | nnx ms | **ratio** | vs no-fsync "
          "| CPU ratio | whole call | nnx fixed ms/call |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    started = time.perf_counter()
    for row in rows:
        job = row["job"]()
        epochs, reps = (3, 2) if args.quick else (row["epochs"], row["reps"])
        for precision in precisions:
            arms = {  # C.interleaved calls each arm before the loop moves on
                "plain": lambda: plain_arm(job, epochs, device, precision, fsync=False),  # noqa: B023
                "plain+fsync": lambda: plain_arm(job, epochs, device, precision, fsync=True),  # noqa: B023
                "nnx": lambda: nnx_arm(job, epochs, device, precision),  # noqa: B023
            }
            res = C.interleaved(arms, reps)
            med = {arm: {k: statistics.median(v) for k, v in r.items()} for arm, r in res.items()}
            print(
                f"| {row['name']} | {precision} | {C.n_params(job.net()):,} | {job.rows:,} "
                f"| {med['plain']['epoch'] * 1e3:.1f} | {med['plain+fsync']['epoch'] * 1e3:.1f} "
                f"| {med['nnx']['epoch'] * 1e3:.1f} | **{O.paired(res, 'epoch')}** | {O.paired(res, 'epoch', 'plain')} "
                f"| {O.paired(res, 'cpu_epoch')} | {O.paired(res, 'call_epoch')} | {med['nnx']['fixed'] * 1e3:.0f} |",
                flush=True,
            )
    print(f"\n{time.perf_counter() - started:.0f} s for the table; load average {os.getloadavg()[0]:.1f} at the end")
    print("ratio: steady-state epoch (wall, after a device synchronize), nnx / plain+fsync. vs no-fsync: nnx / plain. "
          "CPU ratio: process CPU seconds (a CUDA synchronize spins, so on a GPU this tracks wall time). "
          "whole call: the whole call / epochs.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
