"""Search workers: trials per hour of one search run by 1, 2 and 4 worker processes on one study.

    .venv/bin/python bench/search_workers.py                 # 24 trials, 3 repetitions: 5–10 minutes on 2 cores
    .venv/bin/python bench/search_workers.py --quick         # 8 trials, 1 repetition: a smoke run
    .venv/bin/python bench/search_workers.py --trials 48 --reps 2 --no-journal

The search is the one of ``tests/integration/search_worker.py`` (the worker CLI the multi-worker
tests run): a digits MLP (64 → 16 → 10, ReLU, Adam), 600 training rows in batches of 100, 300
validation rows, ``--epochs`` epochs (default 3), its learning rate searched log-uniformly in
[1e-3, 5e-2], NopPruner, ``SearchBudget(trials=N)``. Every arm is a fresh set of processes started
from here, each with ``OMP_NUM_THREADS=1`` (one torch thread), stdout to a file; a fresh temporary
runs root and study for every arm and repetition. Arms:

* ``plain``            one process, no NNx and no study: a hand loop trains the same MLP on the same
                       data for the same epochs, N times (learning rates drawn from a seeded RNG),
                       validation NLL each epoch, nothing written
* ``plain + Optuna``   the same loop driven by Optuna's ``ask``/``tell`` on a SQLite study, with an
                       atomic durable ``torch.save`` (temporary, fsync, rename, folder fsync) of the
                       model and Adam state each epoch: the least a crash-safe search does by hand
* ``NNx, k workers``   k copies of ``search_worker.py ROOT sqlite:///DB STUDY N`` started together on
                       one runs root and one SQLite study (k = 1 is one process running the search
                       alone); ``journal`` rows use ``journal:<file>`` (Optuna's ``JournalStorage``).
                       The k processes create the new database together (the losers of that race
                       try again: part of the measured time)

Reported per arm (median over repetitions, the spread min–max): wall seconds from starting the
processes to the last one's exit (interpreter start and imports included), trials per hour on
that wall time, speed-up against ``NNx, 1 worker`` and the ratio to ``plain`` in trials per hour;
the CPU seconds (user + system) of all the arm's processes together, which the machine's other
load moves much less than the wall time; then, from the study's own timestamps, the seconds from the start to the first trial, the median
trial (Optuna's ``ask`` → ``tell``: lease, plan fit, outcome, tell) and the median gap between one
worker's consecutive trials (``tell`` → next ``ask``: the budget count over the study's trials,
the orphan check, the next ``ask``'s bookkeeping). The repetitions alternate the arms' order
(reversed every other one); the one-minute load average after each arm is printed. Every process
must exit 0 and every study hold exactly N completed trials, or the script stops with the failing
arm's output. Timings are printed, never asserted. Every process's first trial also pays torch's
own first-call cost: the first ``torch.optim.Adam`` imports ``torch._dynamo`` (about 2 s here),
in the plain arms too.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from _common import atomic_durable_save  # bench/ is on sys.path when a script of it runs

HERE = Path(__file__).resolve().parent
WORKER = HERE.parent / "tests" / "integration" / "search_worker.py"
LR_LOW, LR_HIGH = 1e-3, 5e-2  # the worker's space (FloatParam("train.optim.max_lr", 1e-3, 5e-2, log=True))


# ----------------------------------------------------------------------------- the plain arms
def plain_child(trials: int, epochs: int, storage: str | None, folder: str | None) -> None:
    """The hand loop: the worker's data and MLP without NNx. Prints one JSON line of timestamps."""
    import torch
    from sklearn.datasets import load_digits
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    torch.set_num_threads(1)
    x, y = load_digits(return_X_y=True)  # the worker's plan(): same rows, same split, same batches
    x, y = torch.tensor(x / 16.0, dtype=torch.float32), torch.tensor(y)
    val_x, val_y = x[600:900], y[600:900]
    study = None
    if storage is not None:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        study = optuna.create_study(storage=storage, study_name="plain", direction="minimize")
    rng = random.Random(0)
    spans: list[tuple[float, float]] = []
    for t in range(trials):
        start = time.time()
        if study is not None:
            trial = study.ask()
            lr = trial.suggest_float("lr", LR_LOW, LR_HIGH, log=True)
        else:
            lr = math.exp(rng.uniform(math.log(LR_LOW), math.log(LR_HIGH)))
        torch.manual_seed(0)
        net = nn.Sequential(nn.Linear(64, 16), nn.ReLU(), nn.Linear(16, 10))
        opt = torch.optim.Adam(net.parameters(), lr=lr)
        loss_fn = nn.CrossEntropyLoss()
        loader = DataLoader(TensorDataset(x[:600], y[:600]), batch_size=100, shuffle=True)
        best = math.inf
        for epoch in range(epochs):
            net.train()
            for bx, by in loader:
                opt.zero_grad(set_to_none=True)
                loss_fn(net(bx), by).backward()
                opt.step()
            net.eval()
            with torch.inference_mode():
                best = min(best, float(loss_fn(net(val_x), val_y)))
            if folder is not None:
                atomic_durable_save({"epoch": epoch, "model": net.state_dict(), "optimizer": opt.state_dict()},
                                    os.path.join(folder, f"trial-{t}.pt"))
        if study is not None:
            study.tell(trial, best)
        spans.append((start, time.time()))
    print(json.dumps({"spans": spans}), flush=True)


# ----------------------------------------------------------------------------- one arm
def env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def run_arm(kind: str, workers: int, trials: int, epochs: int) -> dict[str, float]:
    """Start the arm's processes, wait for all of them; wall time and the study's own timings."""
    with tempfile.TemporaryDirectory(prefix="nnx-search-bench-") as tmp:
        logs = [open(os.path.join(tmp, f"out-{i}.log"), "w+") for i in range(workers)]  # noqa: SIM115
        if kind.startswith("plain"):
            cmd = [sys.executable, __file__, "--plain-child", str(trials), str(epochs)]
            if kind == "plain+optuna":
                cmd += ["--storage", f"sqlite:///{tmp}/study.db", "--save-dir", tmp]
            cmds = [cmd]
        else:
            storage = f"sqlite:///{tmp}/study.db" if kind == "sqlite" else f"journal:{tmp}/study.journal"
            cmds = [[sys.executable, str(WORKER), f"{tmp}/runs", storage, "bench", str(trials), "--epochs", str(epochs)]
                    for _ in range(workers)]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        launched = time.time()
        start = time.perf_counter()
        procs = [subprocess.Popen(c, stdout=log, stderr=subprocess.STDOUT, env=env(), cwd=tmp)
                 for c, log in zip(cmds, logs, strict=True)]
        codes = [p.wait(timeout=1800) for p in procs]
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        for log in logs:
            log.seek(0)
        texts = [log.read() for log in logs]
        for log in logs:
            log.close()
        if any(codes):
            sys.exit(f"{kind} x{workers}: exit codes {codes}\n" + "\n".join(t[-2000:] for t in texts))
        if kind == "plain":
            spans = json.loads(texts[0].strip().splitlines()[-1])["spans"]
            by_worker = {"plain": spans}
        else:
            by_worker = study_spans(kind, tmp, trials)
    return {"wall": wall, "cpu": cpu, "load": os.getloadavg()[0], **span_stats(by_worker, launched)}


def study_spans(kind: str, tmp: str, trials: int) -> dict[str, list[tuple[float, float]]]:
    """Each worker's trials as (ask, tell) epoch seconds, from the study; checks N completed."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if kind == "journal":
        from optuna.storages.journal import JournalFileBackend

        storage: Any = optuna.storages.JournalStorage(JournalFileBackend(f"{tmp}/study.journal"))
    else:
        storage = f"sqlite:///{tmp}/study.db"
    name = "plain" if kind == "plain+optuna" else "bench"
    study = optuna.load_study(study_name=name, storage=storage)
    done = [t for t in study.get_trials(deepcopy=False) if t.state == optuna.trial.TrialState.COMPLETE]
    if len(done) != trials:
        states = [t.state.name for t in study.get_trials(deepcopy=False)]
        sys.exit(f"{kind}: {len(done)} completed trials, expected {trials}: {states}")
    by_worker: dict[str, list[tuple[float, float]]] = {}
    for t in done:
        assert isinstance(t.datetime_start, datetime) and isinstance(t.datetime_complete, datetime)
        by_worker.setdefault(str(t.user_attrs.get("worker", "plain")), []).append(
            (t.datetime_start.timestamp(), t.datetime_complete.timestamp()))
    return by_worker


def span_stats(by_worker: dict[str, list[tuple[float, float]]], launched: float) -> dict[str, float]:
    spans = sorted(s for v in by_worker.values() for s in v)
    gaps = [b[0] - a[1] for v in by_worker.values() for a, b in zip(sorted(v), sorted(v)[1:], strict=False)]
    return {
        "first": spans[0][0] - launched,
        "trial": statistics.median(b - a for a, b in spans),
        "gap": statistics.median(gaps) if gaps else float("nan"),
        "workers_used": len(by_worker),
    }


# ----------------------------------------------------------------------------- report
def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def fmt(values: list[float], digits: int = 1) -> str:
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}–{max(values):.{digits}f})"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="8 trials, 1 repetition")
    parser.add_argument("--trials", type=int, default=None, help="trials per search (default 24)")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--reps", type=int, default=None, help="repetitions of every arm (default 3)")
    parser.add_argument("--workers", default="1,2,4", help="worker counts on SQLite")
    parser.add_argument("--no-journal", action="store_true", help="leave out the JournalStorage rows")
    parser.add_argument("--plain-child", nargs=2, type=int, help=argparse.SUPPRESS)
    parser.add_argument("--storage", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--save-dir", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.plain_child:
        plain_child(args.plain_child[0], args.plain_child[1], args.storage, args.save_dir)
        return
    trials = args.trials or (8 if args.quick else 24)
    reps = args.reps or (1 if args.quick else 3)
    counts = [int(c) for c in args.workers.split(",")]
    arms: list[tuple[str, str, int]] = [("plain", "plain", 1), ("plain + Optuna (SQLite, durable saves)", "plain+optuna", 1)]
    arms += [(f"NNx, {k} worker{'s' if k > 1 else ''}, SQLite", "sqlite", k) for k in counts]
    if not args.no_journal:
        arms += [(f"NNx, {k} worker{'s' if k > 1 else ''}, JournalStorage", "journal", k) for k in (1, 2) if k in counts]
    import torch

    cpus = os.cpu_count()
    print(f"bench/search_workers.py: {cpus} CPUs ({cpu_model()}), Python {sys.version.split()[0]}, "
          f"torch {torch.__version__}, OMP_NUM_THREADS=1 per process, load average "
          f"{' '.join(f'{v:.1f}' for v in os.getloadavg())}")
    print(f"{trials} trials of {args.epochs} epochs per search, {reps} repetition(s), arms alternated\n")
    samples: dict[str, list[dict[str, float]]] = {label: [] for label, _, _ in arms}
    for rep in range(reps):
        order = arms if rep % 2 == 0 else arms[::-1]
        for label, kind, k in order:
            sample = run_arm(kind, k, trials, args.epochs)
            samples[label].append(sample)
            print(f"  rep {rep + 1}: {label}: {sample['wall']:.1f} s wall, {sample['cpu']:.1f} s CPU, "
                  f"load {sample['load']:.1f} after", file=sys.stderr, flush=True)
    rate = {label: [3600 * trials / s["wall"] for s in v] for label, v in samples.items()}
    one = statistics.median(rate[arms[2][0]]) if counts and counts[0] == 1 else float("nan")
    plain = statistics.median(rate["plain"])
    print("| arm | processes | wall s | trials/h | speed-up vs 1 worker | × plain trials/h | CPU s (all processes) | first trial after start, s | trial (ask → tell), ms | between a worker's trials, ms |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for label, kind, k in arms:
        v = samples[label]
        r = statistics.median(rate[label])
        speed = f"{r / one:.2f}" if kind in ("sqlite", "journal") else "—"
        gap = [s["gap"] * 1e3 for s in v if not math.isnan(s["gap"])]
        print(f"| {label} | {k} | {fmt([s['wall'] for s in v])} | {r:,.0f} | {speed} | {r / plain:.3f} | "
              f"{fmt([s['cpu'] for s in v])} | {fmt([s['first'] for s in v])} | {fmt([s['trial'] * 1e3 for s in v], 0)} | "
              f"{fmt(gap, 0) if gap else '—'} |")
    if counts and counts[0] == 1:
        nnx_wall = statistics.median(s["wall"] for s in samples[arms[2][0]])
        plain_wall = statistics.median(s["wall"] for s in samples["plain"])
        optuna_wall = statistics.median(s["wall"] for s in samples[arms[1][0]])
        print(f"\nPer trial, one process: NNx adds {(nnx_wall - plain_wall) / trials * 1e3:.0f} ms to the plain loop "
              f"and {(nnx_wall - optuna_wall) / trials * 1e3:.0f} ms to the plain loop with Optuna and durable saves "
              f"(median walls {nnx_wall:.1f}, {plain_wall:.1f}, {optuna_wall:.1f} s; startup included).")
    loads = [s["load"] for v in samples.values() for s in v]
    print(f"One-minute load average after each arm: {min(loads):.1f}–{max(loads):.1f}.")
    print(f"{cpus} CPUs: k workers can run at most {cpus} trials at once; above that they share the cores.")


if __name__ == "__main__":
    main()
