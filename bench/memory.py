"""Peak memory (RSS) of long runs and of a large prediction, against the plain PyTorch loop.

    .venv/bin/python bench/memory.py                 # every row (about 1–2 minutes on 2 cores)
    .venv/bin/python bench/memory.py --quick         # 20 epochs, 20,000 rows: a smoke run

Each measurement runs in a fresh process (so one peak does not hide another) that imports
everything (torch, NNx) and builds its data first, records its RSS (``baseline``), resets the
kernel's peak-RSS mark (``/proc/self/clear_refs``), does the work, and reports the peak RSS since
(``VmHWM``) and the peak over the baseline. Linux only. Rows:

* ``train``: the headline MLP (32 → 64 → 2), 2,000 epochs of 4 batches of 16 rows, validation
  every epoch — the plain loop with the atomic durable save each epoch; ``NNModel.train`` with
  the eager history (``idps.csv``, every record in memory); with the history journal
  (``history=HistoryJournal(retention=1000)``: a bounded window in memory). Runs roots on
  ``/dev/shm`` where it exists (fsync takes no time there; files on tmpfs are not in the RSS).
* ``predict``: ``predict_proba`` over 1,000,000 rows (one tensor: one forward), and over the same
  rows as 256-row batches, against a plain ``inference_mode`` loop over those batches (logits
  concatenated, softmax, argmax).

Numbers are printed, never asserted; exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C

ARMS = {
    "train": ("plain loop + atomic save", "NNx, eager history", "NNx, history journal"),
    "predict": ("plain inference loop", "NNx predict_proba", "NNx predict_proba, the same batches"),
}


def _status(field: str) -> float:
    """A ``/proc/self/status`` memory field in MB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1e3  # kB
    raise RuntimeError(f"no {field} in /proc/self/status")


def start() -> float:
    """The RSS now, after the peak mark is reset to it."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset VmHWM (the peak RSS) to the current RSS
    return _status("VmRSS")


def peak_mb() -> float:
    return _status("VmHWM")


def train_arm(arm: str, epochs: int) -> dict[str, float]:
    import torch
    from torch import nn

    import nnx_api as nnx  # every arm imports NNx before its baseline

    C.setup_threads()
    job = C.Job(batch=16, batches=4)
    folder = "/dev/shm" if os.path.isdir("/dev/shm") else None

    def plain(n: int, root: str) -> None:
        train_loader, val_loader = job.loaders(0)
        net = job.net()
        opt = torch.optim.Adam(net.parameters(), lr=1e-2)
        loss_fn = nn.CrossEntropyLoss()
        for epoch in range(n):
            C.plain_epoch(net, opt, loss_fn, train_loader, val_loader)
            state = {"epoch": epoch, "model": net.state_dict(), "optimizer": opt.state_dict()}
            C.atomic_durable_save(state, os.path.join(root, "checkpoint.pt"))

    def ours(n: int, root: str) -> None:
        model, params = job.nnx_job(n)
        model.train(params, root=root, history=nnx.HistoryJournal(retention=1000) if arm.endswith("journal") else None)

    run = plain if arm.startswith("plain") else ours
    with tempfile.TemporaryDirectory(dir=folder) as root:
        run(2, os.path.join(root, "warm-up") if run is ours else root)  # first-call costs before the baseline
        base = start()
        run(epochs, root)
    return {"baseline": base, "peak": peak_mb()}


def predict_arm(arm: str, rows: int) -> dict[str, float]:
    import torch

    import nnx_api as nnx

    C.setup_threads()  # the NNx model below imports NNx in both arms
    job = C.Job(batch=64)
    model, _params = job.nnx_job(1)
    x = torch.randn(rows, C.INPUTS, generator=torch.Generator().manual_seed(0))

    def plain(data: torch.Tensor) -> None:
        net = model.net.eval()
        with torch.inference_mode():
            logits = torch.cat([net(chunk) for chunk in data.split(256)])
            _probabilities, _classes = torch.softmax(logits, -1), logits.argmax(-1)

    spec = nnx.ProbabilitySpec("categorical")  # the model has no TaskSpec: predict_proba needs the spec

    def batched(data: torch.Tensor) -> None:  # a loader of the plain loop's batches
        model.predict_proba(list(data.split(256)), spec)

    def whole(data: torch.Tensor) -> None:
        model.predict_proba(data, spec)

    run = plain if arm.startswith("plain") else batched if arm.endswith("batches") else whole
    run(x[:1000])  # first-call costs before the baseline
    base = start()
    run(x)
    return {"baseline": base, "peak": peak_mb()}


def child(kind: str, arm: str, size: int) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--child", kind, arm, str(size)],
        capture_output=True, text=True, check=True, timeout=1200, env={**os.environ, "NNX_PROGRESS": "0"},
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--child":
        kind, arm, size = argv[1], argv[2], int(argv[3])
        result: Any = train_arm(arm, size) if kind == "train" else predict_arm(arm, size)
        print(json.dumps(result))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2000)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--quick", action="store_true", help="20 epochs and 20,000 rows")
    args = parser.parse_args(argv)
    if args.quick:
        args.epochs, args.rows = 20, 20_000
    C.setup_threads()
    print(f"machine: {C.machine()}; load average {os.getloadavg()[0]:.1f}\n")
    print("| job | arm | baseline RSS MB | peak RSS MB | **peak − baseline MB** |")
    print("|---|---|---:|---:|---:|")
    for kind, size, label in (("train", args.epochs, f"{args.epochs:,} epochs"), ("predict", args.rows, f"predict_proba, {args.rows:,} rows")):
        for arm in ARMS[kind]:
            r = child(kind, arm, size)
            print(f"| {label} | {arm} | {r['baseline']:.0f} | {r['peak']:.0f} | **{r['peak'] - r['baseline']:.0f}** |", flush=True)
    print(f"\nload average {os.getloadavg()[0]:.1f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
