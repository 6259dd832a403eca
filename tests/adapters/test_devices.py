"""Which precision modes a device runs (``nnx_adapters.pytorch.devices``), with the CUDA queries faked.

The rule (REFERENCE §8.5): fp32 everywhere; bf16 on the CPU and on CUDA of compute capability
8.0 or newer; fp16 on CUDA only. ``tests/gpu/test_gpu_precision.py`` checks the same rule on a real GPU.
"""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import pytest
import torch

from nnx_core.precision import ResolvedPrecision
from nnx_adapters.pytorch import devices
from nnx_adapters.pytorch.precision import tf32_settings


@pytest.fixture
def gpu(monkeypatch):
    """A fake machine with CUDA devices of the given capabilities (index → (major, minor)): the
    queries torch answers on a real one — device count, the current device (``torch.cuda.device``
    switches it), the capability, and ``is_bf16_supported`` read as torch documents it (native
    from capability 8.0; below, only emulated, which ``including_emulation=False`` does not count)."""

    def install(capabilities: dict[int, tuple[int, int]], current: int = 0) -> None:
        state = {"current": current}

        @contextlib.contextmanager
        def device(index):
            previous, state["current"] = state["current"], index
            try:
                yield
            finally:
                state["current"] = previous

        def is_bf16_supported(including_emulation: bool = True) -> bool:
            return capabilities[state["current"]][0] >= 8 or including_emulation

        monkeypatch.setattr(torch.cuda, "is_available", lambda: bool(capabilities))
        monkeypatch.setattr(torch.cuda, "device_count", lambda: len(capabilities))
        monkeypatch.setattr(torch.cuda, "current_device", lambda: state["current"])
        monkeypatch.setattr(torch.cuda, "device", device)
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", is_bf16_supported)
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


def policy(mode: str, fallback: str = "error") -> SimpleNamespace:
    """What the resolution reads of a ``PrecisionPolicy``."""
    return SimpleNamespace(mode=mode, fallback=fallback)


def test_bf16_is_asked_of_the_requested_devices_own_support(gpu):
    gpu({0: (7, 0), 1: (8, 0)}, current=0)  # a V100 beside an A100: only the second is native
    assert devices.precision_problem("bf16", torch.device("cuda", 1)) is None
    problem = devices.precision_problem("bf16", torch.device("cuda", 0))
    assert "native bf16 support, not emulation" in problem and "7.0" in problem
    assert torch.cuda.current_device() == 0  # the question left the current device as it was


def test_a_cuda_ordinal_this_machine_lacks_runs_nothing(gpu):
    gpu({0: (8, 0)})
    missing = torch.device("cuda", 3)
    for mode in ("fp32", "fp16", "bf16"):
        assert "cuda:3 does not exist on this host (1 CUDA device(s))" in devices.precision_problem(mode, missing)
    assert devices.resolve_precision(policy("bf16", "fp32"), False, missing).effective == "fp32"


def test_a_cuda_request_without_cuda_is_refused_for_a_reduced_mode(gpu):
    gpu({})
    for mode in ("fp16", "bf16"):
        assert "CUDA is not available on this host" in devices.precision_problem(mode, torch.device("cuda"))
    assert devices.precision_problem("fp32", torch.device("cuda")) is None  # fp32 is no precision question


def test_the_torch_runtime_builds_the_autocast_the_scaler_and_full_precision_outputs():
    bf16 = devices.resolve_precision(policy("bf16"), False, "cpu")
    assert bf16.autocast_dtype is torch.bfloat16 and bf16.build_scaler() is None
    layer = torch.nn.Linear(2, 2)
    with bf16.autocast():
        out = layer(torch.ones(1, 2))
    assert out.dtype is torch.bfloat16 and bf16.output(out).dtype is torch.float32  # plain torch autocast
    fp16 = ResolvedPrecision("fp16", "fp16", "cpu", "policy")
    assert fp16.autocast_dtype is torch.float16 and isinstance(fp16.build_scaler(), torch.amp.GradScaler)


def test_tf32_is_read_as_torch_is_set_and_never_changed(monkeypatch):
    class NewApi:  # torch 2.9 after `fp32_precision = "tf32"`: the legacy read raises
        fp32_precision = "tf32"

        @property
        def allow_tf32(self):
            raise RuntimeError("mix of the legacy and new APIs")

    class Cudnn(NewApi):  # per-op settings win over the top level
        fp32_precision = "none"
        conv = SimpleNamespace(fp32_precision="tf32")
        rnn = SimpleNamespace(fp32_precision="ieee")

    monkeypatch.setattr(torch.backends.cuda, "matmul", NewApi())
    monkeypatch.setattr(torch.backends, "cudnn", Cudnn())
    assert tf32_settings() == {"cuda_matmul": True, "cudnn_conv": True, "cudnn_rnn": False}
    monkeypatch.setattr(torch.backends, "cudnn", SimpleNamespace(allow_tf32=False))  # the legacy switch alone
    assert tf32_settings()["cudnn_conv"] is False
    monkeypatch.setattr(torch.backends, "cudnn", SimpleNamespace(fp32_precision="none"))  # nothing says: unreadable
    assert tf32_settings()["cudnn_rnn"] is None
