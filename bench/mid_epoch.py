"""Commits inside an epoch and resuming from them (docs/concepts.md, "Exact resume anywhere").

    .venv/bin/python bench/mid_epoch.py            # about a minute on 2 cores
    .venv/bin/python bench/mid_epoch.py --quick    # a smaller state and epoch

Three tables:

* commit cost: one run with ``commit_every`` (an MLP with Adam, a few MB of state), every commit
  timed as the session makes it: the mid-epoch commits by their position in the epoch and by
  epoch, against the epoch-end commits of the same state (the same bytes, plus tags);
* resume: a run over 1M rows (batch 256, 3,907 batches an epoch), interrupted 90% into epoch 1
  (``commit_every``), or at epoch 1's or epoch 2's start (epoch-boundary commits); the seconds
  from the rerun's ``train()`` call to its first committed update, each the median of several
  reruns. A resume reads the committed history (one record a batch), so the boundary with as many
  records as the mid-epoch point is epoch 2's start;
* the plain loop: ``commit_every`` unset against set, seconds per epoch, so its cost over the
  epoch-boundary commits is visible (the overhead rows of ``bench/overhead.py`` run unset).

Timings are printed, never asserted; the script always exits 0.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from _common import machine, setup_threads
from torch.utils.data import DataLoader, TensorDataset

import nnx_api as nnx
from nnx_api.training.session import TrainingSession


class Timed:
    """Wraps the session's two commits and notes each one's seconds, epoch and batch."""

    def __init__(self) -> None:
        self.partial: list[tuple[int, int, float]] = []
        self.whole: list[tuple[int, float]] = []
        self._commit, self._partial = TrainingSession.commit, TrainingSession.commit_partial

    def __enter__(self) -> Timed:
        timed = self

        def commit(session: Any, epoch: int) -> None:
            t = time.perf_counter()
            timed._commit(session, epoch)
            timed.whole.append((epoch, time.perf_counter() - t))

        def commit_partial(session: Any, epoch: int, batches: int) -> None:
            t = time.perf_counter()
            timed._partial(session, epoch, batches)
            timed.partial.append((epoch, batches, time.perf_counter() - t))

        TrainingSession.commit, TrainingSession.commit_partial = commit, commit_partial  # type: ignore[method-assign]
        return self

    def __exit__(self, *_: Any) -> None:
        TrainingSession.commit, TrainingSession.commit_partial = self._commit, self._partial  # type: ignore[method-assign]


def model(width: int, inputs: int = 32) -> nnx.NNModel:
    torch.manual_seed(0)
    return nnx.NNModel(nnx.NNParams(input_dim=inputs, output_dim=4, hidden_dims=(width, width)), nnx.NNModelParams())


def commit_cost(root: Path, width: int, batches: int, epochs: int, every: int) -> None:
    x, y = torch.randn(batches * 64, 32), torch.randint(0, 4, (batches * 64,))
    loader = DataLoader(TensorDataset(x, y), batch_size=64, shuffle=True)
    params = nnx.NNTrainParams(n_epochs=epochs, seed=0, train_loader=loader, progress=False, commit_every=every,
                               optim=nnx.NNOptimParams(name="adam", max_lr=1e-3))
    net = model(width)
    state_mb = sum(p.numel() for p in net.net.parameters()) * 4 * 3 / 1e6  # weights + Adam's two moments
    with Timed() as timed:
        net.train(params, root=root)
    ms = lambda xs: f"{1e3 * statistics.median(xs):.1f}"  # noqa: E731
    print(f"\n### Commit cost: {state_mb:.1f} MB of weights and Adam state, commit_every={every}, {batches} batches an epoch\n")
    print("| commit | count | median ms | min ms | max ms |")
    print("|---|---|---|---|---|")
    half = batches // 2
    rows = {
        "mid-epoch, first half of the epoch": [t for _, b, t in timed.partial if b <= half],
        "mid-epoch, second half of the epoch": [t for _, b, t in timed.partial if b > half],
        "mid-epoch, first epoch": [t for e, _, t in timed.partial if e == 0],
        "mid-epoch, last epoch": [t for e, _, t in timed.partial if e == epochs - 1],
        "epoch end (same state, + tags)": [t for _, t in timed.whole],
    }
    for name, xs in rows.items():
        if xs:
            print(f"| {name} | {len(xs)} | {ms(xs)} | {1e3 * min(xs):.1f} | {1e3 * max(xs):.1f} |")


class Crash(nnx.Callback):
    def __init__(self, at: int) -> None:
        self.at = at

    def on_optimizer_update(self, ctx: Any, event: Any) -> None:
        if ctx.update_count == self.at:
            raise RuntimeError("crash")


class FirstUpdate(nnx.Callback):
    def __init__(self) -> None:
        self.at: float | None = None

    def on_optimizer_update(self, ctx: Any, event: Any) -> None:
        if self.at is None:
            self.at = time.perf_counter()
            ctx.stop_at_update = True  # the resume is what is timed


def resume_time(rows: int, reps: int) -> None:
    x, y = torch.randn(rows, 4), torch.randint(0, 3, (rows,))
    loader = DataLoader(TensorDataset(x, y), batch_size=256, shuffle=True, generator=torch.Generator().manual_seed(1))
    per_epoch = len(loader)
    arms = {"epoch boundary (epoch 1 batch 0)": (None, per_epoch + 1),
            f"90% into epoch 1 (batch {int(0.9 * per_epoch)})": (1000, per_epoch + int(0.9 * per_epoch) + 1),
            "epoch boundary (epoch 2 batch 0)": (None, 2 * per_epoch + 1)}
    print(f"\n### Resume: {rows:,} rows, batch 256, {per_epoch} batches an epoch; seconds from train() to the first update\n")
    print("| resume point | median s | min s | max s |")
    print("|---|---|---|---|")
    results = {}
    for name, (every, crash) in arms.items():
        root = Path(tempfile.mkdtemp())
        params = nnx.NNTrainParams(n_epochs=3, seed=0, train_loader=loader, progress=False, resume="auto",
                                   commit_every=every, optim=nnx.NNOptimParams(name="sgd", max_lr=0.01))
        try:
            model(8, inputs=4).train(params, root=root, callbacks=[Crash(crash)])
        except RuntimeError:
            pass
        times = []
        for _ in range(reps):
            copy = Path(tempfile.mkdtemp()) / "runs"
            shutil.copytree(root, copy)
            first = FirstUpdate()
            t = time.perf_counter()
            model(8, inputs=4).train(params, root=copy, callbacks=[first])
            assert first.at is not None
            times.append(first.at - t)
            shutil.rmtree(copy.parent)
        shutil.rmtree(root)
        results[name] = times
        print(f"| {name} | {statistics.median(times):.3f} | {min(times):.3f} | {max(times):.3f} |")
    a, b, c = (statistics.median(v) for v in results.values())
    print(f"\n90% into epoch 1 / epoch 1's start: {b / a:.3f}; / epoch 2's start: {b / c:.3f} (a resume reads the"
          " committed history, one record a batch: 90% into epoch 1 holds 1.9 epochs of records, epoch 2's start 2)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    setup_threads()
    print(f"# bench/mid_epoch.py — {time.strftime('%Y-%m-%d')} — {machine()}")
    with tempfile.TemporaryDirectory() as tmp:
        if args.quick:
            commit_cost(Path(tmp), width=256, batches=32, epochs=2, every=4)
        else:
            commit_cost(Path(tmp), width=1024, batches=64, epochs=3, every=8)
    resume_time(100_000 if args.quick else 1_000_000, reps=2 if args.quick else 5)


if __name__ == "__main__":
    main()
