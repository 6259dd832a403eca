"""Params: lossless state() / from_state() round trips (also through YAML) and typed refusals."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nnx_api as nnx
from nnx_api.runs.run import dump_yaml, load_yaml
from nnx_core.identity import run_id
from tests.core.test_identity import VECTOR_ID

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
        (lambda: nnx.NNOptimParams(name="sgd", momentum=(0.9, 0.99)), "momentum"),
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
    with pytest.raises(nnx.ParamsError, match="NNParams.colour"):
        nnx.NNParams.from_state({"input_dim": 2, "output_dim": 2, "colour": "red"})


def test_api_params_give_the_documented_vector_id():
    """The documented run-identity vector (docs/concepts.md), built through the public params."""
    model = nnx.NNModel(nnx.NNParams(input_dim=8, output_dim=3, hidden_dims=(32, 16), dropout_prob=0.1),
                        nnx.NNModelParams())
    params = nnx.NNTrainParams(
        n_epochs=10,
        optim=nnx.NNOptimParams(name=nnx.Optims.ADAM, max_lr=0.01, weight_decay=5e-5),
        scheduler=nnx.NNSchedulerParams(min_lr=1e-7, factor=0.5, patience=3, cooldown=1, threshold=1e-3),
    )
    assert run_id(model.run_config(params, None)) == VECTOR_ID
    # omit-when-default: a later field left at its default does not change the id
    assert run_id(model.run_config(params.replace(save_phase_checkpoints=True), None)) == VECTOR_ID
    assert run_id(model.run_config(params.replace(seed=42), None)) != VECTOR_ID
