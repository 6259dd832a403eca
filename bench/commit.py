"""Cost of one epoch commit against the atomic durable save of the same bytes (issue 18, decision 2).

    .venv/bin/python bench/commit.py [--reps N] [--dir DIR] [--sizes none,10,100] [--quick]

One "commit" is what the training session's commit does at the end of a LAST-only epoch:
``nnx_core.commit.commit_epoch`` through ``FileStorage`` (removal of the blob no tag names any
more, the payload — weights + RNG streams — streamed by torch.save into a content-addressed blob
while it is hashed, idps.csv appended, LAST). "atomic" is the honest minimum of a crash-safe save of the
same payload (``_common.atomic_durable_save``: ``torch.save`` into a temporary, fsync, rename,
folder fsync). Every repetition saves different weights (so the blob is really written), the two
arms alternate order, and the medians are compared. Targets: ≤ 1.2 × at 10 MB and 100 MB, ≤ 2.5 ×
without weights. Also printed, counted by instrumenting ``os`` (``nnx_adapters.testing.oscalls``):
the fsync calls and the dependent fsync rounds of one commit and of one atomic save, and the
file-system operations of one commit for each kind of epoch — LAST only, LAST + BEST, LAST + a
phase tag, LAST + a phase tag + BEST. Prints tables; exits 0.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C

from nnx_core.commit import BEST, Q1, EpochCommit, RunFiles, commit_epoch
from nnx_core.eager_history import EagerHistory
from nnx_core.records import EvaluationDataPoint, IterationDataPoint
from nnx_adapters.pytorch import state as torch_state
from nnx_adapters.storage.fs import FileStorage
from nnx_adapters.testing.oscalls import OsTrace

RUN_ID = "b" * 32


def model(megabytes: int) -> dict[str, torch.Tensor]:
    """A state dict of ``megabytes`` MB of float32 weights in 1024-wide layers (none: empty)."""
    if megabytes == 0:
        return {}
    rows = megabytes * 1024 * 1024 // 4 // 1024
    layers = max(1, megabytes // 5)
    return {f"layer{i}.weight": torch.randn(rows // layers, 1024) for i in range(layers)}


def history_rows(epoch: int, per_epoch: int = 20) -> list[IterationDataPoint]:
    return [
        IterationDataPoint(
            iter_idx=epoch * per_epoch + i, epoch_idx=epoch, batch_idx=i, lr=1e-3,
            train_edp=EvaluationDataPoint(loss=1.0 / (1 + i), count=64),
        )
        for i in range(per_epoch)
    ]


class Arms:
    def __init__(self, folder: str, weights: dict[str, torch.Tensor]) -> None:
        self.weights = weights
        self.storage = FileStorage(os.path.join(folder, "runs"))
        self.files = RunFiles(self.storage, RUN_ID)
        self.raw_path = os.path.join(folder, "raw.pt")
        self.history = EagerHistory()
        self.previous: bytes | None = None
        self.epoch = 0
        self.rng = torch_state.capture_rng()
        self.blob_bytes = 0

    def payload(self) -> dict:
        for tensor in self.weights.values():  # new weights every epoch: the blob is really new
            tensor.view(-1)[0] += 1.0
        return {"kind": "nnmodel", "epoch": self.epoch, "weights": self.weights, "rng": self.rng}

    def commit(self, tags: tuple[str, ...] = ()) -> float:
        self.history.extend(history_rows(self.epoch))  # the session's decision adds the rows, before its commit
        start = time.perf_counter()
        payload = torch_state.encoder(self.payload())
        history = self.history.render()
        last = commit_epoch(
            self.files,
            EpochCommit(epoch=self.epoch, payload=payload, history=history, previous_history=self.previous,
                        append_history=self.previous is not None, tags=tags),  # as the session after its own commit
        )
        elapsed = time.perf_counter() - start
        self.blob_bytes = last.blobs["state"].size
        self.previous = history
        self.epoch += 1
        return elapsed

    def raw(self) -> float:
        start = time.perf_counter()
        C.atomic_durable_save({"nnx_payload_format": 1, **self.payload()}, self.raw_path)
        return time.perf_counter() - start


KINDS = ("create", "write", "fsync", "fsync_dir", "rename", "link", "unlink")


def traced(fn: Callable[[], object]) -> OsTrace:
    """The file-system changes and syncs ``fn`` makes through ``os``."""
    with OsTrace() as trace:
        fn()
    return trace


def kinds_table(folder: str) -> None:
    """The ``os`` calls that change or sync the disk in one commit of each kind of epoch (no
    weights: only ``write`` grows with the payload). Every row is a steady epoch: the blob the
    previous commit's LAST moved off is collected in it, as in every epoch of a long run."""
    arms = Arms(folder, model(0))
    print("\n| epoch kind | " + " | ".join(KINDS) + " | **total** | target | dependent fsync rounds |")
    print("|---|" + "---:|" * (len(KINDS) + 3))
    for tags, target in (((), 15), ((BEST,), 20), ((Q1,), 20), ((Q1, BEST), 20)):
        arms.commit((BEST,)), arms.commit(), arms.commit()  # BEST keeps one blob; LAST's previous blob is dead
        trace = traced(lambda: arms.commit(tags))  # noqa: B023 — called at once
        counts = trace.counts()
        cells = " | ".join(str(counts.get(k, 0)) for k in KINDS)
        print(f"| {' + '.join(('LAST', *(t.upper() for t in tags)))} | {cells} | **{trace.total()}** | ≤ {target} "
              f"| {trace.durable_steps()} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=0, help="repetitions per arm (default: by size)")
    parser.add_argument("--dir", default=None, help="folder on the file system to measure (default: a temp folder)")
    parser.add_argument("--sizes", default="none,10,100", help="model sizes in MB ('none': no weights)")
    parser.add_argument("--quick", action="store_true", help="no weights, 3 repetitions: a smoke run")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.reps = "none", 3
    torch.set_num_threads(1)
    torch.manual_seed(0)
    print(f"machine: {C.machine()}; load average {os.getloadavg()[0]:.1f}; fsync latency {C.fsync_latency(args.dir)}")
    print("\nLAST-only epoch commit vs the atomic durable save of the same payload (medians)\n")
    print("| model | blob | reps | commit ms | atomic save ms | **ratio** | target | fsync calls commit / atomic "
          "| dependent fsync rounds commit / atomic |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for size in args.sizes.split(","):
        megabytes = 0 if size == "none" else int(size)
        reps = args.reps or (31 if megabytes == 0 else 15 if megabytes <= 10 else 7)
        folder = tempfile.mkdtemp(prefix="nnx-bench-commit-", dir=args.dir)
        try:
            arms = Arms(folder, model(megabytes))
            arms.commit(), arms.commit(), arms.raw()  # warm-up: folders, page cache, a dead blob to collect
            commits, raws = [], []
            ours, atomic = traced(arms.commit), traced(arms.raw)
            for rep in range(reps):
                if rep % 2:
                    raws.append(arms.raw())
                    commits.append(arms.commit())
                else:
                    commits.append(arms.commit())
                    raws.append(arms.raw())
            commit_ms, raw_ms = statistics.median(commits) * 1e3, statistics.median(raws) * 1e3
            fsyncs = [t.counts()["fsync"] + t.counts()["fsync_dir"] for t in (ours, atomic)]
            label = "no weights" if megabytes == 0 else f"{megabytes} MB"
            target = "2.5" if megabytes == 0 else "1.2"
            print(f"| {label} | {arms.blob_bytes / 1e6:.2f} MB | {reps} | {commit_ms:.2f} | {raw_ms:.2f} "
                  f"| **{commit_ms / raw_ms:.2f}** | ≤ {target} | {fsyncs[0]} / {fsyncs[1]} "
                  f"| {ours.durable_steps()} / {atomic.durable_steps()} |")
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    folder = tempfile.mkdtemp(prefix="nnx-bench-commit-", dir=args.dir)
    try:
        kinds_table(folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(f"\nA dependent fsync round waits for the one before it (nnx_adapters.testing.oscalls); "
          f"load average {os.getloadavg()[0]:.1f} at the end.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
