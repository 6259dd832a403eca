"""bf16 and fp16 on CUDA: the capability rule, autocast runs, fp16 overflow skips, the loss scale on resume."""

from __future__ import annotations

import pytest
import torch
from gpu_support import DEVICE, GPU, CrashAtEpoch, as_new_process, finite, gain_batches, gain_model, mlp_job, same_state

import nnx_api as nnx

pytestmark = GPU

INIT_SCALE, BACKOFF = 2.0**16, 0.5  # torch.amp.GradScaler's defaults: the scale halves at every skipped step


def bf16_native() -> bool:
    return torch.cuda.get_device_capability(DEVICE) >= (8, 0)


def test_bf16_on_cuda_follows_the_compute_capability_rule():
    policy = nnx.PrecisionPolicy(mode="bf16")
    if bf16_native():
        model, _ = mlp_job(1, precision=policy)
        assert model.precision == "bf16"
    else:
        with pytest.raises(nnx.PrecisionUnsupportedError, match="compute capability"):
            mlp_job(1, precision=policy)
    fallback, _ = mlp_job(1, precision=nnx.PrecisionPolicy(mode="bf16", fallback="fp32"))
    assert fallback.precision == ("bf16" if bf16_native() else "fp32")


@pytest.mark.parametrize("mode", ["bf16", "fp16"])
def test_a_mixed_precision_cuda_run_tracks_fp32_and_keeps_float32_parameters(runs, mode):
    """REFERENCE §8.5 tolerances against fp32: loss 5e-2 (bf16), 5e-3 (fp16)."""
    if mode == "bf16" and not bf16_native():
        pytest.skip(f"bf16 is refused below compute capability 8.0 (this GPU: {torch.cuda.get_device_capability()})")
    full_model, params = mlp_job(3, dropout=0.0)
    full = full_model.train(params, root=runs / "fp32")
    mixed_model, params = mlp_job(3, dropout=0.0, precision=nnx.PrecisionPolicy(mode=mode))
    mixed = mixed_model.train(params, root=runs / mode)
    assert mixed_model.precision == mode
    assert all(p.dtype == torch.float32 and p.device.type == "cuda" for p in mixed_model.net.parameters())
    assert all(finite(i.train_edp.loss) for i in mixed.idps)
    tolerance = 5e-2 if mode == "bf16" else 5e-3
    assert abs(full.idps[-1].val_edp.loss - mixed.idps[-1].val_edp.loss) < tolerance
    payload = mixed.checkpoint("last").payload()
    assert ("scaler" in payload["optimizer"]) == (mode == "fp16")  # only fp16 scales its loss


def update_clock(n_epochs: int, batches: int = 6) -> nnx.NNSchedulerParams:
    return nnx.NNSchedulerParams(kind=nnx.Schedulers.LINEAR_WARMUP_DECAY, warmup_steps=3,
                                 total_steps=n_epochs * batches, clock="optimizer_update")


class Updates(nnx.Callback):
    """The (epoch, batch) of every committed optimizer update."""

    def __init__(self) -> None:
        self.at: list[tuple[int, int]] = []

    def on_optimizer_update(self, ctx, event) -> None:
        self.at.append((event.epoch_idx, event.batch_idx))


def test_an_fp16_overflow_skips_the_update_and_does_not_tick_the_update_clock(runs):
    poisoned, epochs = 2, 2
    sgd = nnx.NNOptimParams(name=nnx.Optims.SGD, max_lr=0.1, momentum=0.0)
    model, updates, lrs = gain_model("fp16"), Updates(), nnx.LRMonitor()
    run = model.train(nnx.NNTrainParams(n_epochs=epochs, optim=sgd, scheduler=update_clock(epochs), progress=False,
                                        train_loader=gain_batches(poisoned)), callbacks=[updates, lrs], root=runs / "fp16")
    ordinary = [b for b in range(6) if b != poisoned]
    assert updates.at == [(e, b) for e in range(epochs) for b in ordinary]  # the overflowing batch committed nothing
    seen = model.net.seen  # parameters at every training forward: batch k's forward sees the updates before it
    for e in range(epochs):
        k = 6 * e + poisoned
        assert torch.equal(seen[k + 1], seen[k]), f"the overflowing batch {k} changed the parameters"
        assert not torch.equal(seen[k], seen[k - 1]), "an ordinary batch must change them (else this test is blind)"
    payload = run.checkpoint("last").payload()
    assert payload["components"]["nnx.scheduler_clock"]["ticks"] == len(ordinary) * epochs
    assert payload["optimizer"]["scaler"]["scale"] == INIT_SCALE * BACKOFF**epochs

    # the schedule advanced exactly as in a run where the overflowing batch never existed
    reference, reference_lrs = gain_model("fp32"), nnx.LRMonitor()
    reference.train(nnx.NNTrainParams(n_epochs=epochs, optim=sgd, scheduler=update_clock(epochs), progress=False,
                                      train_loader=gain_batches(poisoned, drop=True)), callbacks=[reference_lrs],
                    root=runs / "reference")
    assert lrs.update_history == reference_lrs.update_history


def test_the_fp16_loss_scale_is_restored_on_resume(runs, deterministic):
    """One overflow per epoch halves the scale each epoch: a resume that restarted the scaler at its
    initial scale would end epoch 2 at 2**15 instead of 2**13."""

    def job():
        params = nnx.NNTrainParams(n_epochs=3, seed=0, resume="auto", progress=False, train_loader=gain_batches(2))
        return gain_model("fp16"), params

    model, params = job()
    straight = model.train(params, root=runs / "straight")
    assert straight.checkpoint("last").payload()["optimizer"]["scaler"]["scale"] == INIT_SCALE * BACKOFF**3

    crashed, params = job()
    with pytest.raises(RuntimeError, match="simulated crash"):
        crashed.train(params, callbacks=[CrashAtEpoch(2)], root=runs / "resumed")
    as_new_process()
    resumed_model, params = job()
    resumed = resumed_model.train(params, root=runs / "resumed")
    assert resumed.id == straight.id and resumed.resume_status["source_epoch"] == 1
    assert resumed.checkpoint("last").payload()["optimizer"]["scaler"]["scale"] == INIT_SCALE * BACKOFF**3
    assert same_state(resumed.checkpoint("last").weights(), straight.checkpoint("last").weights())
