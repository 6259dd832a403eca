"""Training on CUDA through the public API: where things live, exact resume, and no host sync per batch."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from gpu_support import GPU, CrashAtEpoch, as_new_process, data, finite, mlp_job, same_state
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import nnx_api as nnx

pytestmark = GPU


class WhereInputsGo(nn.Module):
    """An MLP that records the device of every input it sees, in training and in eval mode."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
        self.devices: dict[str, set[torch.device]] = {"train": set(), "eval": set()}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.devices["train" if self.training else "eval"].add(x.device)
        return self.body(x)


def test_model_batches_and_metrics_are_placed_on_the_cuda_device(runs):
    x, y = data()
    net = WhereInputsGo()
    model = nnx.NNModel(module=net, params=nnx.NNModelParams(device=nnx.Devices.CUDA))
    assert model.device.type == "cuda"
    assert {p.device.type for p in model.net.parameters()} == {"cuda"}
    loader = DataLoader(TensorDataset(x, y), batch_size=16)  # CPU tensors: NNx moves every batch
    run = model.train(nnx.NNTrainParams(n_epochs=2, train_loader=loader, val_loader=loader,
                                        metrics=[nnx.MetricSpec("f1")], progress=False), root=runs)
    assert net.devices["train"] == {model.device} and net.devices["eval"] == {model.device}
    assert {p.device.type for p in model.net.parameters()} == {"cuda"}  # still there after training
    last = run.idps[-1]
    for record in (last.train_edp, last.val_edp):  # metrics come back to the host as plain floats
        assert type(record.loss) is float and finite(record.loss) and finite(record.accuracy)
    assert all(type(i.train_edp.loss) is float for i in run.idps)
    scores = model.evaluate(loader)
    assert type(scores.loss) is float and finite(scores.loss)
    logits = model.predict(x).logits  # computed on CUDA, handed back on the host as NNx does (NumPy)
    assert isinstance(logits, np.ndarray) and logits.dtype == np.float32 and logits.shape == (len(x), model.head.width)
    # a checkpoint holds device-neutral tensors: it loads on any host
    assert {t.device.type for t in run.checkpoint("last").weights().values()} == {"cpu"}


def test_a_three_epoch_cuda_run_resumes_bit_identically_with_the_cuda_rng_restored(runs, deterministic):
    """Dropout draws from the CUDA generator; the resumed epoch must draw what the straight run drew."""
    model, params = mlp_job(3, resume="auto")
    straight = model.train(params, root=runs / "straight")
    straight_weights = {k: v.detach().clone() for k, v in model.net.state_dict().items()}

    crashed, params = mlp_job(3, resume="auto")
    with pytest.raises(RuntimeError, match="simulated crash"):
        crashed.train(params, callbacks=[CrashAtEpoch(2)], root=runs / "resumed")
    assert nnx.NNRun.load(straight.id, runs / "resumed").checkpoint("last").epoch == 1
    as_new_process()  # a new process would start with other CUDA (and CPU) RNG states

    resumed_model, params = mlp_job(3, resume="auto")
    resumed = resumed_model.train(params, root=runs / "resumed")
    assert resumed.id == straight.id and resumed.resume_status["mode"] == "stateful"
    assert same_state(resumed_model.net.state_dict(), straight_weights)
    assert same_state(resumed.checkpoint("last").weights(), straight.checkpoint("last").weights())
    assert [i.train_edp.loss for i in resumed.idps] == [i.train_edp.loss for i in straight.idps]
    assert [i.val_edp.loss for i in resumed.idps if i.val_edp] == [i.val_edp.loss for i in straight.idps if i.val_edp]


def synchronizing_calls(batches: int, root) -> int:
    """How many synchronizing CUDA operations one 2-epoch ``train()`` makes with ``batches`` per epoch."""
    x, y = data(n=8 * batches)
    model = nnx.NNModel(nnx.NNParams(input_dim=16, output_dim=4, hidden_dims=(32,)),
                        nnx.NNModelParams(device=nnx.Devices.CUDA))
    params = nnx.NNTrainParams(n_epochs=2, train_loader=DataLoader(TensorDataset(x, y), batch_size=8),
                               val_loader=DataLoader(TensorDataset(x[:16], y[:16]), batch_size=8), progress=False)
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            model.train(params, root=root)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return sum("synchronizing" in str(w.message) for w in caught)


def test_training_does_not_synchronize_with_the_host_per_batch(runs):
    """Per-epoch reads (records, validation, the commit) are allowed; per-batch ones are not, so
    the count must not grow with the number of batches in an epoch. (A first call pays one-time
    CUDA set-up; it is not counted.)"""
    synchronizing_calls(4, runs / "warm-up")
    few, many = synchronizing_calls(4, runs / "few"), synchronizing_calls(16, runs / "many")
    assert many == few, f"{few} synchronizing calls with 4 batches per epoch, {many} with 16"


def test_asynchronous_and_synchronous_commits_write_the_same_files_on_cuda(runs, deterministic):
    """The background writer stages CUDA tensors into pinned host buffers (a side stream); a
    synchronous commit stages them too: both checkpoints hold host tensors, byte for byte alike."""
    import hashlib

    def files(root):
        return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*"))
                if p.is_file() and ".leases" not in p.parts and p.name != "attempt.json"}

    for async_commits in (True, False):
        model, params = mlp_job(3, async_commits=async_commits, commit_every=2)
        model.train(params, root=runs / str(async_commits))
    assert files(runs / "True") == files(runs / "False")
