"""Params: lossless state() / from_state() round trips (also through YAML) and typed refusals."""

from __future__ import annotations

import dataclasses
import os

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import nnx_api as nnx
from nnx_api.runs.store import dump_yaml, load_yaml

EXAMPLES = 500 if os.environ.get("NNX_DEEP") == "1" else 40

EXAMPLES_OF = [
    nnx.NNParams(input_dim=8, output_dim=3, hidden_dims=(32, 16), dropout_prob=0.25, activation="tanh"),
    nnx.TaskSpec.categorical(10, ignore_index=-100, labels=[str(i) for i in range(10)]),
    nnx.TaskSpec.multilabel(4, threshold=0.3),
    nnx.TaskSpec.regression(),
    nnx.PrecisionPolicy(mode="bf16", fallback="fp32"),
    nnx.NNModelParams(loss=nnx.Losses.MEAN_SQUARED_ERROR, task=nnx.TaskSpec.regression(2)),
    nnx.NNParamGroupSpec(name_pattern="0.*", lr_multiplier=0.1, weight_decay=0.0),
    nnx.NNOptimParams(name=nnx.Optims.SGD, max_lr=0.1, momentum=0.9, grad_clip_norm=1.0, accumulate_grad_batches=4),
    nnx.NNOptimParams(name=nnx.Optims.ADAMW, eps=1e-6, param_groups=[nnx.NNParamGroupSpec(name_pattern="*.bias")]),
    nnx.NNSchedulerParams(kind=nnx.Schedulers.LINEAR_WARMUP_DECAY, warmup_steps=3, total_steps=8,
                          clock="optimizer_update"),
    nnx.NNTrainParams(n_epochs=3, seed=7, data_id="digits-v1", save_phase_checkpoints=False,
                      metrics=[nnx.MetricSpec(id="f1", config={"average": "micro"})],
                      monitor=nnx.MonitorSpec(metric="f1", mode="max", min_delta=0.01)),
    nnx.MetricSpec(id="accuracy", name="acc"),
    nnx.MonitorSpec(metric="loss", split="train", on_missing="error"),
]


@pytest.mark.parametrize("obj", EXAMPLES_OF, ids=lambda o: type(o).__name__)
def test_round_trip_through_yaml(obj):
    state = obj.state()
    assert type(obj).from_state(state) == obj
    assert type(obj).from_state(load_yaml(dump_yaml(state), where="test")) == obj


@settings(max_examples=EXAMPLES, deadline=None)
@given(
    input_dim=st.integers(1, 512),
    output_dim=st.integers(1, 64),
    hidden=st.lists(st.integers(1, 256), max_size=4),
    dropout=st.floats(0, 1),
    lr=st.floats(1e-6, 1.0),
    b1=st.floats(0, 0.999),
    epochs=st.integers(1, 1000),
    accumulate=st.integers(1, 16),
)
def test_round_trip_property(input_dim, output_dim, hidden, dropout, lr, b1, epochs, accumulate):
    net = nnx.NNParams(input_dim=input_dim, output_dim=output_dim, hidden_dims=hidden, dropout_prob=dropout)
    train = nnx.NNTrainParams(
        n_epochs=epochs, optim=nnx.NNOptimParams(max_lr=lr, momentum=(b1, 0.999), accumulate_grad_batches=accumulate)
    )
    for obj in (net, train):
        assert type(obj).from_state(load_yaml(dump_yaml(obj.state()), where="t")) == obj


def test_runtime_fields_never_enter_state():
    params = nnx.NNTrainParams(n_epochs=1, train_loader=[1], val_loader=[2], overwrite_existing=True,
                               resume_mode="weights_only", progress=False)
    assert set(params.state()) == {"n_epochs", "optim", "scheduler"}


def test_resume_lineage_is_part_of_the_state():
    params = nnx.NNTrainParams(n_epochs=2, resume_from_run_id="abc", resume_from_checkpoint="best")
    assert params.state()["parent_run_id"] == "abc" and params.state()["parent_checkpoint"] == "best"


@pytest.mark.parametrize(
    "build, path",
    [
        (lambda: nnx.NNTrainParams(n_epochs=0), "n_epochs"),
        (lambda: nnx.NNTrainParams(n_epochs=True), "n_epochs"),
        (lambda: nnx.NNTrainParams(n_epochs=2.0), "n_epochs"),
        (lambda: nnx.NNOptimParams(max_lr=-1e-3), "max_lr"),
        (lambda: nnx.NNOptimParams(max_lr=float("nan")), "max_lr"),
        (lambda: nnx.NNOptimParams(momentum=(1.0, 0.9)), "momentum"),
        (lambda: nnx.NNOptimParams(name="sgd", eps=1e-6), "eps"),
        (lambda: nnx.NNOptimParams(accumulate_grad_batches=0), "accumulate_grad_batches"),
        (lambda: nnx.NNParams(input_dim=0, output_dim=2), "input_dim"),
        (lambda: nnx.NNParams(input_dim=2, output_dim=2, hidden_dims=(4, False)), "hidden_dims"),
        (lambda: nnx.NNParams(input_dim=2, output_dim=2, dropout_prob=1.5), "dropout_prob"),
        (lambda: nnx.NNSchedulerParams(clock="optimizer_update"), "clock"),
        (lambda: nnx.NNSchedulerParams(patience=-1), "patience"),
        (lambda: nnx.NNParamGroupSpec(name_pattern="*", lr=0.1, lr_multiplier=2.0), "NNParamGroupSpec"),
        (lambda: nnx.MetricSpec(id="accuracy", name="loss"), "name"),
        (lambda: nnx.MonitorSpec(split="test"), "split"),
        (lambda: nnx.NNTrainParams(n_epochs=1, train_loader=iter([])), "train_loader"),
    ],
)
def test_out_of_domain_values_are_refused_with_the_field_path(build, path):
    with pytest.raises(nnx.ParamsError, match=path):
        build()


def test_unknown_state_keys_are_refused():
    with pytest.raises(nnx.ParamsError, match="NNParams: unknown field 'colour'"):
        nnx.NNParams.from_state({"input_dim": 2, "output_dim": 2, "colour": "red"})


# ------------------------------------------------------------------ dataclasses: replace, frozen
ALL_EXAMPLES = [
    *EXAMPLES_OF,
    nnx.NNModelParams(device="cuda:1"),
    nnx.NNModelParams(device="auto", precision=nnx.PrecisionPolicy("bf16")),
    nnx.NNTrainerParams(n_epochs=2, optims={"b": nnx.NNOptimParams(), "a": nnx.NNOptimParams(name="sgd")},
                        schedulers={"a": nnx.NNSchedulerParams(kind="step", step_size=2)}, seed=1),
]


@pytest.mark.parametrize("obj", ALL_EXAMPLES, ids=lambda o: type(o).__name__)
def test_params_are_frozen_slotted_dataclasses_and_replace_revalidates(obj):
    assert dataclasses.is_dataclass(obj) and not hasattr(obj, "__dict__")
    field = dataclasses.fields(obj)[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(obj, field.name, getattr(obj, field.name))
    assert dataclasses.replace(obj) == obj
    assert type(obj).from_state(obj.state()) == obj


@pytest.mark.parametrize("cls", [nnx.NNParams, nnx.NNModelParams, nnx.NNOptimParams, nnx.NNSchedulerParams,
                                 nnx.NNTrainParams, nnx.NNTrainerParams, nnx.TaskSpec])
def test_params_are_keyword_only(cls):
    with pytest.raises(TypeError):
        cls(1)


def test_replace_checks_the_new_value_and_keeps_the_rest():
    optim = nnx.NNOptimParams(name="sgd", max_lr=0.1, momentum=0.9)
    assert dataclasses.replace(optim, max_lr=0.2) == nnx.NNOptimParams(name="sgd", max_lr=0.2, momentum=0.9)
    with pytest.raises(nnx.ParamsError, match="NNOptimParams.max_lr"):
        dataclasses.replace(optim, max_lr=-1.0)
    train = nnx.NNTrainParams(n_epochs=2, train_loader=[1])
    assert dataclasses.replace(train, seed=3).train_loader == [1] and train.replace(seed=3).seed == 3


# ------------------------------------------------------------------------------- enum fields
ENUM_FIELDS = [
    (nnx.NNOptimParams, "name", nnx.Optims.SGD_NESTEROV, {"momentum": 0.9}),
    (nnx.NNSchedulerParams, "kind", nnx.Schedulers.COSINE_ANNEALING, {}),
    (nnx.NNModelParams, "loss", nnx.Losses.MEAN_SQUARED_ERROR, {}),
    (nnx.NNModelParams, "device", nnx.Devices.MPS, {}),
    (nnx.NNModelParams, "net", nnx.Nets.FEED_FWD, {}),
    (nnx.NNParams, "activation", nnx.Activations.LEAKY_RELU, {"input_dim": 2, "output_dim": 2}),
]


@pytest.mark.parametrize("cls, field, member, others", ENUM_FIELDS, ids=lambda v: getattr(v, "__name__", None))
def test_enum_fields_accept_any_case(cls, field, member, others):
    expected = cls(**{field: member}, **others)
    for spelling in (member.value, member.value.upper(), member.value.title(), member.name, f" {member.value} "):
        assert cls(**{field: spelling}, **others) == expected
        assert getattr(cls(**{field: spelling}, **others), field) is member


@pytest.mark.parametrize("cls, field, member, others", ENUM_FIELDS, ids=lambda v: getattr(v, "__name__", None))
def test_a_bad_enum_value_names_the_field_and_the_allowed_values(cls, field, member, others):
    with pytest.raises(nnx.ParamsError) as info:
        cls(**{field: "nonsense"}, **others)
    assert info.value.path == f"{cls.__name__}.{field}"
    assert all(repr(m.value) in str(info.value) for m in type(member))
    assert "nonsense" in str(info.value)


def test_a_near_miss_is_named():
    with pytest.raises(nnx.ParamsError, match="did you mean 'adam'"):
        nnx.NNOptimParams(name="adamm")


@pytest.mark.parametrize(
    "build, path, advice",
    [
        (lambda: nnx.NNTrainParams(n_epochs=1, metrics=("accuracy",)), "NNTrainParams.metrics[0]",
         "metrics=(MetricSpec('accuracy'),)"),
        (lambda: nnx.NNTrainerParams(n_epochs=1, optims={"a": nnx.NNOptimParams()}, metrics=["f1"]),
         "NNTrainerParams.metrics[0]", "MetricSpec('f1')"),
        (lambda: nnx.NNTrainParams(n_epochs=1, metrics="accuracy"), "NNTrainParams.metrics", "list or tuple"),
        (lambda: nnx.NNTrainParams(n_epochs=1, monitor="val.loss"), "NNTrainParams.monitor",
         "MonitorSpec('loss', split='val')"),
        (lambda: nnx.NNTrainParams(n_epochs=1, optim="adam"), "NNTrainParams.optim", "NNOptimParams(name='adam'"),
        (lambda: nnx.NNTrainerParams(n_epochs=1, optims={"a": "sgd"}), "NNTrainerParams.optims['a']",
         "NNOptimParams(name='sgd'"),
        (lambda: nnx.NNModelParams(precision="bf16"), "NNModelParams.precision", "PrecisionPolicy('bf16')"),
        (lambda: nnx.NNModelParams(task="regression"), "NNModelParams.task", "TaskSpec.regression(...)"),
        (lambda: nnx.NNTrainParams(n_epochs=1, extra_metrics={"mae": 3}), "NNTrainParams.extra_metrics['mae']",
         "fn(y_true, y_pred)"),
        (lambda: nnx.NNTrainParams(n_epochs=1, overwrite_existing="yes"), "NNTrainParams.overwrite_existing",
         "True or False"),
        (lambda: nnx.NNModelParams(device="gpu"), "NNModelParams.device", "'cuda:N'"),
    ],
)
def test_wrong_types_say_what_to_write_instead(build, path, advice):
    with pytest.raises(nnx.ParamsError) as info:
        build()
    assert info.value.path == path and advice in str(info.value)


def test_precision_policy_refusals_read_as_nnx_words_them_in_this_projects_form():
    # NNx 0.4.1's wheel: "mode must be one of", "fallback must be one of", "must be a PrecisionPolicy"
    for build, said in (
        (lambda: nnx.PrecisionPolicy("fp8"), "PrecisionPolicy.mode: the mode must be one of 'fp32', 'bf16', 'fp16'; got 'fp8'"),
        (lambda: nnx.PrecisionPolicy("bf16", fallback="ignore"),
         "PrecisionPolicy.fallback: the fallback must be one of 'error', 'fp32'; got 'ignore'"),
        (lambda: nnx.NNModelParams(precision="bf16"),
         "NNModelParams.precision: must be a PrecisionPolicy, got str 'bf16'; write PrecisionPolicy('bf16')"),
        (lambda: nnx.NNTrainParams(n_epochs=1, scheduler="plateau"), "NNTrainParams.scheduler: must be an NNSchedulerParams"),
    ):
        with pytest.raises(nnx.ParamsError) as info:
            build()
        assert str(info.value).startswith(said)


def test_every_config_error_is_an_nnx_error_a_value_error_and_a_type_error():
    with pytest.raises(nnx.NNxError):
        nnx.NNParams(input_dim="8", output_dim=2)
    for kind in (ValueError, TypeError):
        with pytest.raises(kind):
            nnx.NNTrainParams(n_epochs=1, metrics=("accuracy",))


def test_nested_state_errors_carry_the_path_inside_the_state():
    with pytest.raises(nnx.ParamsError, match=r"NNOptimParams\.max_lr: must be ≥ 0") as info:
        nnx.NNTrainParams.from_state({"n_epochs": 2, "optim": {"name": "adam", "max_lr": -1}})
    assert info.value.path == "NNTrainParams.optim"
    with pytest.raises(nnx.ParamsError, match=r"NNTrainerParams\.optims\['g'\]: unknown field 'lr'"):
        nnx.NNTrainerParams.from_state({"n_epochs": 1, "optims": {"g": {"lr": 0.1}}})


# ------------------------------------------------------------------------------------ devices
def _machine(monkeypatch, cuda, mps, gpus=1):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus if cuda else 0)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: mps)


@pytest.mark.parametrize("cuda, mps, expected", [(True, True, "cuda"), (False, True, "mps"), (False, False, "cpu")])
def test_auto_is_cuda_then_mps_then_cpu(monkeypatch, cuda, mps, expected):
    _machine(monkeypatch, cuda, mps)
    params = nnx.NNModelParams(device="auto")
    assert params.device is nnx.Devices.AUTO and params.device() == torch.device(expected)
    assert params.state()["device"] == "auto"  # the configuration says "auto", whatever this machine has


def test_devices_get_keeps_nnx_order(monkeypatch):
    _machine(monkeypatch, cuda=True, mps=True)
    assert nnx.Devices.get() is nnx.Devices.MPS
    _machine(monkeypatch, cuda=True, mps=False)
    assert nnx.Devices.get() is nnx.Devices.CUDA


@pytest.mark.parametrize("given, state", [
    ("cuda:1", "cuda:1"), (torch.device("cuda", 1), "cuda:1"), (torch.device("cuda"), "cuda"),
    (torch.device("cpu"), "cpu"), ("CPU", "cpu"), (nnx.Devices.CUDA, "cuda"), ("mps:0", "mps:0"),
])
def test_devices_as_pytorch_names_them(given, state):
    params = nnx.NNModelParams(device=given)
    assert params.state()["device"] == state and str(params.device) == state
    assert nnx.NNModelParams.from_state(params.state()) == params
    assert params.device() == torch.device(state)


def test_an_enum_device_keeps_its_state_and_run_id():
    for member in nnx.Devices:
        assert nnx.NNModelParams(device=member).state() == {"net": "feed_fwd", "device": member.value,
                                                            "loss": "cross_entropy"}
    assert nnx.NNModelParams(device=torch.device("cpu")) == nnx.NNModelParams()


def test_a_gpu_this_machine_lacks_is_refused_when_resolved(monkeypatch):
    _machine(monkeypatch, cuda=True, mps=False, gpus=1)
    params = nnx.NNModelParams(device="cuda:3")  # a configuration may name it; another machine may have it
    with pytest.raises(nnx.ParamsError, match="cuda:3 names GPU 3 but this machine has 1"):
        params.device()


def test_a_model_on_auto_lives_on_the_resolved_device():
    model = nnx.NNModel(nnx.NNParams(input_dim=2, output_dim=2), nnx.NNModelParams(device="auto"))
    assert model.device == nnx.Devices.AUTO() and next(model.net.parameters()).device.type == model.device.type


# ------------------------------------------------------------------------------ extra metrics
def test_extra_metrics_are_runtime_only():
    fn = lambda y_true, y_pred: 0.0  # noqa: E731
    for params in (nnx.NNTrainParams(n_epochs=1, extra_metrics={"zero": fn}),
                   nnx.NNTrainerParams(n_epochs=1, optims={"a": nnx.NNOptimParams()}, extra_metrics={"zero": fn})):
        assert "extra_metrics" not in params.state() and params.extra_metrics["zero"] is fn
        assert params == dataclasses.replace(params, extra_metrics=None)
        with pytest.raises(TypeError):
            params.extra_metrics["other"] = fn  # read-only copy
    model = nnx.NNModel(nnx.NNParams(input_dim=2, output_dim=2), nnx.NNModelParams())
    bare = nnx.NNTrainParams(n_epochs=1)
    assert model.run_config(bare.replace(extra_metrics={"zero": fn}), None) == model.run_config(bare, None)
    with pytest.raises(nnx.ParamsError, match="unknown field 'extra_metrics'"):
        nnx.NNTrainParams.from_state({"n_epochs": 1, "extra_metrics": {}})


# ------------------------------------------------------------------ NNx's immutability and asdict (bench/compat s10)
def test_hidden_dims_refuses_list_mutation_with_typeerror_and_stays_a_tuple_for_ids():
    params = nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=[8, 4])
    for mutate in (lambda d: d.append(2), lambda d: d.extend([2]), lambda d: d.insert(0, 2), lambda d: d.pop(),
                   lambda d: d.remove(8), lambda d: d.clear(), lambda d: d.sort(), lambda d: d.reverse()):
        with pytest.raises(TypeError, match="immutable") as raised:
            mutate(params.hidden_dims)
        assert type(raised.value) is TypeError  # NNx raises a plain TypeError
    assert params.hidden_dims == (8, 4) and hash(params.hidden_dims) == hash((8, 4)) and isinstance(params.hidden_dims, tuple)
    plain = nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(8, 4))
    assert params == plain and hash(params) == hash(plain) and params.state() == plain.state()
    assert params.state()["hidden_dims"] == [8, 4] and nnx.NNParams.from_state(params.state()) == params
    assert dataclasses.asdict(params)["hidden_dims"] == (8, 4)
    assert dataclasses.replace(params, hidden_dims=[*params.hidden_dims, 2]).hidden_dims == (8, 4, 2)


def test_trainer_params_asdict_deepcopy_and_pickle_work_and_optims_stay_read_only():
    import copy
    import pickle

    params = nnx.NNTrainerParams(
        n_epochs=2, optims={"b": nnx.NNOptimParams(), "a": nnx.NNOptimParams(max_lr=0.1)},
        schedulers={"a": nnx.NNSchedulerParams()}, extra_metrics={"zero": lambda y, p: 0.0},
    )
    as_dict = dataclasses.asdict(params)
    assert list(as_dict["optims"]) == ["a", "b"] and as_dict["optims"]["a"]["max_lr"] == 0.1
    assert copy.deepcopy(params) == params and pickle.loads(pickle.dumps(params.replace(extra_metrics=None))) == \
        params.replace(extra_metrics=None)
    for mapping in (params.optims, params.schedulers, params.extra_metrics):
        with pytest.raises(TypeError, match="read-only"):
            mapping["c"] = None
        with pytest.raises(TypeError, match="read-only"):
            mapping.update({})
    assert params.state() == nnx.NNTrainerParams.from_state(params.state()).state()


def test_nnx_s_saved_betas_text_is_read_as_the_pair_and_only_when_reading_a_state():
    """NNx 0.4.1's NNOptimParams.state() writes Adam's betas as the text "(0.9, 0.999)" (its wheel's
    output): from_state reads that text as the pair, matched and never evaluated; built directly, a
    string is still refused, and so is text that is not two numbers."""
    nnx_state = {"max_lr": 0.001, "momentum": "(0.9, 0.999)", "name": "adam", "weight_decay": 0.0}
    params = nnx.NNOptimParams.from_state(nnx_state)
    assert params.momentum == (0.9, 0.999)
    assert params.state()["momentum"] == [0.9, 0.999]  # written as this project writes it
    with pytest.raises(nnx.ParamsError, match="momentum"):
        nnx.NNOptimParams(name="adam", max_lr=0.001, momentum="(0.9, 0.999)")
    with pytest.raises(nnx.ParamsError, match="momentum"):
        nnx.NNOptimParams.from_state({**nnx_state, "momentum": "(0.9, __import__('os'))"})
