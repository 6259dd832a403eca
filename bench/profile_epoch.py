"""Where an ``NNModel.train`` epoch spends its time: cProfile of the headline job (issue 7).

    .venv/bin/python bench/profile_epoch.py [--epochs 8] [--root DIR] [--top 25]

One untimed warm-up ``train()`` (imports, first-call costs), then ``--epochs`` epochs under
cProfile: MLP 32 → 64 → 2, batch 64, 64 batches per epoch, Adam, validation every epoch,
progress off, a fresh runs root (``--root``: its parent folder; ``/dev/shm`` takes fsync out).

Prints a per-epoch breakdown by activity (attributed from the profile's call graph), the
file-system operations of each epoch commit of an unprofiled run (``FileStorage.ops`` around
``TrainingSession.commit``: the protocol's writes plus attempt.json), then the top entries by
cumulative and by internal time. cProfile inflates Python-heavy code relative to
torch kernels; use it to see *where* the time goes, and ``bench/overhead.py`` for the ratio.
Always exits 0.
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

from nnx_api.training.session import TrainingSession


class FsyncClock:
    """Wall time spent in ``os.fsync``, inside epoch commits and in the whole call."""

    def __init__(self) -> None:
        self.in_commit = self.total = 0.0
        self._inside = False

    @contextlib.contextmanager
    def installed(self) -> Any:
        real_fsync, real_commit = os.fsync, TrainingSession.commit
        clock = self

        def fsync(fd: int) -> None:
            start = time.perf_counter()
            try:
                real_fsync(fd)
            finally:
                spent = time.perf_counter() - start
                clock.total += spent
                clock.in_commit += spent if clock._inside else 0.0

        def commit(session: TrainingSession, epoch: int) -> None:
            clock._inside = True
            try:
                real_commit(session, epoch)
            finally:
                clock._inside = False

        os.fsync, TrainingSession.commit = fsync, commit  # type: ignore[assignment,method-assign]
        try:
            yield self
        finally:
            os.fsync, TrainingSession.commit = real_fsync, real_commit  # type: ignore[method-assign]


def train(job: C.Job, epochs: int, parent: str | None, profile: cProfile.Profile | None) -> None:
    model, params = job.nnx_job(epochs)
    with tempfile.TemporaryDirectory(dir=parent) as root:
        if profile is not None:
            profile.enable()
        model.train(params, root=root)
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
    tr = "nnx_api/training.py"
    step = [(tr, "_default_update")]
    train_epoch = graph.cum(tr, "train_epoch")
    loader = graph.cum_from("dataloader.py", "__next__", [(tr, "lookahead")])
    forward = graph.cum_from("module.py", "_wrapped_call_impl", step)
    backward = graph.cum_from("_tensor.py", "backward", step)
    loss = graph.cum("torch_tasks.py", "loss_terms")
    correct = graph.cum("torch_tasks.py", "correct")
    update = graph.cum("nnx_core/window.py", "commit_update")
    opt_step = graph.cum("torch_optim.py", "step")
    opt_zero = graph.cum("torch_optim.py", "zero_grad")
    evaluate = graph.cum("nnx_api/model.py", "evaluate")
    val_loader = graph.cum_from("dataloader.py", "__next__", [("nnx_api/model.py", "evaluate")])
    val_forward = graph.cum_from("module.py", "_wrapped_call_impl", [("nnx_api/model.py", "evaluate")])
    validate = graph.cum(tr, "validate")
    decide = graph.cum(tr, "decide")
    commit = graph.cum(tr, "commit")
    fsync = fsyncs.in_commit
    # the payload is encoded by ``torch_state.encode`` (older) or streamed by ``encoder``'s ``produce``
    encode = graph.cum("torch_state.py", "encode") + graph.cum("torch_state.py", "produce")
    render = graph.cum("nnx_core/history.py", "render")
    total = graph.cum("nnx_api/model.py", "train")
    in_epochs = train_epoch + validate + decide + graph.cum(tr, "tick_epoch_clocks") + commit
    rows = [
        ("train: DataLoader (both arms pay it)", loader),
        ("train: forward (torch)", forward),
        ("train: loss numerator (torch)", loss),
        ("train: backward (torch)", backward),
        ("train: optimizer step + zero_grad (torch)", opt_step + opt_zero),
        ("train: batch accuracy (argmax, ==, sum)", correct),
        ("train: window close, finite check, update accounting", update - opt_step - opt_zero),
        ("train: rest of the per-batch path (NNx Python)", train_epoch - loader - forward - loss - backward - update - correct),
        ("validation: DataLoader", val_loader),
        ("validation: forward (torch)", val_forward),
        ("validation: loss, confusion counts, scores (NNx)", evaluate - val_loader - val_forward),
        ("records: per-batch + epoch records", validate - evaluate),
        ("decision + history rows", decide),
        ("commit: fsync waits (epoch commits only)", fsync),
        ("commit: payload encode (torch.save of weights, optimizer, RNG)", encode),
        ("commit: idps.csv render", render),
        ("commit: other (hashing, writes, JSON, collection)", commit - fsync - encode - render),
        ("per-call fixed cost, spread over the epochs", total - in_epochs),
        ("  of which fsync waits (admission, attempt records, final LAST)", fsyncs.total - fsyncs.in_commit),
    ]
    return [(name, seconds / epochs) for name, seconds in rows] + [("total per epoch", total / epochs)]


def commit_ops(job: C.Job, epochs: int, parent: str | None) -> list[tuple[int, str, collections.Counter[str]]]:
    """``(epoch, tags written, FileStorage.ops delta)`` of every epoch commit of one run."""
    log: list[tuple[int, str, collections.Counter[str]]] = []
    original = TrainingSession.commit

    def counted(self: TrainingSession, epoch: int) -> None:
        storage = self.files.storage
        before = collections.Counter(storage.ops)
        tags_before = set(self.files.tags())
        original(self, epoch)
        delta = collections.Counter(storage.ops)
        delta.subtract(before)
        written = ["last"] + sorted(set(self.files.tags()) - tags_before - {"last"})
        if self.decision is not None and self.decision.improved and "best" not in written:
            written.append("best")
        log.append((epoch, "+".join(written), +delta))

    TrainingSession.commit = counted  # type: ignore[method-assign]
    try:
        train(job, epochs, parent, None)
    finally:
        TrainingSession.commit = original  # type: ignore[method-assign]
    return log


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--root", default=None, help="parent folder of the runs root (default: the temp folder)")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args(argv)
    job = C.Job(batch=64)
    train(job, 2, args.root, None)  # warm-up
    profile = cProfile.Profile()
    with FsyncClock().installed() as fsyncs:
        train(job, args.epochs, args.root, profile)
    stats = pstats.Stats(profile)
    print(f"machine: {C.machine()}; runs root under {args.root or tempfile.gettempdir()}; {args.epochs} epochs profiled\n")
    print("| where (per epoch, under cProfile) | ms | share |")
    print("|---|---:|---:|")
    rows = breakdown(Graph(stats), args.epochs, fsyncs)
    total = rows[-1][1]
    for name, seconds in rows:
        print(f"| {name} | {seconds * 1e3:.2f} | {seconds / total:.1%} |")
    print(f"\nfsync: {fsyncs.total / args.epochs * 1e3:.2f} ms per epoch in all, wall time (the profiler does not slow it)")
    print("\nFile-system operations of each epoch commit (FileStorage.ops; target <= 15):\n")
    print("| epoch | tags written | create | write | fsync | rename | unlink | mkdir | total |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for epoch, tags, ops in commit_ops(job, args.epochs, args.root):
        cells = " | ".join(str(ops.get(k, 0)) for k in ("create", "write", "fsync", "rename", "unlink", "mkdir"))
        print(f"| {epoch} | {tags} | {cells} | {sum(ops.values())} |")
    for order in ("cumulative", "tottime"):
        buffer = io.StringIO()
        pstats.Stats(profile, stream=buffer).strip_dirs().sort_stats(order).print_stats(args.top)
        text = buffer.getvalue()
        print(f"\n== top {args.top} by {order}\n" + text[text.find("   ncalls") :].rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
