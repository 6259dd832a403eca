"""Which precision modes a device runs (``nnx_adapters.pytorch.devices``), with the CUDA queries faked.

The rule (REFERENCE §8.5): fp32 everywhere; bf16 on the CPU and on CUDA of compute capability
8.0 or newer; fp16 on CUDA only. ``tests/gpu/test_gpu_precision.py`` checks the same rule on a real GPU.
"""

from __future__ import annotations

import pytest
import torch

from nnx_adapters.pytorch import devices


@pytest.fixture
def gpu(monkeypatch):
    """A fake machine with CUDA devices of the given capabilities (index → (major, minor))."""

    def install(capabilities: dict[int, tuple[int, int]], current: int = 0) -> None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: bool(capabilities))
        monkeypatch.setattr(torch.cuda, "current_device", lambda: current)
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index=None: capabilities[index])

    return install


@pytest.mark.parametrize(
    ("capability", "native"),
    [((7, 0), False), ((7, 5), False), ((8, 0), True), ((8, 6), True), ((9, 0), True), ((12, 0), True)],
)
def test_bf16_runs_on_cuda_from_compute_capability_8_0(gpu, capability, native):
    gpu({0: capability})
    assert devices.bf16_supported(torch.device("cuda", 0)) is native
    assert devices.bf16_supported(torch.device("cuda")) is native  # no index: the current device
    problem = devices.precision_problem("bf16", torch.device("cuda", 0))
    assert (problem is None) is native
    if not native:
        assert f"{capability[0]}.{capability[1]}" in problem and "8.0" in problem


def test_the_capability_asked_is_the_devices_own(gpu):
    gpu({0: (7, 5), 1: (8, 0)}, current=1)
    assert devices.bf16_supported(torch.device("cuda", 1))
    assert devices.bf16_supported(torch.device("cuda"))  # the current device is 1
    assert not devices.bf16_supported(torch.device("cuda", 0))


def test_the_cpu_runs_bf16_and_fp32_but_not_fp16(gpu):
    gpu({})
    cpu = torch.device("cpu")
    assert devices.bf16_supported(cpu)
    assert devices.precision_problem("bf16", cpu) is None and devices.precision_problem("fp32", cpu) is None
    assert "fp16 needs CUDA" in devices.precision_problem("fp16", cpu)


def test_cuda_runs_fp16_at_any_capability(gpu):
    gpu({0: (6, 1)})
    assert devices.precision_problem("fp16", torch.device("cuda", 0)) is None


def test_no_bf16_on_mps_or_on_a_cuda_device_this_machine_lacks(gpu):
    gpu({})
    assert not devices.bf16_supported(torch.device("mps"))
    assert "not on mps" in devices.precision_problem("bf16", torch.device("mps"))
    assert not devices.bf16_supported(torch.device("cuda", 0))


def test_the_gpu_docs_example_runs(capsys):
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "gpu.md").read_text()
    (snippet,) = re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)
    exec(compile(snippet, "gpu.md", "exec"), {})  # noqa: S102 - our own docs
    assert "fp16 needs CUDA" in capsys.readouterr().out
