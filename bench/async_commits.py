"""Asynchronous commits (``NNTrainParams.async_commits``): time blocked per commit and the loop's total.

    .venv/bin/python bench/async_commits.py                      # 50 MB, 500 MB, 2 GB states (7–15 min on the loaded 2-core VM)
    .venv/bin/python bench/async_commits.py --quick              # 5 MB and 20 MB states: a smoke run (about 20 s)
    .venv/bin/python bench/async_commits.py --device cuda        # the same arms on a GPU (exits 0 without CUDA)
    .venv/bin/python bench/async_commits.py --out bench/results/async-commits-DATE.md   # also write the tables there

A state of S MB is a model's float32 parameters plus Adam's two moments (parameters ≈ S/3): an MLP
of square Linear layers (W → W, ReLU; W = 512 up to 20 MB, 1024 up to 100 MB, 2048 up to 600 MB, 4096 above), its
Adam state made by one step. Each size runs in a fresh process of its own (``--one-process``:
all in this one, one after the other), its arms side by side; memory is freed between arms. In
one process the 2 GB loop moved by ±10 % with what the sizes before it had allocated and freed.

Blocked time per commit (table 1), for each state:

* ``staging``    ``Staging().snapshot(payload)`` on a warm Staging (its buffers already allocated):
                 what an asynchronous commit must copy; the floor NNx's blocked time is held to.
                 Timed twice per repetition: back to back (``isolated``) and right after a training
                 step (``after a step``), as at a commit point: the state just written by the
                 optimizer, the caches holding the step's data. The target is held to the second
* ``copy``       a plain ``dst.copy_(src)`` of every tensor into preallocated host tensors (pinned,
                 ``non_blocking`` + one synchronize on CUDA): the memcpy floor
* ``atomic``     ``_common.atomic_durable_save`` of the payload (torch.save, fsync, rename, folder
                 fsync): what a synchronous durable save blocks
* ``DCP``        ``torch.distributed.checkpoint.async_save`` into a ``FileSystemWriter`` (one
                 process, no process group; on CUDA ``cache_staged_state_dict=True``, its pinned
                 staging reused): blocked = until it returns its future; the future is waited for
                 before the next save, as DCP users do (``DCP total`` = both)
* ``NNx async`` / ``NNx sync``: inside a real ``NNModel.train`` (table 2's runs), the time in
                 ``TrainingSession.commit`` at each epoch end; ``gap`` = a callback's clock from the end of
                 ``on_epoch_end`` to the start of the next ``on_epoch_begin`` (the commit and the
                 lifecycle's bookkeeping). ``waits`` = commit points that found the previous commit
                 still in flight (``BackgroundCommits.waits``, read after each commit).

The loop (table 2): the same net, data and Adam, E epochs, a commit every epoch: a plain PyTorch
loop with no saves, ``NNModel.train`` with ``async_commits=True`` and with ``False``. The epoch's
batches are chosen so that one epoch of compute is ``--hide`` (1.5) × the atomic save measured just
before: the write has at least as much compute to hide behind. ``loop`` = from the start of epoch 1
(epoch 0 is a warm-up) to the end of the last epoch's commit point (the plain loop: its last
batch), so it holds E-1 epochs and E-1 commits; ``train()`` = the whole call, which also holds
the run's set-up, the wait for the last commit (nothing left to hide it behind) and the final LAST
refresh (``TrainingSession.finalize``: a comparison with the last snapshot when nothing changed
the model, else a synchronous rewrite of the payload): shown as ``tail``. Each arm runs 5 times
(3 at 2 GB; the synchronous one twice), the order rotating, and each ratio is the median of the
ratios paired by repetition: on the 2-vCPU VM the plain loop alone moves by 5-10 % from one run
to the next, more than the target's margin, so fewer repetitions cannot resolve it.

The allocator. glibc's malloc moves its mmap threshold as the process frees memory, so Adam's
large temporaries (``sqrt``, the division: 16 MB each at width 2048) are served from fresh pages
in some runs and from the heap in others: measured, 0 or 80,000 page faults per optimizer step,
and the same plain loop taking 3.0 s in one run and 4.7 s in the next. Every arm, the plain loop
included, therefore runs with the threshold pinned (``MALLOC_MMAP_THRESHOLD_=33554432``,
``MALLOC_TRIM_THRESHOLD_=4294967296``: the script starts itself again with them unless they are
set or ``--system-malloc`` is given), which takes that noise out of the ratios; it favours no arm.

Targets: NNx async blocked ≤ 1.2 × staging; loop ≤ 1.10 × the no-commit loop; NNx
async blocked < DCP blocked. One torch thread (``torch.set_num_threads(1)``): the commit's thread
has the other core. Timings are printed, never asserted; the script exits 0.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C

from nnx_core.background import BackgroundCommits
from nnx_adapters.pytorch.staging import Staging, tensors
import nnx_api as nnx
from nnx_api.training.session import TrainingSession

BATCH, CLASSES = 64, 2
SYNC_REPS = 2  # the synchronous loop, a comparison and no target, runs in the first repetitions only
PINNED_MALLOC = {"MALLOC_MMAP_THRESHOLD_": "33554432", "MALLOC_TRIM_THRESHOLD_": "4294967296"}


# ----------------------------------------------------------------------------------- the state
def shape(megabytes: float) -> tuple[int, int]:
    """(width, layers) of the MLP whose parameters + Adam's two moments are ``megabytes`` MB."""
    width = 512 if megabytes <= 20 else 1024 if megabytes <= 100 else 2048 if megabytes <= 600 else 4096
    params = megabytes * 1e6 / 3 / 4
    return width, max(1, round(params / (width * width + width)))


def make_net(width: int, layers: int, seed: int = 0) -> nn.Sequential:
    torch.manual_seed(seed)
    mods: list[nn.Module] = []
    for _ in range(layers):
        mods += [nn.Linear(width, width), nn.ReLU()]
    mods.append(nn.Linear(width, CLASSES))
    return nn.Sequential(*mods)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def free() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def step(net: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> None:
    opt.zero_grad(set_to_none=True)
    nn.functional.cross_entropy(net(x), y).backward()
    opt.step()


def median_ms(xs: list[float]) -> float:
    return statistics.median(xs) * 1e3 if xs else math.nan


# ------------------------------------------------------------------------- table 1: micro arms
def micro(net: nn.Module, opt: torch.optim.Optimizer, device: torch.device, folder: str, reps: int, width: int) -> dict[str, Any]:
    """staging (isolated and right after a training step), copy, atomic, DCP: seconds per
    repetition (and the payload's bytes)."""
    payload = {"model": net.state_dict(), "optimizer": opt.state_dict()}
    out: dict[str, Any] = {"bytes": sum(t.untyped_storage().nbytes() for t in tensors(payload))}
    warm = reps >= 3  # the 2 GB row does not spend a write on a warm-up

    staging = Staging()
    staging.snapshot(payload)  # allocates its buffers: the timed snapshots reuse them, as commits do
    x, y = torch.randn(BATCH, width, device=device), torch.randint(0, CLASSES, (BATCH,), device=device)
    out["staging"], out["staging_step"] = [], []
    for _ in range(reps):
        start = time.perf_counter()
        staging.snapshot(payload)
        out["staging"].append(time.perf_counter() - start)
        step(net, opt, x, y)  # as at a commit point: the state just written by Adam, the caches full of the step's
        sync(device)
        start = time.perf_counter()
        staging.snapshot(payload)
        out["staging_step"].append(time.perf_counter() - start)
    del staging
    free()

    pin = device.type == "cuda"
    sources = tensors(payload)
    dst = [torch.empty(t.shape, dtype=t.dtype, device="cpu", pin_memory=pin) for t in sources]
    out["copy"] = []
    for rep in range(reps + 1):
        start = time.perf_counter()
        for d, s in zip(dst, sources, strict=True):
            d.copy_(s, non_blocking=pin)
        sync(device)
        if rep:  # the first fills fresh pages
            out["copy"].append(time.perf_counter() - start)
    del dst
    free()

    path = os.path.join(folder, "atomic.pt")
    out["atomic"] = []
    for rep in range(reps + warm):
        start = time.perf_counter()
        C.atomic_durable_save(payload, path)
        if rep or not warm:
            out["atomic"].append(time.perf_counter() - start)
    os.remove(path)

    out["dcp"], out["dcp_total"] = dcp_arm(payload, device, folder, reps + warm, skip=int(warm))
    return out


def dcp_arm(payload: dict[str, Any], device: torch.device, folder: str, saves: int, skip: int) -> tuple[list[float], list[float]]:
    """DCP async_save, one process: (blocked, blocked + the wait for its future) per save."""
    import torch.distributed.checkpoint as dcp

    state = dict(payload)  # the same weights and Adam state
    writer = dcp.FileSystemWriter(os.path.join(folder, "dcp-0"), cache_staged_state_dict=device.type == "cuda")
    blocked, total = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "torch.distributed is ... uninitialized, assuming ... a single process"
        for i in range(saves):
            target = os.path.join(folder, f"dcp-{i}")
            start = time.perf_counter()
            future = dcp.async_save(state, storage_writer=writer, checkpoint_id=target)
            returned = time.perf_counter()
            future.result()
            done = time.perf_counter()
            if i >= skip:
                blocked.append(returned - start)
                total.append(done - start)
            if i:
                shutil.rmtree(os.path.join(folder, f"dcp-{i - 1}"), ignore_errors=True)
    shutil.rmtree(os.path.join(folder, f"dcp-{saves - 1}"), ignore_errors=True)
    del writer, state
    free()
    return blocked, total


def batch_seconds(net: nn.Module, opt: torch.optim.Optimizer, width: int, device: torch.device) -> float:
    """One training batch (forward, backward, Adam step), warm."""
    x, y = torch.randn(BATCH, width, device=device), torch.randint(0, CLASSES, (BATCH,), device=device)
    times = []
    for i in range(4):
        sync(device)
        start = time.perf_counter()
        step(net, opt, x, y)
        sync(device)
        if i >= 2:
            times.append(time.perf_counter() - start)
    return min(times)


# --------------------------------------------------------------------------- table 2: the loop
def loader(width: int, batches: int) -> DataLoader:
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(batches * BATCH, width, generator=gen)
    y = torch.randint(0, CLASSES, (batches * BATCH,), generator=gen)
    return DataLoader(TensorDataset(x, y), batch_size=BATCH, shuffle=True, generator=torch.Generator().manual_seed(2))


def plain_arm(width: int, layers: int, batches: int, epochs: int, device: torch.device) -> dict[str, Any]:
    """The plain PyTorch loop, no saves: epoch start stamps and the end."""
    train = loader(width, batches)
    start = time.perf_counter()
    net = make_net(width, layers).to(device)
    opt = torch.optim.Adam(net.parameters(), lr=1e-4)
    begins = []
    for _ in range(epochs):
        sync(device)
        begins.append(time.perf_counter())
        net.train()
        for x, y in train:
            step(net, opt, x.to(device, non_blocking=True), y.to(device, non_blocking=True))
            # the loss read to the host, as NNx's records do
        sync(device)
    end = time.perf_counter()
    del net, opt
    free()
    return {"loop": end - begins[1] if epochs > 1 else end - begins[0], "total": end - start}


class Clock(nnx.Callback):
    """Stamps the start of each ``on_epoch_begin`` and the end of each ``on_epoch_end``."""

    def __init__(self, device: torch.device) -> None:
        self.device, self.begins, self.ends = device, [], []

    def on_epoch_begin(self, ctx: Any) -> None:
        self.begins.append(time.perf_counter())

    def on_epoch_end(self, ctx: Any) -> None:
        sync(self.device)
        self.ends.append(time.perf_counter())


class Probe:
    """Times, inside ``train()``, each epoch commit (``TrainingSession.commit``), its parts (the
    wait for the commit in flight, the staging snapshot) and the end of the call
    (``TrainingSession.finalize``: the wait for the last commit, the final LAST refresh)."""

    def __init__(self) -> None:
        self.commits: list[tuple[float, float]] = []  # (start, end)
        self.waits: list[float] = []  # per commit: its BackgroundCommits.wait calls
        self.snapshots: list[float] = []  # per commit: its Staging.snapshot
        self.in_flight_waits = 0  # BackgroundCommits.waits after the last commit
        self.submitted = 0
        self.finalize = self.drain = 0.0
        self._where: str | None = None

    @contextlib.contextmanager
    def installed(self) -> Iterator[Probe]:
        probe = self
        commit, finalize = TrainingSession.commit, TrainingSession.finalize
        wait, snapshot = BackgroundCommits.wait, Staging.snapshot

        def timed_commit(session: Any, epoch: int) -> None:
            probe._where, start = "commit", time.perf_counter()
            probe.waits.append(0.0)  # this commit's: the writer waits, then submit waits again (a no-op)
            probe.snapshots.append(0.0)
            try:
                commit(session, epoch)
            finally:
                probe.commits.append((start, time.perf_counter()))
                probe._where = None
            background = getattr(session.writer, "background", None)
            if background is not None:  # counts only: holding the session would keep its staging alive
                probe.in_flight_waits, probe.submitted = background.waits, background.submitted

        def timed_finalize(session: Any) -> None:
            probe._where, start = "finalize", time.perf_counter()
            try:
                finalize(session)
            finally:
                probe.finalize, probe._where = time.perf_counter() - start, None

        def timed_wait(background: Any) -> None:
            start = time.perf_counter()
            try:
                wait(background)
            finally:
                if probe._where == "commit":
                    probe.waits[-1] += time.perf_counter() - start
                elif probe._where == "finalize":
                    probe.drain += time.perf_counter() - start

        def timed_snapshot(staging: Any, payload: Any) -> Any:
            start = time.perf_counter()
            try:
                return snapshot(staging, payload)
            finally:
                if probe._where == "commit":
                    probe.snapshots[-1] += time.perf_counter() - start

        TrainingSession.commit, TrainingSession.finalize = timed_commit, timed_finalize  # type: ignore[method-assign]
        BackgroundCommits.wait, Staging.snapshot = timed_wait, timed_snapshot  # type: ignore[method-assign]
        try:
            yield self
        finally:
            TrainingSession.commit, TrainingSession.finalize = commit, finalize  # type: ignore[method-assign]
            BackgroundCommits.wait, Staging.snapshot = wait, snapshot  # type: ignore[method-assign]


def nnx_arm(width: int, layers: int, batches: int, epochs: int, device: torch.device, *, async_commits: bool) -> dict[str, Any]:
    train = loader(width, batches)
    root = tempfile.mkdtemp(prefix="nnx-bench-async-runs-")
    clock = Clock(device)
    try:
        start = time.perf_counter()
        model = nnx.NNModel(module=make_net(width, layers),
                            params=nnx.NNModelParams(loss=nnx.Losses.CROSS_ENTROPY, device=nnx.Devices(device.type)))
        params = nnx.NNTrainParams(n_epochs=epochs, seed=0, train_loader=train, progress=False, async_commits=async_commits,
                                   optim=nnx.NNOptimParams(name=nnx.Optims.ADAM, max_lr=1e-4))
        with Probe().installed() as probe:
            model.train(params, root=root, callbacks=[clock])
        end = time.perf_counter()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    del model
    free()
    commit_s = [b - a for a, b in probe.commits]
    gaps = [clock.begins[k + 1] - clock.ends[k] for k in range(epochs - 1)]
    loop_end = probe.commits[-1][1]
    return {
        "loop": loop_end - clock.begins[1] if epochs > 1 else loop_end - clock.begins[0],
        "total": end - start, "commit": commit_s, "gap": gaps, "wait": probe.waits, "snapshot": probe.snapshots,
        "waits": probe.in_flight_waits, "submitted": probe.submitted, "finalize": probe.finalize, "drain": probe.drain,
        "tail": end - loop_end,
    }


# ------------------------------------------------------------------------------------ one size
def one_size(megabytes: float, device: torch.device, reps: int, loop_reps: int, epochs: int, hide: float) -> dict[str, Any]:
    width, layers = shape(megabytes)
    folder = tempfile.mkdtemp(prefix="nnx-bench-async-")
    try:
        net = make_net(width, layers).to(device)
        opt = torch.optim.Adam(net.parameters(), lr=1e-4)
        one = batch_seconds(net, opt, width, device)  # also makes Adam's state: the payload's full size
        row = micro(net, opt, device, folder, reps, width)
        del net, opt
        free()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    atomic = statistics.median(row["atomic"])
    batches = max(2, math.ceil(hide * atomic / one))
    row.update(megabytes=megabytes, width=width, layers=layers, batch_s=one, batches=batches, epochs=epochs,
               reps=reps, loop_reps=loop_reps, compute_s=batches * one)
    arms: dict[str, Callable[[], dict[str, Any]]] = {
        "plain": lambda: plain_arm(width, layers, batches, epochs, device),
        "async": lambda: nnx_arm(width, layers, batches, epochs, device, async_commits=True),
        "sync": lambda: nnx_arm(width, layers, batches, epochs, device, async_commits=False),
    }
    names = list(arms)
    for name in names:
        row[name] = []
    for rep in range(loop_reps):  # the order rotates each repetition
        for name in names[rep % 3:] + names[:rep % 3]:
            if name != "sync" or rep < SYNC_REPS:
                row[name].append(arms[name]())
    row["load"] = os.getloadavg()[0]
    return row


def pooled(runs: list[dict[str, Any]], key: str) -> list[float]:
    return [x for run in runs for x in run[key]]


def warm(runs: list[dict[str, Any]], key: str) -> list[float]:
    """``key``'s samples without each run's first commit (it allocates the staging buffers)."""
    return [x for run in runs for x in (run[key][1:] if len(run[key]) > 1 else run[key])]


def first(runs: list[dict[str, Any]], key: str) -> list[float]:
    return [run[key][0] for run in runs if run[key]]


def ratio(runs: list[dict[str, Any]], plain: list[dict[str, Any]], key: str) -> str:
    """Median over repetitions of this arm's ``key`` / the plain loop's (paired by repetition)."""
    return f"{statistics.median(a[key] / b[key] for a, b in zip(runs, plain[:len(runs)], strict=True)):.2f}"


def label(megabytes: float) -> str:
    return f"{megabytes / 1000:g} GB" if megabytes >= 1000 else f"{megabytes:g} MB"


def tables(rows: list[dict[str, Any]]) -> str:
    lines = ["### Blocked time per commit (ms, medians; NNx's without each run's first commit, which allocates "
             "the staging buffers)", "",
             "| state | staging: after a step (isolated) | torch copy | atomic save | DCP async_save blocked (total) "
             "| **NNx async** commit (gap) | NNx async first commit | NNx sync commit "
             "| **NNx async / staging after a step** (/ isolated) | NNx async / its own snapshot | **NNx async / DCP** | waits |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        a, s = r["async"], r["sync"]
        ours, dcp = median_ms(warm(a, "commit")), median_ms(r["dcp"])
        stage, alone = median_ms(r["staging_step"]), median_ms(r["staging"])
        waits = f"{sum(x['waits'] for x in a)} of {sum(x['submitted'] for x in a)}"
        lines.append(
            f"| {label(r['megabytes'])} ({r['bytes'] / 1e6:.0f} MB) | {stage:.1f} ({alone:.1f}) | {median_ms(r['copy']):.1f} "
            f"| {median_ms(r['atomic']):.0f} | {dcp:.1f} ({median_ms(r['dcp_total']):.0f}) "
            f"| **{ours:.1f}** ({median_ms(warm(a, 'gap')):.1f}) | {median_ms(first(a, 'commit')):.0f} "
            f"| {median_ms(pooled(s, 'commit')):.0f} | **{ours / stage:.2f}** ({ours / alone:.2f}) "
            f"| {ours / median_ms(warm(a, 'snapshot')):.2f} "
            f"| **{ours / dcp:.2f}** | {waits} |")
    lines += ["", "### The loop, a commit every epoch (seconds; ratios against the plain loop with no saves)", "",
              "| state | net | epoch compute | epochs × reps (sync) | plain loop | **async loop** | sync loop | plain train() "
              "| async train() | sync train() | async tail: wait + final refresh | load |",
              "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        p, a, s = r["plain"], r["async"], r["sync"]
        med = lambda runs, key: statistics.median(x[key] for x in runs)  # noqa: E731
        lines.append(
            f"| {label(r['megabytes'])} | {r['layers']}×{r['width']}², {r['batches']} batches of {BATCH} "
            f"| {r['compute_s']:.2f} s ({r['compute_s'] / statistics.median(r['atomic']):.1f} × atomic) "
            f"| {r['epochs']} × {r['loop_reps']} ({len(s)}) | {med(p, 'loop'):.2f} | **{med(a, 'loop'):.2f} ({ratio(a, p, 'loop')} ×)** "
            f"| {med(s, 'loop'):.2f} ({ratio(s, p, 'loop')} ×) | {med(p, 'total'):.2f} | {med(a, 'total'):.2f} "
            f"({ratio(a, p, 'total')} ×) | {med(s, 'total'):.2f} ({ratio(s, p, 'total')} ×) "
            f"| {med(a, 'drain'):.2f} + {med(a, 'finalize') - med(a, 'drain'):.2f} | {r['load']:.1f} |")
    lines += ["", "### Where NNx's asynchronous commit blocks (ms, medians per commit, the first left out)", "",
              "| state | commit | wait for the previous commit | staging snapshot | the rest (payload, history, hand-off) "
              "| gap (commit + lifecycle) | sync commit |",
              "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        a = r["async"]
        commit, wait, snap = median_ms(warm(a, "commit")), median_ms(warm(a, "wait")), median_ms(warm(a, "snapshot"))
        lines.append(f"| {label(r['megabytes'])} | {commit:.1f} | {wait:.1f} | {snap:.1f} | {commit - wait - snap:.1f} "
                     f"| {median_ms(warm(a, 'gap')):.1f} | {median_ms(pooled(r['sync'], 'commit')):.0f} |")
    return "\n".join(lines)


def machine(device: torch.device) -> str:
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    disk = shutil.disk_usage(tempfile.gettempdir())
    line = (f"{os.cpu_count()} cores (nproc), {mem:.0f} GiB RAM, {tempfile.gettempdir()} on a disk with "
            f"{disk.free / 2**30:.0f} GiB free; Python {platform.python_version()}, torch {torch.__version__}, "
            f"threads={torch.get_num_threads()}; fsync latency {C.fsync_latency()}")
    if device.type == "cuda":
        line += f"; GPU {torch.cuda.get_device_name(device)}, CUDA {torch.version.cuda}"
    return line


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return f"load average {os.getloadavg()}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--sizes", default=None, help="states in MB, comma-separated (default 50,500,2000)")
    parser.add_argument("--reps", type=int, default=None, help="repetitions of the staging/copy/save arms (default: by size)")
    parser.add_argument("--epochs", type=int, default=None, help="epochs per training run (default: by size)")
    parser.add_argument("--loop-reps", type=int, default=None, help="training runs per arm (default: by size)")
    parser.add_argument("--hide", type=float, default=1.5, help="an epoch's compute as a multiple of the atomic save")
    parser.add_argument("--quick", action="store_true", help="5 MB and 20 MB states, 3 epochs: a smoke run")
    parser.add_argument("--out", default=None, help="also write the tables (with the machine) to this markdown file")
    parser.add_argument("--system-malloc", action="store_true", help="leave glibc's moving mmap threshold as it is")
    parser.add_argument("--one-process", action="store_true", help="run every size in this process, one after the other")
    parser.add_argument("--row-json", default=None, help=argparse.SUPPRESS)  # a size's own process: its row, as JSON
    args = parser.parse_args(argv)
    if not args.system_malloc and argv is None and any(k not in os.environ for k in PINNED_MALLOC):
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **PINNED_MALLOC})  # the module docstring
    if args.device == "cuda" and not torch.cuda.is_available():
        print("bench/async_commits.py: no CUDA device on this machine; nothing measured")
        return 0
    device = torch.device("cuda", 0) if args.device == "cuda" else torch.device("cpu")
    torch.set_num_threads(1)
    sizes = [float(s) for s in (args.sizes or ("5,20" if args.quick else "50,500,2000")).split(",")]
    if args.row_json:
        with open(args.row_json, "w") as f:
            json.dump(measure(sizes[0], device, args), f)
        return 0
    head = [f"# bench/async_commits.py — {time.strftime('%Y-%m-%d %H:%M %Z')} — device {device.type}",
            "", f"machine: {machine(device)}", "",
            "allocator: " + ", ".join(f"{k}={os.environ.get(k, 'unset')}" for k in PINNED_MALLOC),
            "", "each size in " + ("this one process" if args.one_process or len(sizes) == 1 else "a fresh process of its own"),
            "", f"at the start: `{uptime()}`", ""]
    print("\n".join(head), flush=True)
    rows = []
    started = time.perf_counter()
    for megabytes in sizes:
        t = time.perf_counter()
        rows.append(measure(megabytes, device, args) if args.one_process or len(sizes) == 1 else in_own_process(megabytes, args))
        print(f"{label(megabytes)} done in {time.perf_counter() - t:.0f} s (`{uptime()}`)", flush=True)
        print(tables(rows[-1:]), flush=True)
        print("raw seconds: " + "; ".join(f"{arm} {key} {[round(x, 4) for x in run[key]]}" for arm in ("async", "sync")
                                            for run in rows[-1][arm] for key in ("commit", "gap", "snapshot", "wait")), flush=True)
    tail = [f"at the end: `{uptime()}`; {time.perf_counter() - started:.0f} s in all"]
    text = "\n".join(head + [tables(rows), "", *tail])
    print("\n## All sizes\n\n" + tables(rows) + "\n\n" + tail[0])
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return 0


def measure(megabytes: float, device: torch.device, args: argparse.Namespace) -> dict[str, Any]:
    """One size's row, with the repetitions its size calls for unless given."""
    big = megabytes > 1000
    reps = args.reps or (2 if big else 3 if megabytes > 100 else 7)
    epochs = args.epochs or (3 if args.quick or big else 4)
    loop_reps = args.loop_reps or (1 if args.quick else 3 if big else 5)
    return one_size(megabytes, device, reps, loop_reps, epochs, args.hide)


def in_own_process(megabytes: float, args: argparse.Namespace) -> dict[str, Any]:
    """One size measured in a fresh process (this script, the same options): what the sizes before
    it allocated and freed (2 GB saves, DCP, staging buffers) does not shape its memory, and so
    its loops (glibc's heap and the page cache after earlier rows moved the 2 GB loop by ±10 %)."""
    own = [f"--device={args.device}", f"--hide={args.hide}", f"--sizes={megabytes:g}"]
    own += [f"--{name.replace('_', '-')}={value}" for name in ("reps", "epochs", "loop_reps")
            if (value := getattr(args, name)) is not None]
    own += [flag for flag, on in (("--quick", args.quick), ("--system-malloc", args.system_malloc)) if on]
    with tempfile.TemporaryDirectory(prefix="nnx-bench-async-row-") as folder:
        path = os.path.join(folder, "row.json")
        subprocess.run([sys.executable, os.path.abspath(__file__), *own, f"--row-json={path}"], check=True,
                       stdout=subprocess.DEVNULL)
        with open(path) as f:
            row: dict[str, Any] = json.load(f)
    return row


if __name__ == "__main__":
    sys.exit(main())
