"""Outputs other than one tensor: a module returning a tuple, a dict, a named tuple or a
dataclass trains and validates with the built-in step once the batch adapter names the
prediction (``prediction=``); without it the first batch is refused, before anything is
written, with that way out. Mapping batches likewise name ``KeywordInputs``. Oracles: the same
module returning the one tensor (trained weights equal) and scikit-learn for the score."""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import pytest
import sklearn.metrics as skm
import torch
from torch import nn

from nnx_core.errors import NetOutputError
import nnx_api as nnx

X, Y = torch.randn(48, 4, generator=torch.Generator().manual_seed(0)), torch.arange(48) % 3
PAIRS = [(X[i:i + 16], Y[i:i + 16]) for i in range(0, 48, 16)]
MAPPINGS = [{"features": x, "labels": y} for x, y in PAIRS]


@dataclasses.dataclass
class Out:
    hidden: torch.Tensor
    logits: torch.Tensor


class Pair(NamedTuple):
    logits: torch.Tensor
    hidden: torch.Tensor


class Net(nn.Module):
    """One tensor of logits; subclasses wrap the same computation in other return values."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(3)
        self.body, self.head = nn.Linear(4, 6), nn.Linear(6, 3)

    def logits_and_hidden(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        hidden = torch.relu(self.body(x))
        return self.head(hidden), hidden

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.logits_and_hidden(x)[0]


class Tupled(Net):
    def forward(self, x):
        logits, hidden = self.logits_and_hidden(x)
        return hidden, logits


class Dicted(Net):
    def forward(self, features):
        logits, hidden = self.logits_and_hidden(features)
        return {"hidden": hidden, "logits": logits}


class Dataclassed(Net):
    def forward(self, x):
        logits, hidden = self.logits_and_hidden(x)
        return Out(hidden, logits)


class Named(Net):
    def forward(self, x):
        return Pair(*self.logits_and_hidden(x))


def train(root, module, data=PAIRS, adapter=None, **extra):
    model = nnx.NNModel(params=nnx.NNModelParams(), module=module, batch_adapter=adapter)
    params = nnx.NNTrainParams(n_epochs=2, seed=0, train_loader=data, val_loader=data, progress=False, **extra)
    return model, model.train(params, root=root)


@pytest.mark.parametrize(
    ("module", "data", "adapter"),
    [
        (Tupled(), PAIRS, nnx.PositionalInputs(1, prediction=1)),
        (Tupled(), PAIRS, nnx.PositionalInputs(1, prediction=-1)),
        (Dicted(), MAPPINGS, nnx.KeywordInputs(["features"], target="labels", prediction="logits")),
        (Dataclassed(), PAIRS, nnx.PositionalInputs(1, prediction="logits")),
        (Named(), PAIRS, nnx.PositionalInputs(1, prediction="logits")),
    ],
    ids=["tuple", "tuple-negative-index", "dict-and-mapping-batches", "dataclass", "named-tuple"],
)
def test_a_named_prediction_trains_and_validates_as_the_one_tensor_module_does(tmp_path, module, data, adapter):
    twin, _ = train(tmp_path / "plain", Net())
    model, run = train(tmp_path / "named", module, data, adapter)
    for mine, theirs in zip(model.net.state_dict().values(), twin.net.state_dict().values(), strict=True):
        assert torch.equal(mine, theirs)
    # the validation score is the named output's: scikit-learn on the trained module's own predictions
    with torch.no_grad():
        predicted = Net.forward(model.net, X).argmax(1)
    assert run.epochs[1].val_edp.accuracy == pytest.approx(skm.accuracy_score(Y, predicted), abs=1e-12)


@pytest.mark.parametrize(
    ("module", "data", "shown", "way_out"),
    [
        (Tupled(), PAIRS, r"a tuple of 2 items \[\[16, 6\], \[16, 3\]\]", r"PositionalInputs\(1, prediction=0\)"),
        (Dicted(), PAIRS, r"a dict with keys \['hidden', 'logits'\]", r"prediction='hidden'"),
        (Dataclassed(), PAIRS, r"a Out with fields \['hidden', 'logits'\]", r"prediction='hidden'"),
        (Net(), MAPPINGS, r"a dict with keys \['features', 'labels'\]", r"KeywordInputs\(\['features'\], target='labels'\)"),
    ],
    ids=["tuple", "dict", "dataclass", "mapping-batch"],
)
def test_without_a_named_prediction_the_first_batch_is_refused_with_the_way_out(tmp_path, module, data, shown, way_out):
    if isinstance(module, Dicted):
        module.forward = lambda x: Dicted.forward(module, x)  # type: ignore[method-assign]
    with pytest.raises(nnx.TrainingInputError, match=f"{shown}.*{way_out}"):
        train(tmp_path, module, data)
    assert not tmp_path.exists() or not any(tmp_path.iterdir())


def test_a_prediction_that_names_no_output_is_refused_naming_what_the_net_returns(tmp_path):
    with pytest.raises(nnx.TrainingInputError, match=r"prediction='logit' names no output.*keys \['hidden', 'logits'\]"):
        train(tmp_path, Dicted(), MAPPINGS, nnx.KeywordInputs(["features"], target="labels", prediction="logit"))
    with pytest.raises(nnx.TrainingInputError, match=r"prediction=2 names no output.*tuple of 2 items"):
        train(tmp_path, Tupled(), PAIRS, nnx.PositionalInputs(1, prediction=2))
    assert not tmp_path.exists() or not any(tmp_path.iterdir())


@pytest.mark.parametrize("bad", [True, 1.0, "", ("logits",)])
def test_a_prediction_of_another_type_is_refused_when_the_adapter_is_made(bad):
    with pytest.raises(nnx.ParamsError, match=r"PositionalInputs.prediction.*an index.*a key or attribute name"):
        nnx.PositionalInputs(1, prediction=bad)


def test_prediction_picks_the_output_for_predict_too(tmp_path):
    model = nnx.NNModel(params=nnx.NNModelParams(), module=Tupled(), batch_adapter=nnx.PositionalInputs(1, prediction=1))
    with torch.no_grad():
        expected = Net.forward(model.net, X).argmax(1).numpy()
    assert (model.predict(X).classes == expected).all()
    bare = nnx.NNModel(params=nnx.NNModelParams(), module=Tupled())
    with pytest.raises(NetOutputError, match=r"a tuple of 2 items.*prediction=0"):
        bare.predict(X)
