"""Caller-owned modules, batch adapters and model inputs as NNx 0.4.1 handles them (REFERENCE §2.2,
§3.1; the oracle is the wheel's observed behaviour).

``NNModel(module=...)`` fills ``NNModelParams.net`` with the module's ``RuntimeModule`` (class path
and a topology digest that sees layer hyperparameters); ``NNModelParams.net`` is unset (None) by
default and still builds a feed-forward net from ``NNParams`` with an unchanged run id. Batch
adapters and prediction refuse with the builtins NNx raises (``KeyError``, ``TypeError``,
``ValueError``).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import nnx_api as nnx
from nnx_api.prediction import ProbabilitySpec, prediction_from_logits


class Small(nn.Module):
    def __init__(self, width: int = 8, p: float = 0.1) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, width), nn.Dropout(p), nn.Linear(width, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def _shape() -> nnx.NNParams:
    return nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(8,), dropout_prob=0.0)


def _train(model: nnx.NNModel, runs, epochs: int = 1) -> nnx.NNRun:
    x = torch.randn(12, 4, generator=torch.Generator().manual_seed(0))
    y = (x[:, 0] > 0).long()
    params = nnx.NNTrainParams(n_epochs=epochs, train_loader=[(x[:6], y[:6]), (x[6:], y[6:])], progress=False)
    return model.train(params, root=runs)


# ------------------------------------------------------------------------------ descriptors
def test_net_is_unset_by_default_and_still_builds_the_feed_forward_net_with_the_same_run_id():
    assert nnx.NNModelParams().net is None and not nnx.NNModelParams().builtin
    assert nnx.NNModelParams(net=nnx.Nets.FEED_FWD).builtin
    implicit = nnx.NNModel(_shape(), nnx.NNModelParams())
    explicit = nnx.NNModel(_shape(), nnx.NNModelParams(net=nnx.Nets.FEED_FWD))
    assert type(implicit.net).__name__ == "FeedFwdNN" and implicit.params.net is nnx.Nets.FEED_FWD
    train = nnx.NNTrainParams(n_epochs=2)
    assert implicit.run_config(train, None) == explicit.run_config(train, None)
    assert nnx.NNModelParams().state()["net"] == "feed_fwd"
    assert nnx.NNModelParams.from_state(nnx.NNModelParams().state()) == nnx.NNModelParams()


def test_a_wrapped_module_gets_its_runtime_descriptor():
    module = Small()
    model = nnx.NNModel(module=module, params=nnx.NNModelParams())
    descriptor = model.params.net
    assert isinstance(descriptor, nnx.RuntimeModule) and descriptor == nnx.RuntimeModule.of(module)
    assert descriptor.reconstructible is False and descriptor.module.endswith("Small")
    assert nnx.RuntimeModule.from_state(descriptor.state()) == descriptor
    assert nnx.NNModelParams.from_state(model.params.state()).net == descriptor
    assert model.net is module and model.net_params is None
    with pytest.raises(AttributeError):
        descriptor.topology = "x"  # type: ignore[misc]


def test_the_topology_sees_layer_hyperparameters_but_not_weights():
    torch.manual_seed(0)
    a = nnx.RuntimeModule.of(Small(p=0.1))
    torch.manual_seed(1)
    assert nnx.RuntimeModule.of(Small(p=0.1)) == a  # other weights, one architecture
    assert nnx.RuntimeModule.of(Small(p=0.5)).topology != a.topology
    assert nnx.RuntimeModule.of(Small(width=16)).topology != a.topology


def test_mixed_or_mismatched_descriptors_are_refused():
    with pytest.raises(ValueError):
        nnx.NNModel(params=nnx.NNModelParams(net=nnx.Nets.FEED_FWD), module=Small())
    with pytest.raises(ValueError):
        nnx.NNModel(params=nnx.NNModelParams(net=nnx.RuntimeModule.of(Small(width=16))), module=Small())
    with pytest.raises(nnx.MissingModelFactoryError):
        nnx.NNModel(params=nnx.NNModelParams(net=nnx.RuntimeModule.of(Small())))
    with pytest.raises(TypeError):
        nnx.NNModel(params=nnx.NNModelParams(), module="net")  # type: ignore[arg-type]
    matching = nnx.NNModel(params=nnx.NNModelParams(net=nnx.RuntimeModule.of(Small())), module=Small())
    assert matching.params.net == nnx.RuntimeModule.of(Small())


# ------------------------------------------------------------------------------ checkpoints
def test_runtime_checkpoints_need_the_module_and_lazy_modules_reload(runs):
    run = _train(nnx.NNModel(module=Small(), params=nnx.NNModelParams()), runs)
    checkpoint = nnx.NNCheckpoint.load(run.id, "last", runs)
    assert checkpoint is not None and checkpoint.reconstructible is False
    with pytest.raises(nnx.MissingModelFactoryError, match="module="):
        nnx.NNModel.from_checkpoint(checkpoint)
    assert isinstance(nnx.NNModel.from_checkpoint(checkpoint, module=Small()).params.net, nnx.RuntimeModule)

    def lazy() -> nn.Module:
        return nn.Sequential(nn.LazyLinear(8), nn.ReLU(), nn.Linear(8, 2))

    model = nnx.NNModel(module=lazy(), params=nnx.NNModelParams())
    lazy_run = _train(model, runs)
    reloaded = nnx.NNModel.from_checkpoint(nnx.NNCheckpoint.load(lazy_run.id, "last", runs), module=lazy())
    x = torch.randn(3, 4)
    np.testing.assert_array_equal(reloaded.predict(x).logits, model.predict(x).logits)


# ------------------------------------------------------------------------------ adapters and inputs
def test_batch_adapters_refuse_with_nnx_builtins():
    with pytest.raises(KeyError):
        nnx.KeywordInputs(("features",)).split({"mask": torch.zeros(1)})
    with pytest.raises(TypeError):
        nnx.KeywordInputs(("features",)).split((torch.zeros(1),))
    with pytest.raises(ValueError):
        nnx.KeywordInputs(("labels",), target="labels")
    with pytest.raises(ValueError):
        nnx.PositionalInputs().split((torch.zeros(1), torch.zeros(1), torch.zeros(1)))


def test_predict_refuses_a_dict_output_and_non_tensor_rows_as_type_errors():
    class Dict(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(4, 2)

        def forward(self, x):
            return {"logits": self.linear(x)}

    with pytest.raises(TypeError):
        nnx.NNModel(module=Dict(), params=nnx.NNModelParams()).predict(torch.zeros(2, 4))
    model = nnx.NNModel(_shape(), nnx.NNModelParams(net=nnx.Nets.FEED_FWD))
    model.net.train()
    with pytest.raises(TypeError):
        model.predict(X=[object()])
    assert model.net.training


def test_a_conv_net_trains_on_image_batches(runs):
    shape = nnx.NNConvParams(input_dim=64, output_dim=3, conv_channels=(4,), kernel_size=3, in_channels=1)
    model = nnx.NNModel(shape, nnx.NNModelParams(net=nnx.Nets.CONV))
    x, y = torch.randn(8, 1, 8, 8), torch.randint(0, 3, (8,))
    run = model.train(nnx.NNTrainParams(n_epochs=1, train_loader=[(x, y)], progress=False), root=runs)
    assert len(run.idps) == 1 and model.predict(x).logits.shape == (8, 3)


def test_decoded_labels_are_an_object_array_of_the_decoded_shape():
    spec = ProbabilitySpec(kind="categorical", labels=("a", "b"))
    flat = prediction_from_logits(torch.tensor([[1.0, 2.0], [3.0, 0.0]]), spec).decoded_labels()
    assert isinstance(flat, np.ndarray) and flat.dtype == object and flat.tolist() == ["b", "a"]
    nested = prediction_from_logits(torch.tensor([[[1.0, 2.0], [3.0, 0.0]]]), spec).decoded_labels()
    assert nested.shape == (1, 2) and nested.tolist() == [["b", "a"]]


def test_task_spec_num_outputs_is_n():
    assert nnx.TaskSpec.categorical(3).num_outputs == 3
    assert nnx.TaskSpec(kind="regression").num_outputs is None


def test_the_legacy_callable_adapter_keeps_its_nnx_name():
    from nnx_api.nn.callbacks import Callback, _LegacyCallback

    seen: list[int] = []
    legacy = _LegacyCallback(lambda idps: seen.append(len(idps)))
    assert isinstance(legacy, Callback)
    legacy.on_epoch_end(type("Ctx", (), {"idps": [1, 2, 3]})())
    assert seen == [3]
