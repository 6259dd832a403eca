"""NNx compatibility of the configuration layer, written from NNx's documentation (REFERENCE §1,
§2.8, §2.9, §8.4, §8.5): params are frozen keyword-only dataclasses (``dataclasses.replace``
works), the fluent builders, positional specs, enum factories and ``extra_metrics``."""

from __future__ import annotations

import dataclasses
import os

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import nnx_api as nnx

EXAMPLES = 300 if os.environ.get("NNX_DEEP") == "1" else 30


# ------------------------------------------------------------------------------ positional specs
def test_specs_take_their_first_fields_positionally():
    assert nnx.MonitorSpec("loss") == nnx.MonitorSpec(metric="loss")
    assert nnx.MonitorSpec("f1", "train", "max") == nnx.MonitorSpec(metric="f1", split="train", mode="max")
    assert nnx.MetricSpec("nll") == nnx.MetricSpec(id="nll")
    assert nnx.MetricSpec("f1", 1, {"average": "micro"}, "f1_micro").label == "f1_micro"
    assert nnx.PrecisionPolicy("bf16") == nnx.PrecisionPolicy(mode="bf16")
    assert nnx.PrecisionPolicy("fp16", "fp32").fallback == "fp32"
    assert nnx.MetricSpec("nll", config=None).state() == {"id": "nll", "version": 1}


def test_loss_term_takes_name_numerator_denominator_reduction_weight_positionally():
    """REFERENCE §4.5: ``LossTerm(name, numerator, denominator=None, reduction="mean", weight=1.0)``."""
    term = nnx.LossTerm("ce", torch.tensor(8.0), 2, "mean", 0.5)
    assert (term.name, term.denominator, term.reduction, term.weight) == ("ce", 2, "mean", 0.5)
    assert term.value == 4.0
    assert nnx.LossTerm("sq", torch.tensor(9.0), None, "sum").value == 9.0
    with pytest.raises(nnx.ParamsError):
        nnx.LossTerm("sq", torch.tensor(9.0), 3, "sum")  # a sum term takes no denominator


def test_dataclasses_replace_on_params():
    train = nnx.NNTrainParams(n_epochs=3, optim=nnx.NNOptimParams(max_lr=1e-3))
    longer = dataclasses.replace(train, n_epochs=10)
    assert longer.n_epochs == 10 and longer.optim == train.optim and train.n_epochs == 3
    assert dataclasses.replace(nnx.MonitorSpec("loss"), split="train").split == "train"
    assert nnx.NNTrainParams.from_state(longer.state()) == longer


# ------------------------------------------------------------------------------------- enums
def test_enums_are_lowercase_strings_and_factories():
    assert str(nnx.Optims.ADAM) == "adam" and str(nnx.Schedulers.ONE_CYCLE) == "one_cycle"
    assert nnx.Devices.CPU() == torch.device("cpu")
    assert isinstance(nnx.Losses.BINARY_CROSS_ENTROPY(), torch.nn.BCEWithLogitsLoss)
    assert isinstance(nnx.Activations.TANH(), torch.nn.Tanh)


def test_extra_metrics_live_on_both_train_params_and_never_in_the_state():
    metrics = {"mae": lambda y_true, y_pred: float((y_true - y_pred).abs().mean())}
    train = nnx.NNTrainParams(n_epochs=1, extra_metrics=metrics)
    trainer = nnx.NNTrainerParams(n_epochs=1, optims={"main": nnx.NNOptimParams()}, extra_metrics=metrics)
    assert set(train.extra_metrics) == set(trainer.extra_metrics) == {"mae"}
    assert "extra_metrics" not in train.state() and "extra_metrics" not in trainer.state()


# ---------------------------------------------------------------------------------- builders
def test_optim_builder_variants_map_betas_onto_momentum():
    built = nnx.NNOptimParams.builder().adam(max_lr=1e-3, betas=(0.8, 0.99), weight_decay=1e-4).build()
    assert built == nnx.NNOptimParams(name=nnx.Optims.ADAM, max_lr=1e-3, momentum=(0.8, 0.99), weight_decay=1e-4)
    sgd = nnx.NNOptimParams.builder().sgd_nesterov(max_lr=0.1, momentum=0.8).build()
    assert sgd.name is nnx.Optims.SGD_NESTEROV and sgd.momentum == 0.8
    assert nnx.NNOptimParams.builder().adamw(max_lr=1e-3).build().weight_decay == 1e-2
    assert nnx.NNOptimParams.builder().adam_amsgrad(max_lr=1e-3).build().name is nnx.Optims.ADAM_AMSGRAD


def test_setters_return_the_builder_and_modifiers_survive_a_variant_change():
    builder = nnx.NNOptimParams.builder()
    assert builder.grad_clip(1.0) is builder and builder.sgd(max_lr=0.1) is builder
    built = builder.accumulate_grad(4).adam(max_lr=1e-3).build()  # the last variant wins
    assert (built.name, built.momentum, built.grad_clip_norm, built.accumulate_grad_batches) == \
        (nnx.Optims.ADAM, (0.9, 0.999), 1.0, 4)
    schedule = nnx.NNSchedulerParams.builder().clock("optimizer_update").step(step_size=3).cosine_annealing(T_max=9)
    built = schedule.build()
    assert (built.kind, built.T_max, built.step_size, built.clock) == \
        (nnx.Schedulers.COSINE_ANNEALING, 9, None, "optimizer_update")


def test_only_touched_fields_are_forwarded_so_the_state_matches_hand_written_params():
    optim = nnx.NNOptimParams.builder().adam(max_lr=1e-2).build()
    assert optim.state() == nnx.NNOptimParams(max_lr=1e-2).state()
    assert "grad_clip_norm" not in optim.state() and "eps" not in optim.state()
    plateau = nnx.NNSchedulerParams.builder().reduce_on_plateau(min_lr=1e-7, factor=0.5, patience=3, cooldown=1,
                                                                threshold=1e-3).build()
    assert plateau.state() == nnx.NNSchedulerParams(min_lr=1e-7, factor=0.5, patience=3, cooldown=1,
                                                    threshold=1e-3).state()
    assert "kind" not in plateau.state()


def test_builders_are_variant_gated():
    with pytest.raises(nnx.ParamsError, match=r"\.adam\(\.\.\.\)"):
        nnx.NNOptimParams.builder().grad_clip(1.0).build()
    with pytest.raises(nnx.ParamsError, match=r"\.reduce_on_plateau\(\.\.\.\)"):
        nnx.NNSchedulerParams.builder().clock("epoch").build()
    with pytest.raises(nnx.ParamsError, match="patiance"):
        nnx.NNSchedulerParams.builder().step(step_size=2, patiance=3)


def test_trainer_builder_composes_named_optimizers_and_checks_at_build():
    gen = nnx.NNOptimParams.builder().adam(max_lr=2e-4, betas=(0.5, 0.999)).build()
    disc = nnx.NNOptimParams.builder().sgd(max_lr=1e-2).build()
    cosine = nnx.NNSchedulerParams.builder().cosine_annealing(T_max=5).build()
    loader = [(torch.zeros(2, 3), torch.zeros(2, dtype=torch.long))]
    built = (nnx.NNTrainerParams.builder().n_epochs(5).optimizer("gen", gen).optimizer("disc", disc)
             .scheduler("gen", cosine).seed(7).data_id("pairs").train_loader(loader).val_loader(loader)
             .extra_metrics({"zero": lambda y, p: 0.0}).metrics(nnx.MetricSpec("accuracy"))
             .monitor(nnx.MonitorSpec("accuracy", mode="max")).save_phase_checkpoints(False)
             .auto_step_schedulers(False).overwrite_existing(True).resume_from("abc", "best", "weights_only").build())
    assert built == nnx.NNTrainerParams(
        n_epochs=5, optims={"gen": gen, "disc": disc}, schedulers={"gen": cosine}, seed=7, data_id="pairs",
        train_loader=loader, val_loader=loader, metrics=(nnx.MetricSpec("accuracy"),),
        monitor=nnx.MonitorSpec("accuracy", mode="max"), save_phase_checkpoints=False, auto_step_schedulers=False,
        overwrite_existing=True, resume_from_run_id="abc", resume_from_checkpoint="best", resume_mode="weights_only")
    assert built.train_loader is loader and built.parent_run_id == "abc"
    with pytest.raises(nnx.ParamsError, match=r"\.n_epochs\(N\)"):
        nnx.NNTrainerParams.builder().optimizer("gen", gen).build()
    with pytest.raises(nnx.ParamsError, match=r"\['critic'\]"):
        nnx.NNTrainerParams.builder().n_epochs(1).optimizer("gen", gen).scheduler("critic", cosine).build()


def test_copy_branches_a_builder():
    base = nnx.NNTrainerParams.builder().n_epochs(3).optimizer("main", nnx.NNOptimParams())
    wide = base.copy().optimizer("aux", nnx.NNOptimParams(name="sgd")).data_id("wide")
    narrow = base.copy().data_id("narrow")
    assert sorted(wide.build().optims) == ["aux", "main"] and sorted(narrow.build().optims) == ["main"]
    assert base.build().data_id is None and sorted(base.build().optims) == ["main"]
    adam = nnx.NNOptimParams.builder().adam(max_lr=1e-3)
    clipped = adam.copy().grad_clip(0.5)
    assert adam.build().grad_clip_norm is None and clipped.build().grad_clip_norm == 0.5


def test_from_params_rebuilds_equal_params():
    trainer = nnx.NNTrainerParams(n_epochs=2, optims={"a": nnx.NNOptimParams()}, train_loader=[1],
                                  schedulers={"a": nnx.NNSchedulerParams(kind="step", step_size=1)})
    rebuilt = nnx.NNTrainerParamsBuilder.from_params(trainer).optimizer("b", nnx.NNOptimParams()).build()
    assert sorted(rebuilt.optims) == ["a", "b"] and sorted(trainer.optims) == ["a"]  # the original is untouched
    assert nnx.NNTrainerParamsBuilder.from_params(trainer).build() == trainer
    with pytest.raises(nnx.ParamsError, match="cannot rebuild"):
        nnx.NNOptimParamsBuilder.from_params(nnx.NNSchedulerParams())
    step = nnx.NNSchedulerParams(kind="step", step_size=2)
    assert nnx.NNSchedulerParamsBuilder.from_params(step).cosine_annealing(T_max=4).build().step_size is None


optims = st.builds(
    lambda name, lr, wd, clip, acc: nnx.NNOptimParams(
        name=name, max_lr=lr, weight_decay=wd, grad_clip_norm=clip, accumulate_grad_batches=acc),
    st.sampled_from(list(nnx.Optims)), st.floats(1e-6, 1.0), st.sampled_from([0.0, 1e-4]),
    st.none() | st.floats(0.1, 10.0), st.integers(1, 8),
)
schedulers = st.builds(
    lambda kind, patience, clock: nnx.NNSchedulerParams(
        kind=kind, patience=patience if kind in (None, nnx.Schedulers.REDUCE_LR_ON_PLATEAU) else 8,  # the kinds that read it
        T_max=5 if kind is nnx.Schedulers.COSINE_ANNEALING else None,
        clock=clock if kind not in (None, nnx.Schedulers.REDUCE_LR_ON_PLATEAU) else "epoch"),
    st.none() | st.sampled_from(list(nnx.Schedulers)), st.integers(0, 10),
    st.sampled_from(["epoch", "optimizer_update"]),
)


@settings(max_examples=EXAMPLES, deadline=None)
@given(optim=optims, scheduler=schedulers, names=st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, unique=True))
def test_from_params_round_trip_property(optim, scheduler, names):
    trainer = nnx.NNTrainerParams(n_epochs=2, optims={n: optim for n in names}, schedulers={names[0]: scheduler})
    for params, builder in ((optim, nnx.NNOptimParamsBuilder), (scheduler, nnx.NNSchedulerParamsBuilder),
                            (trainer, nnx.NNTrainerParamsBuilder)):
        rebuilt = builder.from_params(params).build()
        assert rebuilt == params and rebuilt.state() == params.state()


# ------------------------------------------------------------------------------ legacy mixed_precision
def test_mixed_precision_is_the_legacy_cuda_fp16_flag():
    """REFERENCE §2.2 / §8.5: ``mixed_precision`` (default False, in ``state()`` only when set) means
    CUDA fp16 autocast, silently full precision on CPU/MPS; with a non-fp16 policy it is refused."""
    plain, legacy = nnx.NNModelParams(), nnx.NNModelParams(mixed_precision=True)
    assert "mixed_precision" not in plain.state() and legacy.state()["mixed_precision"] is True
    assert nnx.NNModelParams.from_state(legacy.state()) == legacy != plain
    model = nnx.NNModel(nnx.NNParams(input_dim=2, output_dim=2), legacy)
    assert model.precision == "fp32"  # on the CPU: full precision, no error
    resolved = model.resolved_precision
    assert (resolved.requested, resolved.effective, resolved.source) == ("fp16", "fp32", "mixed_precision")
    assert resolved.fell_back and "CUDA" in resolved.fallback_reason
    assert nnx.NNModelParams(mixed_precision=True, precision=nnx.PrecisionPolicy("fp16")).mixed_precision
    with pytest.raises(nnx.ParamsError, match="mixed_precision"):
        nnx.NNModelParams(mixed_precision=True, precision=nnx.PrecisionPolicy("bf16"))
    with pytest.raises(nnx.ParamsError):
        nnx.NNModelParams(mixed_precision="yes")


def test_optim_is_valid_checks_the_momentum_shape():
    """REFERENCE §2.3: momentum is a float for SGD variants, a (b1, b2) pair for Adam variants;
    as in NNx, the other shape is built and ``is_valid()`` is False (training refuses it)."""
    assert nnx.NNOptimParams(name=nnx.Optims.ADAM, momentum=(0.8, 0.9)).is_valid()
    assert nnx.NNOptimParams(name=nnx.Optims.SGD_NESTEROV, momentum=0.9).is_valid()
    assert not nnx.NNOptimParams(name=nnx.Optims.ADAM, momentum=0.9).is_valid()
    assert not nnx.NNOptimParams(name=nnx.Optims.SGD, momentum=(0.9, 0.99)).is_valid()


def test_resolved_precision_records_the_request_and_what_the_device_made_of_it():
    """REFERENCE §8.5: ``ResolvedPrecision(requested, effective, device_type, source, fallback_reason)``."""
    net = nnx.NNParams(input_dim=2, output_dim=2)
    default = nnx.NNModel(net, nnx.NNModelParams()).resolved_precision
    assert (default.requested, default.effective, default.source, default.fallback_reason) == ("fp32", "fp32", "default", None)
    bf16 = nnx.NNModel(net, nnx.NNModelParams(precision=nnx.PrecisionPolicy("bf16"))).resolved_precision
    assert (bf16.effective, bf16.device_type, bf16.fell_back) == ("bf16", "cpu", False)
    fallback = nnx.NNModel(net, nnx.NNModelParams(precision=nnx.PrecisionPolicy("fp16", "fp32"))).resolved_precision
    assert (fallback.requested, fallback.effective) == ("fp16", "fp32") and fallback.fallback_reason
    assert nnx.ResolvedPrecision.from_state(fallback.state()) == fallback
    with pytest.raises(nnx.PrecisionUnsupportedError):
        nnx.NNModel(net, nnx.NNModelParams(precision=nnx.PrecisionPolicy("fp16")))  # CPU, no fallback
