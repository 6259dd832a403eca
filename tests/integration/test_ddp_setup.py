"""What each rank was given is agreed before training, on real processes (2 gloo ranks).

Each launch starts ``setup_worker.py`` once per rank, with the default group timeout (30
minutes) as a user's script has, and a hard wall-clock limit of 60 s: a rank left waiting fails
the test instead of hanging it. A mismatch must be refused on every rank within seconds, with the
same typed error naming what differs and each rank's value.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import ddp_common as common
import pytest
import torch

HERE = Path(__file__).resolve().parent
WORKER = HERE / "setup_worker.py"
LAUNCH_TIMEOUT = 60  # seconds for a whole launch (two interpreters importing torch, then one train())
QUICK = 20.0  # seconds a refused train() may take on a rank

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(not torch.distributed.is_available() or not torch.distributed.is_gloo_available(), reason="no gloo"),
]


def launch(mode: str, base: Path, world: int = 2) -> list[dict[str, Any]]:
    """Start one worker per rank; wait (bounded) for all; return what each rank recorded."""
    out, root = base / "out", base / "runs"
    out.mkdir(parents=True, exist_ok=True)
    port = common.free_port()
    logs = [out / f"{mode}_rank{r}.log" for r in range(world)]
    procs = []
    for rank in range(world):
        env = common.rank_env(rank, world, port)
        with open(logs[rank], "w") as log:
            procs.append(subprocess.Popen([sys.executable, str(WORKER), mode, str(out), str(root)], env=env,
                                          stdout=log, stderr=subprocess.STDOUT, cwd=HERE))
    try:
        codes = [p.wait(timeout=LAUNCH_TIMEOUT) for p in procs]
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()
        pytest.fail(f"mode {mode!r}: the ranks hung (no answer within {LAUNCH_TIMEOUT} s):\n"
                    + "\n".join(log.read_text()[-2000:] for log in logs))
    assert codes == [0] * world, "\n".join(log.read_text()[-3000:] for log in logs)
    return [json.loads((out / f"{mode}_rank{r}.json").read_text()) for r in range(world)]


def refused(seen: list[dict[str, Any]]) -> str:
    """Every rank raised the same ParamsError, quickly; its message."""
    errors = [s["error"] for s in seen]
    assert all(e is not None for e in errors), seen
    assert {e["type"] for e in errors} == {"ParamsError"}, errors
    assert len({e["message"] for e in errors}) == 1, errors  # the same message on every rank
    assert all(s["seconds"] < QUICK for s in seen), seen
    return errors[0]["message"]


def test_callback_on_one_rank_is_refused_on_every_rank(tmp_path: Path) -> None:
    message = refused(launch("callbacks", tmp_path))
    assert message.startswith("distributed: "), message
    assert "callbacks: [EarlyStopping(all)] on rank 0, [] on rank 1" in message, message


def test_writer_rank_per_rank_is_refused(tmp_path: Path) -> None:
    message = refused(launch("writer_rank", tmp_path))
    assert "writer_rank: 0 on rank 0, 1 on rank 1" in message, message


def test_seed_per_rank_names_the_configuration_key(tmp_path: Path) -> None:
    message = refused(launch("seed", tmp_path))
    assert "train.seed: 0 on rank 0, 1 on rank 1" in message, message


def test_same_arguments_train(tmp_path: Path) -> None:
    seen = launch("same", tmp_path)
    assert [s["error"] for s in seen] == [None, None], seen
    assert [s["epochs"] for s in seen] == [[0, 1], [0, 1]]  # the EarlyStopping stopped both ranks alike
