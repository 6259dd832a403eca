"""CUDA and CPU agree: a CUDA-trained run loads on a CPU-only host, and predictions match within float32's bound."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gpu_support import GPU, data, mlp_job, probability_tolerance

import nnx_api as nnx

pytestmark = GPU


def test_a_cuda_trained_run_loads_on_a_cpu_only_host_with_device(runs, monkeypatch):
    """``NNModel.from_checkpoint(checkpoint, device=None, **kw)`` (REFERENCE §3.2): the device is
    overridable, so a run trained on CUDA rebuilds on a host without one."""
    trained, params = mlp_job(3)
    run = trained.train(params, root=runs)
    x, _ = data()
    spec = nnx.ProbabilitySpec("categorical")
    on_gpu = trained.predict_proba(x, spec).probabilities  # NumPy on the host, as NNx returns

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # from here on: a CPU-only host
    with pytest.raises(nnx.NNxError):  # the recorded device is refused with a typed error, not a CUDA crash
        nnx.NNModel.from_checkpoint(run.id, "last", root=runs)
    loaded = nnx.NNModel.from_checkpoint(run.id, "last", root=runs, device="cpu")
    assert loaded.device == torch.device("cpu")
    assert {p.device.type for p in loaded.net.parameters()} == {"cpu"}
    for name, value in trained.net.state_dict().items():
        assert torch.equal(loaded.net.state_dict()[name], value.cpu()), name
    on_cpu = loaded.predict_proba(x, spec).probabilities
    assert np.abs(on_cpu - on_gpu).max() <= probability_tolerance(loaded.net, x)


def test_predict_proba_on_cuda_equals_the_cpu_within_the_float32_bound(deterministic):
    """Same weights, same inputs, fp32 on both: the probabilities may differ only by rounding,
    bounded from float32's epsilon and each layer's reduction size (``probability_tolerance``).
    The bound is tight enough to catch a lower-precision kernel: bf16 on the CPU breaks it."""
    x = torch.randn(512, 64, generator=torch.Generator().manual_seed(3))
    nnx.set_seed(0)
    net_params = nnx.NNParams(input_dim=64, output_dim=10, hidden_dims=(64,))
    cpu = nnx.NNModel(net_params, nnx.NNModelParams(device=nnx.Devices.CPU))
    gpu = nnx.NNModel(net_params, nnx.NNModelParams(device=nnx.Devices.CUDA))
    bf16 = nnx.NNModel(net_params, nnx.NNModelParams(device=nnx.Devices.CPU, precision=nnx.PrecisionPolicy(mode="bf16")))
    gpu.net.load_state_dict(cpu.net.state_dict())
    bf16.net.load_state_dict(cpu.net.state_dict())
    spec = nnx.ProbabilitySpec("categorical")
    on_cpu, on_gpu = cpu.predict_proba(x, spec), gpu.predict_proba(x, spec)
    assert isinstance(on_gpu.probabilities, np.ndarray) and on_gpu.probabilities.dtype == np.float32  # on the host
    tolerance = probability_tolerance(cpu.net, x)
    assert float(np.abs(bf16.predict_proba(x, spec).probabilities - on_cpu.probabilities).max()) > tolerance
    difference = float(np.abs(on_gpu.probabilities - on_cpu.probabilities).max())
    assert difference <= tolerance, f"CUDA and CPU probabilities differ by {difference:.3g} > {tolerance:.3g}"
    assert on_gpu.sample_ids.tolist() == on_cpu.sample_ids.tolist() == list(range(len(x)))
