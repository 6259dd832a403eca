"""fp16 and batch normalization under ``DDP()`` on CUDA (``ddp_fp16_norm.py``) as a test: a real
process, a world-size-1 nccl group, with a hard timeout."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch.distributed as dist
from gpu_support import GPU

pytestmark = [*GPU, pytest.mark.timeout(150)]

SCRIPT = Path(__file__).with_name("ddp_fp16_norm.py")
ROOT = Path(__file__).resolve().parents[2]


def test_fp16_and_batch_norm_train_skip_alike_and_resume_under_ddp_on_nccl(tmp_path):
    if not dist.is_nccl_available():  # checked after the CUDA skip, so a CPU machine shows one reason
        pytest.skip("this torch build has CUDA but no NCCL")
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env.pop("NNX_GPU_SCRIPT_ON_CPU", None)
    done = subprocess.run([sys.executable, str(SCRIPT)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "DDP fp16 + batch norm: OK" in done.stdout, done.stdout
