"""A run's precision record (``NNRun.precision``): the model's resolution, narrowed to the surfaces
the run applied it to — the built-in step and objectives of ``NNModel.train``, a ``Trainer``
objective, ``evaluate`` and prediction; a step function is its own — kept in ``metadata.yaml`` and
read back the same; the built-in step refusing an fp16 context that has no scaler; and a model
resolving its precision again once its params ask for another."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import yaml

import nnx_api as nnx

from tests.api.tiny import batches, tiny_data

# NNx 0.4.1's names of the surfaces (nnx.precision)
TRAIN, TRAINER_OBJECTIVE = "NNModel.train (default step and objectives)", "Trainer.train(objective=...)"
EVALUATE, PREDICT = "evaluate()", "predict() / predict_proba()"


def model(precision=None):
    torch.manual_seed(0)
    return nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(8,)), nnx.NNModelParams(precision=precision))


def train_params():
    x, y = tiny_data(n=16)
    return nnx.NNTrainParams(n_epochs=1, optim=nnx.NNOptimParams(name=nnx.Optims.SGD, max_lr=0.1, momentum=0.0),
                             train_loader=batches(x, y, 8), save_phase_checkpoints=False, progress=False)


def trainer_params():
    x, y = tiny_data(n=16)
    return nnx.NNTrainerParams(n_epochs=1, train_loader=batches(x, y, 8), save_phase_checkpoints=False, progress=False,
                               optims={"main": nnx.NNOptimParams(name=nnx.Optims.SGD, max_lr=0.1, momentum=0.0)})


def own_step(ctx):
    return nnx.default_train_step(ctx)


def silent_step(ctx):
    return nnx.NNEvaluationDataPoint(loss=0.0)


@pytest.mark.parametrize(
    ("route", "covers"),
    [
        ("default step", (TRAIN, EVALUATE, PREDICT)),
        ("objective", (TRAIN, EVALUATE, PREDICT)),
        ("train_step_fn", (EVALUATE, PREDICT)),
        ("Trainer objective", (TRAINER_OBJECTIVE, EVALUATE, PREDICT)),
        ("trainer_step_fn", (EVALUATE, PREDICT)),
    ],
)
def test_a_run_records_the_surfaces_it_applied_its_precision_to(runs, route, covers):
    bf16 = model(nnx.PrecisionPolicy("bf16"))
    if route == "default step":
        run = bf16.train(train_params(), root=runs)
    elif route == "objective":
        run = bf16.train(train_params(), objective=nnx.supervised_objective(), root=runs)
    elif route == "train_step_fn":
        run = bf16.train(train_params(), train_step_fn=own_step, root=runs)
    elif route == "Trainer objective":
        run = nnx.Trainer(bf16).train(trainer_params(), objective=nnx.supervised_objective(), root=runs)
    else:
        run = nnx.Trainer(bf16).train(trainer_params(), trainer_step_fn=silent_step, root=runs)
    assert run.precision.covers == covers and run.precision.effective == "bf16"
    assert bf16.resolved_precision.covers is None  # the model's own resolution is not narrowed
    record = run.precision.record()
    assert record["covers"] == list(covers)
    assert record["not_covered"] == [s for s in (TRAIN, TRAINER_OBJECTIVE, EVALUATE, PREDICT) if s not in covers] + [
        "nnx.lr_finder", "nnx.diffusion.sampling", "generation"]
    assert nnx.NNRun.load(id=run.id, root=runs).precision.record() == record


def test_metadata_keeps_the_record_as_before_plus_what_it_covers(runs):
    run = model(nnx.PrecisionPolicy("fp16", fallback="fp32")).train(train_params(), root=runs)
    (meta,) = runs.glob(f"{run.id}/metadata.yaml")
    written = yaml.safe_load(meta.read_text())["precision"]
    assert written == {
        "requested": "fp16", "effective": "fp32", "device_type": "cpu", "source": "policy",
        "fallback_reason": run.precision.fallback_reason, "covers": [TRAIN, EVALUATE, PREDICT],
    }
    assert "fp16" in written["fallback_reason"] and "CUDA" in written["fallback_reason"]


def test_an_fp16_context_without_a_scaler_is_refused_before_the_forward():
    net = model()
    seen = []
    net.net.register_forward_hook(lambda *_: seen.append(1))
    before = [p.detach().clone() for p in net.net.parameters()]
    x, y = tiny_data(n=4)
    fp16 = nnx.ResolvedPrecision("fp16", "fp16", "cpu", "policy")
    for precision in (fp16, "fp16"):
        ctx = nnx.TrainStepContext(model=net, batch=(x, y), optimizer=torch.optim.SGD(net.net.parameters(), lr=0.1),
                                   scaler=None, grad_clip_norm=None, extra_metrics=None, accumulate_grad_batches=1,
                                   batch_idx=0, epoch_idx=0, precision=precision)
        with pytest.raises(ValueError, match="fp16 trains through a GradScaler"):
            nnx.default_train_step(ctx)
    assert seen == [] and all(torch.equal(a, b) for a, b in zip(before, net.net.parameters(), strict=True))


def test_reassigned_params_are_resolved_again_before_the_next_forward(runs):
    net = model(nnx.PrecisionPolicy("fp16", fallback="fp32"))
    assert net.resolved_precision.effective == "fp32"
    net.net.train()
    net.params = dataclasses.replace(net.params, precision=nnx.PrecisionPolicy("fp16"))  # no fallback on the CPU now
    x, y = tiny_data(n=4)
    for call in (lambda: net.predict(x), lambda: net.evaluate([(x, y)])):
        with pytest.raises(nnx.PrecisionUnsupportedError, match="fp16 needs CUDA"):
            call()
        assert net.net.training  # refused before any mode was switched
    net.params = dataclasses.replace(net.params, precision=nnx.PrecisionPolicy("bf16"))
    dtypes = []
    net.net.register_forward_hook(lambda _m, _i, out: dtypes.append(out.dtype))
    net.predict(x)
    assert dtypes == [torch.bfloat16] and net.precision == "bf16"
    assert net.train(train_params(), root=runs).precision.effective == "bf16"
