"""The differential oracle: the same user-level scenarios under NNx 0.4.1 and under nnx_api, compared.

    python bench/compat/diff.py                       # live: .venv-nnx (nnx) against .venv (nnx_api)
    python bench/compat/diff.py --record              # live, and write bench/compat/recorded_nnx.json
    python bench/compat/diff.py --against-recorded    # nnx_api against the recorded NNx observations

Every scenario (``bench/compat/scenarios/s*.py``) runs in a subprocess per package (``--batch``: all
scenarios of a package in one subprocess), each with a timeout, and writes what a user observes as
JSON. Observables are compared one by one: numbers within a float32 tolerance, everything else
exactly. Each difference is looked up in ``dispositions.py``.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
SCENARIOS = HERE / "scenarios"
RECORDED = HERE / "recorded_nnx.json"
RTOL, ATOL = 1e-4, 1e-5  # float32 arithmetic over a few SGD steps

sys.path.insert(0, str(HERE))
from dispositions import DISPOSITIONS  # noqa: E402


def scenario_names() -> list[str]:
    return sorted(p.stem for p in SCENARIOS.glob("s*.py"))


def run_scenarios(python: str, package: str, names: list[str], timeout: float, batch: bool) -> dict:
    """{scenario: observed dict} for ``package`` under ``python``."""
    env = {**os.environ, "NNX_PACKAGE": package, "NNX_TQDM_DISABLE": "1", "NNX_PROGRESS": "0", "OMP_NUM_THREADS": "1",
           "MKL_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("PYTHONPATH", None)
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix=f"compat-{package}-") as out:
        groups = [names] if batch else [[n] for n in names]
        for group in groups:
            cmd = [os.path.abspath(python), str(HERE / "_run.py"), "--out", out, "--timeout", str(timeout), *group]
            limit = timeout * len(group) + 30
            try:
                proc = subprocess.run(cmd, env=env, cwd=out, capture_output=True, text=True, timeout=limit)
                failed = proc.returncode != 0 and proc.stderr[-2000:]
            except subprocess.TimeoutExpired:
                failed = f"timed out after {limit:.0f} s"
            for name in group:
                path = Path(out) / f"{name}.json"
                if path.exists():
                    results[name] = json.loads(path.read_text())["observed"]
                else:
                    results[name] = {"_aborted": {"raised": "harness", "bases": [], "detail": str(failed)[-300:]}}
    return results


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts and lists of dicts → ``{"a.b[0].c": leaf}``; lists of scalars stay one leaf."""
    if isinstance(value, dict) and not (set(value) <= {"raised", "bases", "detail"} and "raised" in value):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out or {prefix: {}}
    if isinstance(value, list) and value and all(isinstance(v, (dict, list)) for v in value):
        out = {}
        for i, v in enumerate(value):
            out.update(flatten(v, f"{prefix}[{i}]"))
        return out
    return {prefix: value}


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def same(a: Any, b: Any) -> bool:
    if _num(a) and _num(b):
        if isinstance(a, int) and isinstance(b, int):
            return a == b
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return math.isclose(a, b, rel_tol=RTOL, abs_tol=ATOL)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


ABSENT = "<absent>"


def compare(theirs: dict, ours: dict) -> tuple[int, int, list[tuple[str, str, Any, Any]]]:
    """(scenarios, observables, [(scenario, observable, nnx value, our value)])."""
    diffs, n_obs = [], 0
    for scen in sorted(set(theirs) | set(ours)):
        a, b = flatten(theirs.get(scen, {})), flatten(ours.get(scen, {}))
        for key in sorted(set(a) | set(b)):
            n_obs += 1
            va, vb = a.get(key, ABSENT), b.get(key, ABSENT)
            if not same(va, vb):
                diffs.append((scen, key, va, vb))
    return len(set(theirs) | set(ours)), n_obs, diffs


def disposition(scen: str, key: str) -> tuple[str, str] | None:
    full = f"{scen}/{key}"
    if full in DISPOSITIONS:
        return DISPOSITIONS[full]
    for pattern, value in DISPOSITIONS.items():
        if fnmatch.fnmatchcase(full, pattern):
            return value
    return None


def unused_kept(diffs) -> list[str]:
    """"kept" entries that match no current difference."""
    present = [f"{s}/{k}" for s, k, _, _ in diffs]
    return [p for p, (d, _) in DISPOSITIONS.items()
            if d == "kept" and not any(p == f or fnmatch.fnmatchcase(f, p) for f in present)]


def short(v: Any, width: int = 48) -> str:
    if isinstance(v, list) and v and all(_num(x) for x in v):
        text = f"[{len(v)} numbers: {', '.join(f'{x:.5g}' for x in v[:3])}{', …' if len(v) > 3 else ''}]"
    elif isinstance(v, dict) and "raised" in v:
        text = f"raises {v['raised']}({', '.join(v.get('bases', []))})"
    else:
        text = json.dumps(v, sort_keys=True, default=repr) if not isinstance(v, str) else v
    return text if len(text) <= width else text[: width - 1] + "…"


def report(n_scen: int, n_obs: int, diffs, out=sys.stdout) -> tuple[int, int]:
    rows = []
    kept = unexplained = 0
    for scen, key, a, b in diffs:
        d = disposition(scen, key)
        if d is not None and d[0] == "kept":
            kept += 1
            disp = f"kept: {d[1]}"
        elif d is not None:
            unexplained += 1
            disp = f"REGRESSED (was fixed: {d[1]})"
        else:
            unexplained += 1
            disp = "UNEXPLAINED"
        rows.append((scen, key, short(a), short(b), disp))
    if rows:
        headers = ("scenario", "observable", "NNx 0.4.1", "nnx_api", "disposition")
        widths = [min(max(len(r[i]) for r in rows + [headers]), 48 if i < 4 else 200) for i in range(5)]
        line = "  ".join(f"{{:{w}}}" for w in widths)
        print(line.format(*headers), file=out)
        print(line.format(*("-" * w for w in widths)), file=out)
        for r in rows:
            print(line.format(*(c if len(c) <= w or i == 4 else c[: w - 1] + "…" for i, (c, w) in
                                enumerate(zip(r, widths, strict=True)))), file=out)
    stale = unused_kept(diffs)
    for p in stale:
        print(f"stale disposition (no longer differs; remove it from dispositions.py): {p}", file=out)
    print(f"compat-diff: {n_scen} scenarios, {n_obs} observables, {len(diffs)} differences "
          f"({kept} kept with a reason, {unexplained} unexplained)", file=out)
    return kept, unexplained


def markdown(diffs) -> str:
    """The differences grouped by disposition: one row per reason, its observables and an example."""
    groups: dict[tuple[str, str], list] = {}
    for scen, key, a, b in diffs:
        d = disposition(scen, key) or ("UNEXPLAINED", "")
        groups.setdefault(d, []).append((scen, key, a, b))
    lines = ["| disposition | scenario / observables | NNx 0.4.1 (example) | nnx_api (example) |", "|---|---|---|---|"]
    def rank(item):  # open first, then not yet matched, then deliberate differences, then typed errors
        status, reason = item[0]
        if status == "UNEXPLAINED":
            return 0
        return next((i for i, p in enumerate(("open", "not yet matched", "typed error"), 1) if reason.startswith(p)), 2.5)

    for (status, reason), rows in sorted(groups.items(), key=rank):
        by_scen: dict[str, list[str]] = {}
        for scen, key, _, _ in rows:
            by_scen.setdefault(scen, []).append(key)
        where = "; ".join(f"`{s}`: " + ", ".join(f"`{k}`" for k in keys[:4]) + (f" (+{len(keys) - 4})" if len(keys) > 4 else "")
                          for s, keys in by_scen.items())
        _, _, a, b = rows[0]
        cell = lambda v: short(v, 40).replace("|", "\\|")  # noqa: E731
        lines.append(f"| **{status}**: {reason} | {where} | `{cell(a)}` | `{cell(b)}` |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nnx-python", default=str(ROOT / ".venv-nnx/bin/python"))
    ap.add_argument("--ours-python", default=str(ROOT / ".venv/bin/python"))
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per scenario")
    ap.add_argument("--batch", action="store_true", help="one subprocess per package instead of per scenario")
    ap.add_argument("--record", nargs="?", const=str(RECORDED), metavar="FILE",
                    help=f"write NNx's observations to FILE (default {RECORDED.relative_to(ROOT)})")
    ap.add_argument("--against-recorded", action="store_true", help="compare with the recorded file; no NNx needed")
    ap.add_argument("--json", metavar="FILE", help="also write the differences as JSON")
    ap.add_argument("--markdown", metavar="FILE", help="also write the differences grouped by disposition "
                    "as a Markdown table (the one in docs/nnx-compat.md)")
    ap.add_argument("names", nargs="*", help="scenarios (default: all)")
    args = ap.parse_args()
    names = args.names or scenario_names()
    start = time.perf_counter()
    if args.against_recorded:
        recorded = json.loads(RECORDED.read_text())["scenarios"]
        theirs = {n: recorded[n] for n in names if n in recorded}
    else:
        theirs = run_scenarios(args.nnx_python, "nnx", names, args.timeout, args.batch)
        if args.record:
            Path(args.record).write_text(json.dumps(
                {"package": "thekaveh-nnx==0.4.1", "scenarios": theirs}, indent=1, sort_keys=True) + "\n")
            print(f"recorded NNx's observations of {len(theirs)} scenarios to {args.record}")
    ours = run_scenarios(args.ours_python, "nnx_api", names, args.timeout, args.batch)
    n_scen, n_obs, diffs = compare(theirs, ours)
    _, unexplained = report(n_scen, n_obs, diffs)
    if args.json:
        Path(args.json).write_text(json.dumps([dict(zip(("scenario", "observable", "nnx", "ours"), d, strict=True))
                                               for d in diffs], indent=1, default=repr))
    if args.markdown:
        Path(args.markdown).write_text(markdown(diffs))
    print(f"({time.perf_counter() - start:.1f} s)")
    return 1 if unexplained or unused_kept(diffs) else 0


if __name__ == "__main__":
    sys.exit(main())
