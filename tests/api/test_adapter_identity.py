"""The batch adapter decides which inputs the net sees and which output is the prediction, so it
is recorded beside the code and compared by ``resume="auto"``: the same configuration with another
``prediction=`` is another training (``CodeChangedError`` naming the adapter); the same adapter
returns the run; a record made before adapters were recorded does not compare them."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import nnx_api as nnx
from nnx_api.training.code import ADAPTER, SETTINGS, code_refusal

X, Y = torch.randn(32, 4, generator=torch.Generator().manual_seed(0)), torch.arange(32) % 3
PAIRS = [(X[i:i + 8], Y[i:i + 8]) for i in range(0, 32, 8)]


class TwoHeads(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b = nn.Linear(4, 3), nn.Linear(4, 3)

    def forward(self, x):
        return {"a": self.a(x), "b": self.b(x)}


def fit(root, prediction):
    model = nnx.NNModel(params=nnx.NNModelParams(), module=TwoHeads(), batch_adapter=nnx.PositionalInputs(1, prediction=prediction))
    params = nnx.NNTrainParams(n_epochs=1, seed=0, train_loader=PAIRS, resume="auto", progress=False)
    return model.train(params, root=root)


def test_another_prediction_is_another_training_and_the_same_returns_the_run(tmp_path):
    run = fit(tmp_path, "a")
    assert fit(tmp_path, "a").id == run.id
    with pytest.raises(nnx.CodeChangedError, match=r"batch adapter PositionalInputs\(1, prediction='b'\) \(was "
                                                   r"PositionalInputs\(1, prediction='a'\)\) changed"):
        fit(tmp_path, "b")


def test_a_record_from_before_adapters_were_recorded_does_not_compare_them():
    now = {SETTINGS: {"name": f"module structure, constants, kept callbacks, {ADAPTER}"},
           ADAPTER: {"name": "PositionalInputs(1)", "sha256": "0" * 16}}
    older = {SETTINGS: {"name": "module structure, constants, kept callbacks"}}
    assert code_refusal("f" * 32, older, now) is None
    assert code_refusal("f" * 32, {**now, ADAPTER: {"name": "KeywordInputs(['x'])", "sha256": "1" * 16}}, now) is not None
