"""The NCCL smoke (``nccl_smoke.py``) as a test: a real process, world size 1, with a hard timeout."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch.distributed as dist
from gpu_support import GPU

pytestmark = [*GPU, pytest.mark.timeout(240)]

SCRIPT = Path(__file__).with_name("nccl_smoke.py")
ROOT = Path(__file__).resolve().parents[2]


def test_a_world_size_1_nccl_group_joins_trains_and_shuts_down(tmp_path):
    if not dist.is_nccl_available():  # checked after the CUDA skip, so a CPU machine shows one reason
        pytest.skip("this torch build has CUDA but no NCCL")
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, str(SCRIPT)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "NCCL smoke: OK" in done.stdout, done.stdout
