"""Costs of positioning a DataLoader (``nnx_adapters.pytorch.positioned``).

    .venv/bin/python bench/worker_seeding.py            # about 7 seconds on 2 cores
    .venv/bin/python bench/worker_seeding.py --quick    # fewer repetitions, no plain-loop reference

* per-sample seeding: what ``SeededSamples`` adds to every sample in a worker (the (seed, epoch,
  index) hash, then the CPU torch generator's, ``random``'s and numpy's seeds), µs per sample, each
  part and the sum, the median of several runs; and, for comparison, ``torch.manual_seed`` (which
  also queues the seeding of every lazily initialised accelerator, with a stack trace each time);
* skipping: a resume 90% into a 1M-row ``RandomSampler`` epoch with batch_size 256 (3,907 batches,
  3,516 skipped): seconds from ``epoch(0, skip=k)`` to its first batch, without workers and with two;
  for reference, the plain loop's time to the same batch with a trivial dataset.

Timings are printed, never asserted; the script always exits 0.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from nnx_adapters.pytorch.positioned import PositionedLoader, sample_seed

ROWS, BATCH = 1_000_000, 256


class Rows(Dataset):
    """A million rows that cost nothing to load: row i is ``i``."""

    def __len__(self) -> int:
        return ROWS

    def __getitem__(self, i: int) -> int:
        return i


def per_sample_us(part, samples: int, reps: int) -> float:
    """Median µs per call of ``part(i)`` over ``reps`` runs of ``samples`` calls."""
    runs = []
    for _ in range(reps):
        start = time.perf_counter()
        for i in range(samples):
            part(i)
        runs.append((time.perf_counter() - start) / samples * 1e6)
    return statistics.median(runs)


def all_three(i: int) -> None:
    s = sample_seed(1234, 7, i)
    torch.default_generator.manual_seed(s)
    random.seed(s)
    np.random.seed(s % 2**32)


def skip_seconds(num_workers: int) -> float:
    """Seconds from ``epoch(0, skip=90%)`` to the first remaining batch."""
    loader = DataLoader(Rows(), batch_size=BATCH, shuffle=True, num_workers=num_workers)
    pl = PositionedLoader.of(loader, seed=1)
    skip = len(pl) * 9 // 10
    start = time.perf_counter()
    pairs = pl.epoch(0, skip=skip)
    next(pairs)
    seconds = time.perf_counter() - start
    pairs.close()
    return seconds


def plain_seconds() -> float:
    """Seconds for the plain loop to reach the same batch (every skipped batch loaded)."""
    loader = DataLoader(Rows(), batch_size=BATCH, shuffle=True)
    skip = len(loader) * 9 // 10
    start = time.perf_counter()
    for i, _ in enumerate(loader):
        if i == skip:
            break
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    samples, reps = (2_000, 3) if args.quick else (20_000, 5)
    parts = {
        "hash (seed, epoch, index)": lambda i: sample_seed(1234, 7, i),
        "torch CPU generator seed": lambda i: torch.default_generator.manual_seed(i),
        "random.seed": lambda i: random.seed(i),
        "numpy.random.seed": lambda i: np.random.seed(i),
        "all (what a sample pays)": all_three,
    }
    print(f"per-sample seeding in a worker, µs per sample (median of {reps} × {samples:,} samples)")
    for name, part in parts.items():
        print(f"  {name:28} {per_sample_us(part, samples, reps):8.2f}")
    print(f"  {'(torch.manual_seed, unused)':28} {per_sample_us(torch.manual_seed, samples // 10, reps):8.2f}")
    print(f"skipping 90% of a {ROWS:,}-row RandomSampler epoch, batch_size {BATCH} (seconds to the first batch)")
    for workers in (0, 2):
        print(f"  positioned, num_workers={workers}    {statistics.median(skip_seconds(workers) for _ in range(reps)):8.3f}")
    if not args.quick:
        print(f"  plain loop, loading them      {plain_seconds():8.3f}")


if __name__ == "__main__":
    main()
