"""Where an ``NNModel.train`` epoch spends its time: cProfile of the headline job (issue 7).

    .venv/bin/python bench/profile_epoch.py [--epochs 8] [--root DIR] [--top 25] [--hidden 512,512]

One untimed warm-up ``train()`` (imports, first-call costs), then ``--epochs`` epochs under
cProfile: MLP 32 → 64 → 2, batch 64, 64 batches per epoch, Adam, validation every epoch,
progress off, a fresh runs root (``--root``: its parent folder; ``/dev/shm`` takes fsync out).

Prints a per-epoch breakdown by activity (attributed from the profile's call graph), the
file-system operations of each epoch commit of an unprofiled run (the ``os`` calls that change
or sync the disk, counted by ``nnx_adapters.testing.oscalls.OsTrace`` as ``bench/commit.py``
counts them, installed by a callback between ``on_epoch_end`` — the commit follows it — and the
next ``on_epoch_begin`` / ``on_train_end``), then the top entries by cumulative and by internal time.
cProfile inflates Python-heavy code relative to torch kernels; use it to see *where* the time
goes, and ``bench/overhead.py`` for the ratio. Always exits 0.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import cProfile
import io
import os
import pstats
import sys
import tempfile
import time
from collections.abc import Iterable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C

C.setup_threads()

from nnx_adapters.storage.fs import FileStorage  # noqa: E402
from nnx_adapters.testing.oscalls import OsTrace  # noqa: E402
import nnx_api as nnx  # noqa: E402

SESSION = "nnx_api/training/session.py"
OWNERS = "nnx_api/training/builtin_step.py"
STEPS = "nnx_api/training/steps.py"
BATCHES = "nnx_adapters/pytorch/batches.py"
TASKS = "nnx_adapters/pytorch/tasks.py"
POSITIONED = "nnx_adapters/pytorch/positioned.py"  # the loader NNx positions (the default for a DataLoader)
OPTIM = "nnx_adapters/pytorch/optim.py"
KINDS = ("create", "write", "fsync", "fsync_dir", "rename", "unlink", "mkdir")


class CommitWindow(nnx.Callback):
    """Marks the epoch commits (each follows ``on_epoch_end`` and precedes the next epoch's
    ``on_epoch_begin`` or ``on_train_end``): ``inside`` while one runs, and the ``os`` calls that
    change or sync the disk in each (with the tags it wrote)."""

    def __init__(self, *, count_ops: bool = False) -> None:
        self.count_ops = count_ops
        self.storage: FileStorage | None = None  # the run's store (set by ``train``)
        self.inside = False
        self.log: list[tuple[int, str, collections.Counter[str]]] = []
        self._trace: OsTrace | None = None
        self._tags: set[str] = set()
        self._epoch = -1
        self._improved = False

    def on_epoch_end(self, ctx: Any) -> None:
        self.inside, self._epoch = True, ctx.epoch
        self._improved = ctx.decision is not None and ctx.decision.improved
        if self.count_ops and self.storage is not None:
            self._tags = set(self.storage.list(f"{ctx.run.id}/checkpoints"))
            self._trace = OsTrace().__enter__()

    def _closed(self, ctx: Any) -> None:
        if not self.inside:
            return
        self.inside = False
        if self._trace is None or self.storage is None:
            return
        self._trace.__exit__(None, None, None)
        delta, self._trace = self._trace.counts(), None
        new = {n[:-5] for n in set(self.storage.list(f"{ctx.run.id}/checkpoints")) - self._tags if n.endswith(".json")}
        written = ["last"] + sorted(new - {"last"})
        if self._improved and "best" not in written:
            written.append("best")
        self.log.append((self._epoch, "+".join(written), delta))

    def on_epoch_begin(self, ctx: Any) -> None:
        self._closed(ctx)

    def on_train_end(self, ctx: Any) -> None:
        self._closed(ctx)


class FsyncClock:
    """Wall time spent in ``os.fsync``, inside epoch commits (``window.inside``) and in the whole call."""

    def __init__(self, window: CommitWindow) -> None:
        self.window = window
        self.in_commit = self.total = 0.0

    @contextlib.contextmanager
    def installed(self) -> Any:
        real_fsync = os.fsync
        clock = self

        def fsync(fd: int) -> None:
            start = time.perf_counter()
            try:
                real_fsync(fd)
            finally:
                spent = time.perf_counter() - start
                clock.total += spent
                clock.in_commit += spent if clock.window.inside else 0.0

        os.fsync = fsync  # type: ignore[assignment]
        try:
            yield self
        finally:
            os.fsync = real_fsync


def train(
    job: C.Job, epochs: int, parent: str | None, profile: cProfile.Profile | None, window: CommitWindow | None = None
) -> None:
    model, params = job.nnx_job(epochs)
    with tempfile.TemporaryDirectory(dir=parent) as root:
        storage = FileStorage(root)
        if window is not None:
            window.storage = storage
        if profile is not None:
            profile.enable()
        model.train(params, callbacks=[window] if window is not None else [], storage=storage)
        if profile is not None:
            profile.disable()


class Graph:
    """Look-ups in a ``pstats`` call graph by file suffix and function name."""

    def __init__(self, stats: pstats.Stats) -> None:
        self.raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]

    def keys(self, file: str, func: str) -> list[Any]:
        return [k for k in self.raw if k[0].endswith(file) and k[2] == func]

    def cum(self, file: str, func: str) -> float:
        return sum(self.raw[k][3] for k in self.keys(file, func))

    def own(self, file: str, func: str) -> float:
        return sum(self.raw[k][2] for k in self.keys(file, func))

    def cum_from(self, file: str, func: str, callers: Iterable[tuple[str, str]]) -> float:
        """Cumulative time of ``func`` when called directly by one of ``callers``."""
        total = 0.0
        for key in self.keys(file, func):
            for caller, edge in self.raw[key][4].items():
                if any(caller[0].endswith(f) and caller[2] == n for f, n in callers):
                    total += edge[3]
        return total


def breakdown(graph: Graph, epochs: int, fsyncs: FsyncClock) -> list[tuple[str, float]]:
    step = [(OWNERS, "update")]
    scoring = [(STEPS, "score")]
    train_epoch = graph.cum(SESSION, "train_epoch")
    loader = graph.cum_from("dataloader.py", "__next__", [(BATCHES, "lookahead"), (POSITIONED, "_pairs")])
    forward = graph.cum_from(BATCHES, "net_output", step)
    backward = graph.cum_from("_tensor.py", "backward", step)
    loss = graph.cum_from(TASKS, "sum_terms", step)
    correct = graph.cum("nnx_api/training/epoch.py", "add_output")
    update = graph.cum("nnx_core/update.py", "commit_window")
    opt_step = graph.cum(OPTIM, "step")
    opt_zero = graph.cum(OPTIM, "zero_grad")
    evaluate = graph.cum(STEPS, "score")
    val_loader = graph.cum_from("dataloader.py", "__next__", scoring)
    val_forward = graph.cum_from(BATCHES, "net_output", scoring)
    validate = graph.cum(SESSION, "validate")
    decide = graph.cum(SESSION, "decide")
    commit = graph.cum(SESSION, "commit")
    fsync = fsyncs.in_commit
    encode = graph.cum("pytorch/state.py", "encode") + graph.cum("pytorch/state.py", "produce")
    render = graph.cum_from("nnx_core/eager_history.py", "render", [(SESSION, "_write_epoch")])
    total = graph.cum("nnx_api/model.py", "train")
    in_epochs = train_epoch + validate + decide + graph.cum(SESSION, "tick_epoch_clocks") + commit
    rows = [
        ("train: DataLoader (both arms pay it)", loader),
        ("train: forward (torch)", forward),
        ("train: loss numerator (torch)", loss),
        ("train: backward (torch)", backward),
        ("train: optimizer step + zero_grad (torch)", opt_step + opt_zero),
        ("train: batch statistics kept (argmax; correct count for other tasks)", correct),
        ("train: window close, finite check, update accounting", update - opt_step - opt_zero),
        ("train: rest of the per-batch path (NNx Python)", train_epoch - loader - forward - loss - backward - update - correct),
        ("validation: DataLoader", val_loader),
        ("validation: forward (torch)", val_forward),
        ("validation: loss, confusion counts, scores (NNx)", evaluate - val_loader - val_forward),
        ("records: per-batch + epoch records, summaries", validate - evaluate),
        ("decision + history rows", decide),
        ("commit: fsync waits (epoch commits only)", fsync),
        ("commit: payload encode (torch.save; on the commit thread, unprofiled, with async_commits)", encode),
        ("commit: idps.csv render", render),
        ("commit: other (hashing, writes, JSON, collection)", commit - fsync - encode - render),
        ("per-call fixed cost, spread over the epochs", total - in_epochs),
        ("  of which fsync waits (admission, attempt records, final LAST)", fsyncs.total - fsyncs.in_commit),
    ]
    return [(name, seconds / epochs) for name, seconds in rows] + [("total per epoch", total / epochs)]


def commit_ops(job: C.Job, epochs: int, parent: str | None) -> list[tuple[int, str, collections.Counter[str]]]:
    """``(epoch, tags written, os calls by kind)`` of every epoch commit of one run."""
    window = CommitWindow(count_ops=True)
    train(job, epochs, parent, None, window)
    return window.log


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--root", default=None, help="parent folder of the runs root (default: the temp folder)")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--hidden", default="64", help="hidden widths, e.g. 512,512 for the 280k-parameter row")
    args = parser.parse_args(argv)
    job = C.Job(batch=64, hidden=tuple(int(w) for w in args.hidden.split(",")))
    train(job, 2, args.root, None)  # warm-up
    profile = cProfile.Profile()
    window = CommitWindow()
    with FsyncClock(window).installed() as fsyncs:
        train(job, args.epochs, args.root, profile, window)
    stats = pstats.Stats(profile)
    print(
        f"machine: {C.machine()}; load average {os.getloadavg()[0]:.1f}; runs root under "
        f"{args.root or tempfile.gettempdir()}; {args.epochs} epochs profiled\n"
    )
    print("| where (per epoch, under cProfile) | ms | share |")
    print("|---|---:|---:|")
    rows = breakdown(Graph(stats), args.epochs, fsyncs)
    total = rows[-1][1]
    for name, seconds in rows:
        print(f"| {name} | {seconds * 1e3:.2f} | {seconds / total:.1%} |")
    print(f"\nfsync: {fsyncs.total / args.epochs * 1e3:.2f} ms per epoch in all, wall time (the profiler does not slow it)")
    print("\nFile-system operations of each epoch commit (os calls; target <= 15 LAST-only, <= 20 with BEST or a phase tag):\n")
    print("| epoch | tags written | " + " | ".join(KINDS) + " | total |")
    print("|---:|---|" + "---:|" * (len(KINDS) + 1))
    for epoch, tags, ops in commit_ops(job, args.epochs, args.root):
        cells = " | ".join(str(ops.get(k, 0)) for k in KINDS)
        print(f"| {epoch} | {tags} | {cells} | {sum(ops.values())} |")
    for order in ("cumulative", "tottime"):
        buffer = io.StringIO()
        pstats.Stats(profile, stream=buffer).strip_dirs().sort_stats(order).print_stats(args.top)
        text = buffer.getvalue()
        print(f"\n== top {args.top} by {order}\n" + text[text.find("   ncalls") :].rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
