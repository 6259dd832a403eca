"""The crash matrix: each driver of ``drivers.py`` under ckpt-chaos, one table.

    python bench/chaos/matrix.py            # every file event of every driver, in every mode (make chaos)
    python bench/chaos/matrix.py --quick    # a sample: 2 events per driver, every mode somewhere (make chaos-quick)

Options: ``--epochs N`` (the drivers' job length, default 2), ``--jobs J`` (crash points run at
once, default 2), ``--work DIR`` (default ``build/chaos/<plan>-<time>``), ``--only DRIVER``
(repeatable); without ``--quick``: ``--modes`` (default all four) and ``--max-points N`` (sample N
crash points per driver, split between the modes; default every event). For each driver it runs
``ckpt-chaos run`` once, with its own ``--work`` folder and JUnit file (a folder that already has
its JUnit file, from an interrupted matrix with the same ``--work``, is read, not rerun; one
without it is started over), then
prints one Markdown table (driver × mode: crash points and verdicts), writes it to
``DIR/matrix.md`` and ends with a ``crash-matrix: N passed, N failed`` line. A driver with a
crash point that is not PASS gets ``ckpt-chaos repro`` (under its folder's ``repro/``). Exit
status 1 if any run is not PASS, a crash point did not crash or crashed at another event than
planned, or ckpt-chaos could not run a driver.

Crash points are found by counting file events, so the matrix follows NNx's commit sequence as it
is (nothing here knows how many events an epoch makes). ckpt-chaos names a temporary's event with
its file name, which NNx draws at random (``.tmp-<name>-<16 hex>``); a crash run's event at the
same position then carries another name, which ckpt-chaos flags as ``[PLAN DRIFT]``. The table
checks those points itself: same position, same kind of event, same name once the random suffix is
dropped (``search``: also the study's random id, in its trials' lease and run folder names, and
the uuid of Optuna's journal-lock release file).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shlex
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections import Counter
from importlib.metadata import version
from pathlib import Path

HERE = Path(__file__).resolve().parent
MODES = ("before", "torn", "unsynced", "term")
EVERY = 1_000_000  # --max-points above any event count: ckpt-chaos then takes every event of every mode
STEP_REGEX = r"resumed at epoch (\d+)"
FAIL_ON = "HARD_FAIL,SILENT_DIVERGENCE,LOST_WORK,CONTROL_FAIL"

# driver -> (ranks, crash rank, its own resume command?)
DRIVERS = {
    "digits-explicit": (1, 0, True),
    "digits-auto": (1, 0, False),
    "ddp-writer0": (2, 0, False),
    "ddp-writer1": (2, 1, False),
    "trainer-gan": (1, 0, False),
    "journal": (1, 0, False),
    "replace": (1, 0, False),
    "mid-epoch": (1, 0, False),
    "mid-epoch-journal": (1, 0, False),
    "preemption": (1, 0, False),
    "async": (1, 0, False),
    "sync": (1, 0, False),
    "search": (1, 0, False),
}
# --quick: (modes, max points) per driver, sized for 3 minutes of 2 idle cores (41 interpreter
# starts). ckpt-chaos spreads a mode's points evenly from the first event on (2 points: the first
# event and the middle one), and before / unsynced / term share one pool, so each driver samples
# one mode (trainer-gan adds torn). ddp-writer1 stands for both DDP drivers (the writer is not
# rank 0, and the rank ckpt-chaos kills is not 0 either). search (7 more starts, about 30 s): its first event and one inside
# its second trial's fit (the rerun resumes that trial from LAST, then runs the third). async (6 more
# starts): its first event and its middle one, a kill inside a background commit of epoch 0 while
# training is past the snapshot being written
QUICK = {
    "digits-explicit": ("before", 2),
    "digits-auto": ("unsynced", 2),
    "ddp-writer1": ("term", 2),
    "trainer-gan": ("before,torn", 3),
    "journal": ("before", 2),
    "replace": ("unsynced", 2),
    "search": ("before", 2),
    "async": ("before", 2),
}
_RANDOM_SUFFIX = re.compile(r"-[0-9a-f]{16}$")
# search: the study's id (6 hex, drawn when the study is made) is in every attempt id, so in the
# trials' lease files and run ids (run folders, 32 hex); each search call's worker lease is named
# by a random id (16 hex); Optuna releases its journal lock through a file named with a uuid4
_RANDOM_NAMES = {"search": re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-f]{32}"
                                      r"|(?<=-)[0-9a-f]{6}(?=\.t\d)|(?<=worker-)[0-9a-f]{16}")}


def chaos_command(driver: str, modes: str, max_points: int, work: Path, args: argparse.Namespace) -> list[str]:
    ranks, crash_rank, own_resume = DRIVERS[driver]
    script = [sys.executable, str(HERE / "drivers.py"), driver, "{out}", "--epochs", str(args.epochs)]
    cmd = [
        sys.executable, "-m", "ckpt_chaos", "run", "--work", str(work), "--junit", str(work / "junit.xml"),
        "--modes", modes, "--max-points", str(max_points), "--jobs", str(args.jobs), "--timeout", str(args.timeout),
        "--step-regex", STEP_REGEX, "--result-file", "{out}.result", "--fail-on", FAIL_ON,
    ]
    if ranks > 1:
        cmd += ["--ranks", str(ranks), "--crash-rank", str(crash_rank)]
    if own_resume:
        cmd += ["--resume-cmd", shlex.join([*script, "--resume"])]
    return [*cmd, "--", *script]


def landed(point_dir: Path, crash_rank: int, driver: str = "") -> bool:
    """Did the crash run die at the fault-free run's event (position, kind, name without the random
    suffix and the driver's other random parts)?"""
    rec = json.loads((point_dir / "result.json").read_text())
    n, (kind, name) = rec["point"][0], rec["event"]
    random = _RANDOM_NAMES.get(driver)

    def plain(text: str) -> str:
        text = _RANDOM_SUFFIX.sub("", text)
        return random.sub("#", text) if random else text

    for line in (point_dir / f"events.log.rank{crash_rank}").read_text().splitlines():
        seen_n, seen_kind, seen_name, _ = line.split("\t")
        if int(seen_n) == n:
            return seen_kind == kind and plain(seen_name) == plain(name)
    return False


def verdicts(junit: Path) -> list[tuple[str, str]]:
    """(label, verdict) per test case of ckpt-chaos's JUnit file (every non-PASS verdict is in FAIL_ON)."""
    rows = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        failure = case.find("failure")
        rows.append((case.get("name", ""), "PASS" if failure is None else failure.get("message", "").split(":")[0]))
    return rows


def run_driver(driver: str, modes: str, max_points: int, work: Path, args: argparse.Namespace) -> dict:
    log = work.with_suffix(".log")
    cmd = chaos_command(driver, modes, max_points, work, args)
    start, rc = time.monotonic(), 0
    if not (work / "junit.xml").exists():  # else finished by an earlier, interrupted matrix with the same --work
        shutil.rmtree(work, ignore_errors=True)  # a driver interrupted half-way starts over (ckpt-chaos wants a new folder)
        # ckpt-chaos 0.1.8 sets the crash variables on the crash rank only, but its injector then also
        # compares RANK with CKPT_CHAOS_CRASH_RANK (default 0), which `run` never sets: without it
        # --crash-rank 1 never crashes ("[DID NOT CRASH]")
        env = dict(os.environ, CKPT_CHAOS_CRASH_RANK=str(DRIVERS[driver][1]))
        with open(log, "w") as out:
            rc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=HERE.parent.parent, env=env).returncode
    found = re.search(r"(\d+) file events -> (\d+) crash points", log.read_text())
    result = {"driver": driver, "rc": rc, "seconds": time.monotonic() - start, "events": found and int(found[1]),
              "rows": [], "moved": 0, "not_crashed": 0, "log": log}
    if not (work / "junit.xml").exists():
        return result
    result["rows"] = verdicts(work / "junit.xml")
    crash_rank = DRIVERS[driver][1]
    for point in sorted(work.glob("pt_[0-9]*")):
        rec = json.loads((point / "result.json").read_text())
        result["not_crashed"] += not rec["crashed"]
        result["moved"] += rec["drift"] and not landed(point, crash_rank, driver)
    return result


def cpu_seconds() -> float:
    """CPU time (user + system) of every finished child process so far: ckpt-chaos and what it ran."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def mode_of(label: str) -> str:
    found = re.search(r"\[(\w+)\]$", label)
    return found[1] if found else "control"


def table(results: list[dict]) -> str:
    """One row per driver and mode; each ckpt-chaos run also has a fault-free control run."""
    lines = ["| driver | file events | mode | crash points | PASS | not PASS | control runs PASS |",
             "|---|---|---|---|---|---|---|"]
    for driver in dict.fromkeys(r["driver"] for r in results):
        mine = [r for r in results if r["driver"] == driver]
        events = "/".join(sorted({str(r["events"]) for r in mine}))
        by_mode: dict[str, Counter] = {}
        for label, verdict in (row for r in mine for row in r["rows"]):
            by_mode.setdefault(mode_of(label), Counter())[verdict] += 1
        control = by_mode.pop("control", Counter())
        for r in mine:
            if not r["rows"]:
                lines.append(f"| {driver} | {events} | {r['modes']} | ckpt-chaos exited {r['rc']}: see {r['log']} | | | |")
        for mode in MODES:
            if mode in by_mode:
                c = by_mode[mode]
                other = ", ".join(f"{n} {v}" for v, n in sorted(c.items()) if v != "PASS") or "0"
                lines.append(f"| {driver} | {events} | {mode} | {sum(c.values())} | {c['PASS']} | {other} | "
                             f"{control['PASS']}/{sum(control.values())} |")
    return "\n".join(lines) + "\n"


def plan(args: argparse.Namespace) -> list[tuple[str, str, int]]:
    """(driver, modes, max points) per ckpt-chaos run: one run per driver."""
    if args.quick:
        return [(driver, modes, points) for driver, (modes, points) in QUICK.items()]
    return [(driver, args.modes, args.max_points) for driver in DRIVERS]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a sampled subset (make chaos-quick)")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=int, default=300, help="seconds per command")
    parser.add_argument("--work", type=Path)
    parser.add_argument("--only", action="append", choices=sorted(DRIVERS))
    parser.add_argument("--modes", default=",".join(MODES), help="without --quick (default: all four)")
    parser.add_argument("--max-points", type=int, default=EVERY, help="without --quick: sample this many crash "
                        "points per driver, split between the modes (default: every file event in every mode)")
    args = parser.parse_args(argv)
    name = "quick" if args.quick else "full"
    work = (args.work or Path("build/chaos") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    work.mkdir(parents=True, exist_ok=True)
    start, results = time.monotonic(), []
    cpu_before = 0.0
    for driver, modes, max_points in plan(args):
        if args.only and driver not in args.only:
            continue
        print(f"== {driver} --modes {modes} ({'every event' if max_points == EVERY else max_points} points)", flush=True)
        point_work = work / f"{driver}-{modes.replace(',', '+')}"
        r = dict(run_driver(driver, modes, max_points, point_work, args), modes=modes)
        bad = [label for label, verdict in r["rows"] if verdict != "PASS"]
        cpu_now = cpu_seconds()
        print(f"   {len(r['rows'])} runs ({r['events']} file events), {len(bad)} not PASS, {r['moved']} moved, "
              f"{r['not_crashed']} did not crash, ckpt-chaos exit {r['rc']}, {r['seconds']:.0f} s wall, "
              f"{cpu_now - cpu_before:.0f} s CPU", flush=True)
        cpu_before = cpu_now
        if bad:
            subprocess.run([sys.executable, "-m", "ckpt_chaos", "repro", str(point_work)], check=False)
        results.append(r)
    header = (f"ckpt-chaos {version('ckpt-chaos')}, {name} plan, {args.epochs}-epoch drivers, --jobs {args.jobs}, "
              f"{time.strftime('%Y-%m-%d')}: {time.monotonic() - start:.0f} s wall, "
              f"{cpu_seconds():.0f} s CPU, load average {os.getloadavg()[0]:.1f}\n\n")
    text = header + table(results)
    (work / "matrix.md").write_text(text)
    print("\n" + text + f"\n(written to {work / 'matrix.md'})")
    runs = [verdict for r in results for _, verdict in r["rows"]]
    unsound = sum(r["moved"] + r["not_crashed"] + (r["rc"] != 0 and not r["rows"]) for r in results)
    passed = runs.count("PASS")
    print(f"crash-matrix: {passed} passed, {len(runs) - passed + unsound} failed")  # CI's plain closing line
    return 1 if len(runs) - passed + unsound or any(r["rc"] != 0 for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
