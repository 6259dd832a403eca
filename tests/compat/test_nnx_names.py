"""Small names NNx 0.4.1's own code reads, with the values the NNx 0.4.1 wheel returns for the same
calls (read from the installed wheel, ``.venv-nnx``): a sharded loader's ``ids()``,
``MonitorSpec.key``, ``ResumePointError`` beside ``NNCheckpoint``, a search parameter's
``state()``, ``FixedHeadProvider``'s provider id and the dataclass functions on ``HistoryJournal``."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch.utils.data import TensorDataset

import nnx_api as nnx
from nnx_api.decisions import FixedHeadProvider
from nnx_api.nn.params import nn_checkpoint
from nnx_api.search import CategoricalParam, FloatParam, IntParam


def test_sharded_loaders_name_their_rows_with_ids():
    data = TensorDataset(torch.arange(10.0).unsqueeze(1), torch.arange(10))
    val = nnx.distributed.validation_loader(data, 4, rank=0, world_size=1)
    assert val.ids() == list(range(10))  # NNx, one rank: [0, 1, ..., 9]
    shard = nnx.distributed.validation_loader(data, 4, rank=1, world_size=2)
    assert shard.ids() == [1, 3, 5, 7, 9]
    train = nnx.distributed.train_loader(data, 4, rank=0, world_size=1)
    train.set_epoch(0)
    assert sorted(train.ids()) == list(range(10)) and train.ids() == train.indices()


def test_monitor_spec_key_is_split_dot_metric():
    assert nnx.MonitorSpec("loss").key == "val.loss"
    assert nnx.MonitorSpec("f1", split="train", mode="max").key == "train.f1"


def test_resume_point_error_is_importable_beside_nn_checkpoint():
    assert nn_checkpoint.ResumePointError is nnx.ResumePointError
    assert issubclass(nn_checkpoint.ResumePointError, ValueError)


def test_search_parameters_state_as_nnx_writes_it():
    assert FloatParam(name="lr", low=1e-4, high=1e-1, log=True).state() == {
        "kind": "float", "name": "lr", "low": 1e-4, "high": 1e-1, "log": True}
    assert FloatParam(name="a", low=0.0, high=1.0, step=0.25).state() == {
        "kind": "float", "name": "a", "low": 0.0, "high": 1.0, "step": 0.25}
    assert IntParam(name="n", low=1, high=4).state() == {"kind": "int", "name": "n", "low": 1, "high": 4}
    assert IntParam(name="n", low=1, high=8, log=True).state() == {"kind": "int", "name": "n", "low": 1, "high": 8, "log": True}
    assert IntParam(name="m", low=1, high=9, step=2).state() == {"kind": "int", "name": "m", "low": 1, "high": 9, "step": 2}
    assert CategoricalParam(name="c", choices=(1, "x", None)).state() == {"kind": "categorical", "name": "c", "choices": [1, "x", None]}


def test_the_fixed_head_provider_is_named_as_nnx_names_it():
    model = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(8,)), nnx.NNModelParams(net=nnx.Nets.FEED_FWD))
    provider = FixedHeadProvider(model, labels=["a", "b", "c"])
    assert provider.name == "nnx.fixed_head" and provider.model_calls == 0
    capabilities = provider.capabilities()  # NNx: the model underneath also trains and exports
    assert capabilities.inference and capabilities.training and capabilities.export


def test_the_history_journal_supports_dataclass_functions_as_nnx_s_does():
    journal = nnx.HistoryJournal(retention=100, chunk_size=10)
    assert [f.name for f in dataclasses.fields(journal)] == ["retention", "chunk_size"]  # NNx's, in its order
    assert dataclasses.asdict(journal) == {"retention": 100, "chunk_size": 10}
    assert dataclasses.replace(journal, chunk_size=20) == nnx.HistoryJournal(retention=100, chunk_size=20)
    with pytest.raises(nnx.ParamsError):
        dataclasses.replace(journal, chunk_size=200)  # still checked


def test_str_of_a_run_is_nnx_s_one_line_summary(tmp_path):
    """NNx 0.4.1 (the wheel) prints this same line for the same configuration (a leaky-ReLU net
    and weight decay 5e-5: NNx's defaults) and, for a registered module, ``net=<id>@v<version>,
    kind=registered, config=<json>, seed=<seed>``."""
    x, y = torch.randn(8, 4), torch.randint(0, 3, (8,))
    model = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(8,), dropout_prob=0.0,
                                     activation=nnx.Activations.LEAKY_RELU), nnx.NNModelParams(net=nnx.Nets.FEED_FWD))
    params = nnx.NNTrainParams(n_epochs=1, train_loader=[(x, y)], optim=nnx.NNOptimParams(max_lr=0.01, weight_decay=5e-5))
    run = model.train(params, root=tmp_path)
    assert str(run) == (
        "{loss=cross_entropy, device=cpu, net=feed_fwd, dims=[4, 8, 3], dropout=0.0, activation=leaky_relu, "
        "n_heads=None, n_epochs=1, max_lr=0.01, momentum=(0.9, 0.999), decay=5e-05, scheduler=[plateau, patience=8, "
        "cooldown=2, factor=9e-01, threshold=1e-03, min_lr=1e-07]}"
    )
    assert repr(run).startswith("NNRun(")
    registered = nnx.NNRun(config={"model": {"net": {"id": "my.mlp", "version": 2, "config": {"h": 8}, "seed": 0},
                                             "device": "cpu", "loss": "cross_entropy"}, "train": {"n_epochs": 1}}, root=tmp_path)
    assert str(registered).startswith('{loss=cross_entropy, device=cpu, net=my.mlp@v2, kind=registered, config={"h": 8}, seed=0')
