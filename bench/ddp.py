"""NNx data parallelism against a plain torch DDP loop doing the same work, and against one process.

    .venv/bin/python bench/ddp.py            # every row (about 2 minutes on 2 cores)
    .venv/bin/python bench/ddp.py --quick    # fewer repetitions, for a smoke run
    .venv/bin/python bench/ddp.py --nodes 2  # the ranks under two torchrun agents acting as two nodes

The job is bench/_common's (MLP, Adam lr 1e-2, cross-entropy, validation accuracy every epoch,
one thread per process), on ``--world`` ranks (default 2) started the way torchrun starts them
(one process per rank with RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT; gloo on CPU), or with
``--nodes N`` under N torchrun agents on this machine (``--nnodes=N --node-rank=i``, static
rendezvous on 127.0.0.1: every arm's traffic then crosses the agents as between nodes). Every
rank takes 64 steps of ``batch`` rows per epoch, dealt by ``nnx.distributed.train_loader``.
Arms, interleaved in the same processes (the order rotates every repetition):

* ``plain DDP``  ``DistributedDataParallel`` forward / mean loss / backward / step over the same
                 sharded loader; validation of the rank's shard with one all-reduce of the
                 correct counts; rank 0 ``torch.save`` s model + optimizer and fsyncs every epoch
* ``nnx DDP``    ``model.train(params, distributed=DDP())`` as shipped: numerator losses,
                 the agreement in the gradient all-reduce, global records, agreed durable commits by the
                 writer; every all-reduce through gloo (``TorchCollective()``, the default)
* ``nnx, shm``   the same with ``DDP(collective=TorchCollective(shared_memory=True))``: the
                 opt-in shared-memory fast path for small all-reduces (what it saves)
* ``1 process``  ``NNModel.train`` alone (no group, one thread) on the same rows, batch
                 ``world × batch``: what the ranks together replace (measured in this process)

Steady-state seconds/epoch: the median over repetitions of the mean time of epochs 1.. (epoch 0
pays first-call costs). Ratios are medians of per-repetition ratios. A counting pass then reports
the collective calls and bytes per step and per epoch: NNx's own (a counting ``TorchCollective``
given as ``DDP(collective=...)``, read at every ``on_optimizer_update``) and DDP's gradient
buckets (a counting comm hook on the plain arm; NNx wraps the same net in the same
``DistributedDataParallel`` with its default buckets). Timings are printed, never asserted.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import pickle
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from itertools import pairwise
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C

C.setup_threads()

from nnx_adapters.collective.torch import TorchCollective  # noqa: E402
from nnx_adapters.pytorch import state as torch_state  # noqa: E402
import nnx_api as nnx  # noqa: E402
from nnx_api import distributed  # noqa: E402

STEPS = 64
ROWS: list[dict[str, Any]] = [
    {"name": "MLP 32-64-2, batch 64/rank", "batch": 64, "hidden": (64,), "epochs": 5, "reps": 5},
    {"name": "MLP 32-512-512-2, batch 64/rank", "batch": 64, "hidden": (512, 512), "epochs": 4, "reps": 4},
]


def now() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


class Stamps(nnx.Callback):
    distributed = "all"

    def __init__(self) -> None:
        self.times: list[tuple[float, float]] = []

    def on_epoch_begin(self, ctx: Any) -> None:
        self.times.append(now())

    def on_train_end(self, ctx: Any) -> None:
        self.times.append(now())


def per_epoch(stamps: list[tuple[float, float]], epochs: int) -> dict[str, float]:
    return {
        "epoch": (stamps[-1][0] - stamps[1][0]) / (epochs - 1),
        "cpu_epoch": (stamps[-1][1] - stamps[1][1]) / (epochs - 1),
    }


def job_of(row: dict[str, Any], world: int) -> C.Job:
    return C.Job(batch=row["batch"] * world, hidden=row["hidden"], batches=STEPS)


def nnx_model(job: C.Job) -> nnx.NNModel:
    model = nnx.NNModel(
        nnx.NNParams(input_dim=C.INPUTS, output_dim=C.CLASSES, hidden_dims=job.hidden),
        nnx.NNModelParams(loss=nnx.Losses.CROSS_ENTROPY),
    )
    model.net.load_state_dict(job.initial_state)
    return model


def nnx_params(job: C.Job, row: dict[str, Any], epochs: int, **loader_kw: Any) -> nnx.NNTrainParams:
    batch = row["batch"] if not loader_kw else row["batch"] * loader_kw["world_size"]
    return nnx.NNTrainParams(
        n_epochs=epochs,
        optim=nnx.NNOptimParams(name=nnx.Optims.ADAM, max_lr=1e-2),
        train_loader=distributed.train_loader(job.train, batch, seed=0, **loader_kw),
        val_loader=distributed.validation_loader(job.val, row["batch"], **loader_kw),
        progress=False,
    )


# ------------------------------------------------------------------------------- arms (one rank)
def nnx_arm(
    job: C.Job, row: dict[str, Any], epochs: int, *, shared_memory: bool = False, collective: Any = None,
    callbacks: tuple[Any, ...] = (),
) -> dict[str, float]:
    """``model.train(params, distributed=DDP(collective=...))``; the collective is built here on
    every rank alike (construction is collective), gloo-only unless ``shared_memory``."""
    stamps = Stamps()
    root = tempfile.mkdtemp() if dist.get_rank() == 0 else None
    root = dist_broadcast(root)
    if collective is None:
        collective = TorchCollective(shared_memory=shared_memory)
    try:
        nnx_model(job).train(
            nnx_params(job, row, epochs), callbacks=[stamps, *callbacks], root=root,
            distributed=distributed.DDP(collective=collective),
        )
    finally:
        collective.close()
    return per_epoch(stamps.times, epochs)


def plain_arm(job: C.Job, row: dict[str, Any], epochs: int, hook: Any = None) -> dict[str, float]:
    rank = dist.get_rank()
    net = job.net()
    ddp = DistributedDataParallel(net)
    if hook is not None:
        ddp.register_comm_hook(None, hook)
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    loss_fn = nn.CrossEntropyLoss()
    loader = distributed.train_loader(job.train, row["batch"], seed=0)
    val = distributed.validation_loader(job.val, row["batch"])
    stamps = []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "checkpoint.pt")
        for epoch in range(epochs):
            stamps.append(now())
            loader.set_epoch(epoch)
            net.train()
            for x, y in loader:
                opt.zero_grad(set_to_none=True)
                loss = loss_fn(ddp(x), y)
                loss.backward()
                opt.step()
            net.eval()
            counts = torch.zeros(2, dtype=torch.float64)
            with torch.inference_mode():
                for x, y in val:
                    counts += torch.tensor([float((net(x).argmax(-1) == y).sum()), float(len(y))], dtype=torch.float64)
            dist.all_reduce(counts)
            _accuracy = float(counts[0] / counts[1])
            if rank == 0:
                with open(path, "wb") as f:
                    torch.save({"epoch": epoch, "model": net.state_dict(), "optimizer": opt.state_dict()}, f)
                    f.flush()
                    os.fsync(f.fileno())
        stamps.append(now())
    return per_epoch(stamps, epochs)


def single_arm(job: C.Job, row: dict[str, Any], epochs: int, world: int) -> dict[str, float]:
    stamps = Stamps()
    with tempfile.TemporaryDirectory() as root:
        nnx_model(job).train(nnx_params(job, row, epochs, rank=0, world_size=1), callbacks=[stamps], root=root)
    return per_epoch(stamps.times, epochs)


def dist_broadcast(obj: Any) -> Any:
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


# ------------------------------------------------------------------------------- counting pass
class GradientCount:
    """Counts DDP's gradient buckets and bytes through a comm hook (``hook``) that then all-reduces as usual."""

    def __init__(self) -> None:
        self.calls = 0
        self.bytes = 0

        def hook(state, bucket):  # no annotations: DDP checks them
            buffer = bucket.buffer()
            self.calls += 1
            self.bytes += buffer.numel() * buffer.element_size()
            return default_hooks.allreduce_hook(state, bucket)

        self.hook = hook


class CountingCollective(TorchCollective):
    """A ``TorchCollective`` that logs every all-reduce (its length) in call order."""

    def __init__(self, *a: Any, **k: Any) -> None:
        super().__init__(*a, **k)
        self.log: list[int] = []

    def all_reduce_sum(self, values: Any) -> list[float]:
        values = list(values)
        self.log.append(len(values))
        return super().all_reduce_sum(values)


class UpdateMarks(nnx.Callback):
    """Where the collective's log stood at every committed update and epoch start."""

    distributed = "all"

    def __init__(self, collective: CountingCollective) -> None:
        self.collective = collective
        self.marks: list[tuple[str, int]] = []

    def on_epoch_begin(self, ctx: Any) -> None:
        self.marks.append(("epoch", len(self.collective.log)))

    def on_optimizer_update(self, ctx: Any, event: Any) -> None:
        self.marks.append(("update", len(self.collective.log)))


def count_traffic(job: C.Job, row: dict[str, Any], shared_memory: bool) -> dict[str, Any]:
    """One NNx run of 2 epochs and one plain run, counting every collective."""
    collective = CountingCollective(shared_memory=shared_memory)
    marks = UpdateMarks(collective)
    epochs = 2
    nnx_arm(job, row, epochs, collective=collective, callbacks=(marks,))
    # all-reduces between consecutive updates of one epoch: one microbatch's
    between = [
        b[1] - a[1] for a, b in pairwise(marks.marks) if a[0] == "update" and b[0] == "update"
    ]
    step_calls = statistics.median(between)
    step_len = statistics.median(collective.log[m[1] - 1] for m in marks.marks if m[0] == "update")
    grads = GradientCount()
    plain_arm(job, row, epochs, hook=grads.hook)
    return {
        "steps": sum(1 for m in marks.marks if m[0] == "update"),
        "nnx_step_calls": step_calls,
        "nnx_step_bytes": step_len * 8 * step_calls,
        "nnx_call_totals": dict(collective.traffic.calls),
        "plain_grad_calls_per_step": grads.calls / (epochs * STEPS),
        "plain_grad_bytes_per_step": grads.bytes / (epochs * STEPS),
        "rng_pickle_bytes": len(pickle.dumps(torch_state.capture_rng())),
        "fast_path_calls": collective.fast_path_calls,
    }


def worker(out: str, rows: list[dict[str, Any]], quick: bool) -> None:
    info = distributed.init_process_group(timeout_seconds=120)
    results = []
    for row in rows:
        job = job_of(row, info.world_size)
        epochs, reps = row["epochs"], (2 if quick else row["reps"])
        arms = {
            "plain": functools.partial(plain_arm, job, row, epochs),
            "nnx": functools.partial(nnx_arm, job, row, epochs),
            "nnx_shm": functools.partial(nnx_arm, job, row, epochs, shared_memory=True),
        }
        samples = C.interleaved(arms, reps)
        traffic = {"gloo": count_traffic(job, row, False), "shm": count_traffic(job, row, True)}
        results.append({"samples": samples, "traffic": traffic, "params": C.n_params(job.net())})
    if info.rank == 0:
        with open(out, "w") as f:
            json.dump(results, f)
    distributed.shutdown(timeout_seconds=60)


# ------------------------------------------------------------------------------- launcher
def launch(world: int, rows: list[dict[str, Any]], quick: bool, nodes: int = 1) -> list[dict[str, Any]]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "results.json")
        spec = json.dumps({"rows": rows, "quick": quick})
        job = [os.path.abspath(__file__), "--worker", out, spec]
        base = {**os.environ, "NNX_PROGRESS": "0", "OMP_NUM_THREADS": "1"}
        procs = []
        if nodes > 1:  # one torchrun agent per "node", static rendezvous
            agent = [sys.executable, "-m", "torch.distributed.run", f"--nnodes={nodes}", f"--nproc-per-node={world // nodes}",
                     "--master-addr=127.0.0.1", f"--master-port={port}"]
            procs = [subprocess.Popen([*agent, f"--node-rank={n}", *job], env=base) for n in range(nodes)]
        for rank in range(world if nodes == 1 else 0):
            env = {
                **base, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world),
                "LOCAL_WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
            }
            procs.append(subprocess.Popen([sys.executable, *job], env=env))
        codes = [p.wait(timeout=1800) for p in procs]
        if codes != [0] * len(procs):
            raise SystemExit(f"a rank failed: exit codes {codes}")
        with open(out) as f:
            return json.load(f)


def ratios(a: list[float], b: list[float]) -> str:
    r = [x / y for x, y in zip(a, b, strict=True)]
    q1, _, q3 = statistics.quantiles(r, n=4) if len(r) > 1 else (r[0],) * 3
    return f"{statistics.median(r):.3f} ({q1:.2f}–{q3:.2f})"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--worker":
        spec = json.loads(argv[2])
        worker(argv[1], spec["rows"], spec["quick"])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 repetitions per row")
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--nodes", type=int, default=1, help="torchrun agents acting as nodes (static rendezvous)")
    args = parser.parse_args(argv)
    if args.nodes < 1 or args.world % args.nodes:
        parser.error(f"--world {args.world} does not divide among --nodes {args.nodes}")
    layout = f"{args.nodes} torchrun agents × {args.world // args.nodes}" if args.nodes > 1 else "one node"
    print(f"machine: {C.machine()}; load average {os.getloadavg()[0]:.1f}; {args.world} ranks (gloo, 1 thread each; {layout})")
    singles = []
    for row in ROWS:  # one process first, while the ranks do not compete for the cores
        job = job_of(row, args.world)
        reps = 2 if args.quick else row["reps"]
        single_arm(job, row, row["epochs"], args.world)  # warm-up
        singles.append([single_arm(job, row, row["epochs"], args.world)["epoch"] for _ in range(reps)])
    results = launch(args.world, [dict(r, hidden=list(r["hidden"])) for r in ROWS], args.quick, args.nodes)
    print("\nsteady-state ms/epoch (median over repetitions; ratios: medians of per-repetition ratios, quartiles)\n")
    print(
        "| row | params | steps/epoch/rank | 1 process ms | plain DDP ms | nnx DDP ms (gloo) | **nnx / plain DDP** "
        "| CPU ratio | nnx, shm ms | nnx shm / plain DDP | 1 process / nnx DDP |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row, res, single in zip(ROWS, results, singles, strict=True):
        s = res["samples"]
        plain, ours = statistics.median(s["plain"]["epoch"]), statistics.median(s["nnx"]["epoch"])
        fast = statistics.median(s["nnx_shm"]["epoch"])
        print(
            f"| {row['name']} | {res['params']:,} | {STEPS} | {statistics.median(single) * 1e3:.1f} | {plain * 1e3:.1f} "
            f"| {ours * 1e3:.1f} | **{ratios(s['nnx']['epoch'], s['plain']['epoch'])}** "
            f"| {ratios(s['nnx']['cpu_epoch'], s['plain']['cpu_epoch'])} | {fast * 1e3:.1f} "
            f"| {ratios(s['nnx_shm']['epoch'], s['plain']['epoch'])} | {statistics.median(single) / ours:.2f} |"
        )
    print(f"\nload average at the end {os.getloadavg()[0]:.1f}")
    print("\ncollective traffic (per rank)\n")
    print("| row | collective | NNx per microbatch | DDP gradients per step (plain arm) | NNx calls over a 2-epoch run | RNG streams (pickled, per rank) |")
    print("|---|---|---|---|---|---:|")
    for row, res in zip(ROWS, results, strict=True):
        for name, t in res["traffic"].items():
            totals = ", ".join(f"{k} {v}" for k, v in sorted(t["nnx_call_totals"].items()))
            shm = f" ({t['fast_path_calls']} all-reduces through shared memory)" if t["fast_path_calls"] else ""
            print(
                f"| {row['name']} | {name} | {t['nnx_step_calls']:.0f} all-reduce, {t['nnx_step_bytes']:.0f} B "
                f"| {t['plain_grad_calls_per_step']:.0f} bucket(s), {t['plain_grad_bytes_per_step'] / 1024:.1f} KiB "
                f"| {totals} ({t['steps']} updates){shm} | {t['rng_pickle_bytes']:,} B |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
