"""Per-epoch commit cost as a run ages: history journal vs eager ``idps.csv``.

    .venv/bin/python bench/journal.py [--reps N] [--records R] [--late E] [--dir DIR]

Four runs on the real file system (``FileStorage``, fsync on), two per history format: one at
epoch 10 and one at epoch ``--late`` (default 2,000), each with ``--records`` (default 20) history
records per epoch. The late runs are prepared directly at their age (their earlier epochs are
written without fsync: only the measured commits matter). Then every repetition commits one more
epoch in each of the four runs, in a rotating order, through ``nnx_core.commit.commit_epoch``
(a 4 KB payload blob, the history step — the eager one renders the whole CSV and appends the new
rows, as a session does after its own commit — LAST, BEST, blob collection). Reported per run: the median
commit time, the median time of the history step alone, and the bytes the commit wrote; the
ratios are medians of the per-repetition ratios (late / early, committed back to back). Target:
journal commit at the late epoch / at epoch 10 ≤ 1.1; the eager format's growth is printed beside
it. The prepared runs are frozen out of the cyclic garbage collector (``gc.freeze``): in one
process, a collection walking the eager runs' records would be charged to whichever commit it
lands in. Prints a table; exits 0 (``--check``: exit 1 when the journal misses its target).
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any

from nnx_core.commit import BEST, EagerHistoryStep, EpochCommit, RunFiles, commit_epoch
from nnx_core.eager_history import EagerHistory
from nnx_core.journal import HistoryJournal, JournalWriter
from nnx_core.records import EvaluationDataPoint, IterationDataPoint, MonitorRecord
from nnx_adapters.storage.fs import FileStorage

RUN_ID = "3" * 32
TARGET = 1.1


def epoch_records(epoch: int, per_epoch: int) -> list[IterationDataPoint]:
    """One epoch's records, shaped like a real run's (validation and decision on the last)."""
    out = []
    for i in range(per_epoch):
        last = i == per_epoch - 1
        loss = 1.0 / (1 + epoch) + i * 1e-3
        out.append(
            IterationDataPoint(
                iter_idx=epoch * per_epoch + i, epoch_idx=epoch, batch_idx=i, lr=1e-3,
                train_edp=EvaluationDataPoint(loss=loss, error=0.25, accuracy=0.75, count=64),
                val_edp=EvaluationDataPoint(loss=loss, error=0.3, accuracy=0.7, f1=0.69, count=256) if last else None,
                selection=MonitorRecord(metric="error", split="val", mode="min", value=0.3, status="ok",
                                        improved=True, best=0.3) if last else None,
                update_count=epoch * per_epoch + i + 1 if last else None,
            )
        )
    return out


class CountingStorage(FileStorage):
    """FileStorage that counts the bytes it writes; ``fast`` skips fsync (preparation only)."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.bytes = 0

    def write(self, path: str, data: Any, **kw: Any) -> Any:
        if not callable(data):
            self.bytes += len(data)
        return super().write(path, data, **kw)

    def append(self, path: str, data: Any) -> None:
        self.bytes += len(data)
        super().append(path, data)


class Timed:
    """A history step that times its ``commit``."""

    def __init__(self, step: Any) -> None:
        self.step, self.seconds = step, 0.0

    def commit(self) -> None:
        start = time.perf_counter()
        self.step.commit()
        self.seconds = time.perf_counter() - start

    def rollback(self) -> None:
        self.step.rollback()


class Run:
    """One run of one history format, prepared at ``epoch`` (its epochs before are committed)."""

    def __init__(self, folder: str, journal: bool, epoch: int, per_epoch: int) -> None:
        self.journal, self.epoch, self.per_epoch = journal, epoch, per_epoch
        self.storage = CountingStorage(folder)
        self.files = RunFiles(self.storage, RUN_ID)
        self.storage.write(self.files.run_yaml, b"id: " + RUN_ID.encode() + b"\n")
        earlier = [r for e in range(epoch) for r in epoch_records(e, per_epoch)]
        with no_fsync():
            if journal:
                writer = JournalWriter(self.storage, RUN_ID, HistoryJournal(), last_epoch=None)
                writer.extend(earlier)
                writer.commit()
                self.writer = JournalWriter(self.storage, RUN_ID, HistoryJournal(), last_epoch=epoch - 1)
            else:
                self.history = EagerHistory(earlier)
                self.previous = self.history.render()
                self.storage.write(self.files.history, self.previous)
        self.times: list[float] = []
        self.steps: list[float] = []
        self.written: list[int] = []

    def commit(self) -> None:
        records = epoch_records(self.epoch, self.per_epoch)
        payload = os.urandom(4096)
        before = self.storage.bytes
        start = time.perf_counter()
        if self.journal:
            self.writer.extend(records)
            step = Timed(self.writer)
        else:
            self.history.extend(records)
            rendered = self.history.render()
            step = Timed(EagerHistoryStep(self.files, rendered, self.previous, append=True))  # as the session does
            self.previous = rendered
        commit_epoch(self.files, EpochCommit(epoch=self.epoch, payload=payload, history_step=step, tags=(BEST,)))
        self.times.append(time.perf_counter() - start)
        self.steps.append(step.seconds)
        self.written.append(self.storage.bytes - before)
        self.epoch += 1


def paired(late: list[float], early: list[float]) -> float:
    """Median over repetitions of late / early: both commits of a repetition ran back to back, so
    slow drifts of a shared machine cancel out."""
    return statistics.median(a / b for a, b in zip(late, early, strict=True))


class no_fsync:
    """Skip fsync while a run is prepared (its durability is not what is measured)."""

    def __enter__(self) -> None:
        self.fsync = os.fsync
        os.fsync = lambda fd: None

    def __exit__(self, *exc: Any) -> None:
        os.fsync = self.fsync


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=40, help="commits measured per run (default 40)")
    parser.add_argument("--records", type=int, default=20, help="history records per epoch (default 20)")
    parser.add_argument("--early", type=int, default=10, help="the young run's epoch (default 10)")
    parser.add_argument("--late", type=int, default=2000, help="the old run's epoch (default 2000)")
    parser.add_argument("--dir", default=None, help="folder on the file system to measure (default: a temp folder)")
    parser.add_argument("--check", action="store_true", help=f"exit 1 if the journal's ratio exceeds {TARGET}")
    args = parser.parse_args(argv)
    print(f"# commit cost vs run age — {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"{platform.system()} {platform.machine()}; {args.records} records/epoch, {args.reps} commits per run")
    folder = tempfile.mkdtemp(prefix="nnx-bench-journal-", dir=args.dir)
    try:
        runs = {
            (fmt, age): Run(os.path.join(folder, f"{fmt}-{age}"), fmt == "journal", age, args.records)
            for fmt in ("journal", "eager")
            for age in (args.early, args.late)
        }
        os.sync()  # the preparation's unsynced writes must not land in the measured fsyncs
        gc.collect()  # the four prepared histories share this process; frozen, the cyclic collector no
        gc.freeze()  # longer walks the eager runs' 40,000 records inside whichever commit triggers it
        order = list(runs.values())
        for _ in range(3):  # warm-up: folders, first blobs, page cache
            for run in order:
                run.commit()
        for run in order:
            run.times.clear(), run.steps.clear(), run.written.clear()
        for rep in range(args.reps):
            shift = rep % len(order)
            for run in order[shift:] + order[:shift]:
                run.commit()
        print(f"{'history':<8} {'epoch':>6} {'commit ms':>10} {'step ms':>8} {'bytes/commit':>13}")
        ratios = {}
        for fmt in ("journal", "eager"):
            for age in (args.early, args.late):
                run = runs[(fmt, age)]
                print(f"{fmt:<8} {age:>6} {statistics.median(run.times) * 1e3:>10.2f} "
                      f"{statistics.median(run.steps) * 1e3:>8.2f} {statistics.median(run.written):>13,.0f}")
            early, late = runs[(fmt, args.early)], runs[(fmt, args.late)]
            ratios[fmt] = (paired(late.times, early.times), paired(late.steps, early.steps),
                           paired(late.written, early.written))
        print()
        print(f"{'history':<8} {'commit ratio':>13} {'step ratio':>11} {'bytes ratio':>12}   (epoch {args.late} / epoch {args.early})")
        for fmt, (commit, step, written) in ratios.items():
            print(f"{fmt:<8} {commit:>13.2f} {step:>11.2f} {written:>12.2f}")
        verdict = "meets" if ratios["journal"][0] <= TARGET else "MISSES"
        print(f"journal commit ratio {ratios['journal'][0]:.2f} {verdict} the target ≤ {TARGET}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return 1 if args.check and ratios["journal"][0] > TARGET else 0


if __name__ == "__main__":
    sys.exit(main())
