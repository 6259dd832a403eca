"""Run scenarios under one package and write what each observed as JSON (used by diff.py).

    NNX_PACKAGE=nnx python bench/compat/_run.py --out DIR [--timeout S] NAME...

Every scenario runs in its own fresh temporary working directory (so its ``runs/`` is private),
seeded, on one CPU thread; one that raises or runs past its timeout is recorded as ``_aborted``
with what it had observed so far.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import os
import signal
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path

SCENARIOS = Path(__file__).resolve().parent / "scenarios"


class ScenarioTimeout(Exception):
    pass


def _alarm(signum, frame):  # noqa: ARG001
    raise ScenarioTimeout()


def run_one(name: str, timeout: float) -> dict:
    from _observe import Obs, error, seed  # type: ignore[import-not-found]

    obs = Obs()
    start = time.perf_counter()
    cwd = os.getcwd()
    with tempfile.TemporaryDirectory(prefix=f"compat-{name}-") as tmp:
        os.chdir(tmp)
        signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, timeout)
        try:
            seed(0)
            spec = importlib.util.spec_from_file_location(f"scenario_{name}", SCENARIOS / f"{name}.py")
            module = importlib.util.module_from_spec(spec)
            with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
                warnings.simplefilter("ignore")
                spec.loader.exec_module(module)
                module.observe(obs)
        except ScenarioTimeout:
            obs["_aborted"] = {"raised": "timeout", "bases": []}
        except Exception as exc:  # noqa: BLE001
            obs["_aborted"] = error(exc)
            frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename.endswith(f"{name}.py")]
            if frames:  # where the scenario stopped (a line of the scenario file)
                obs["_aborted_at"] = f"{name}.py:{frames[-1].lineno}"
            traceback.print_exc()
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            os.chdir(cwd)
    return {"observed": obs.data, "seconds": round(time.perf_counter() - start, 2)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("names", nargs="+")
    args = ap.parse_args()
    os.environ.setdefault("NNX_TQDM_DISABLE", "1")
    sys.path.insert(0, str(SCENARIOS))
    import torch

    torch.set_num_threads(1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name in args.names:
        result = run_one(name, args.timeout)
        (out / f"{name}.json").write_text(json.dumps(result, indent=1, sort_keys=True, default=repr))


if __name__ == "__main__":
    main()
