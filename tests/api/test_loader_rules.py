"""Rules for loaders, batches, batch adapters and the model object: the same loader for training
and validation, a loader that can yield no batch, whole arrays given as a loader, a batch adapter
whose reading of the batch leaves no target (or the class given for an instance), a tuple batch
of several inputs without an adapter, float targets of a regression under the classifier
default, and one NNModel object trained into several runs. Each is said before anything is
written, or (the warnings) without changing what is trained."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import nnx_api as nnx


def data(n: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return torch.randn(n, 4, generator=g), torch.arange(n) % 3


def loader(batch_size: int = 8, **kw) -> DataLoader:
    return DataLoader(TensorDataset(*data()), batch_size=batch_size, **kw)


def model() -> nnx.NNModel:
    nnx.set_seed(0)
    return nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(8,)), nnx.NNModelParams())


def params(**kw) -> nnx.NNTrainParams:
    return nnx.NNTrainParams(**{"n_epochs": 1, "seed": 0, "train_loader": loader(), "progress": False, **kw})


def nothing_written(root) -> bool:
    runs = root / "runs"
    return not runs.exists() or not any(runs.iterdir())


class OneInput(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(4, 3)

    def forward(self, x):
        return self.body(x)


class TwoInputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 3), nn.Linear(4, 3)

    def forward(self, a, b):
        return self.a(a) + self.b(b)


class AutoEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(4, 4)

    def forward(self, x):
        return self.body(x)


# -- loaders ---------------------------------------------------------------------------------------------------
def test_the_same_loader_for_training_and_validation_is_warned_about(tmp_path):
    same = loader()
    with pytest.warns(UserWarning, match="val_loader is the same loader as train_loader"):
        model().train(params(train_loader=same, val_loader=same), root=tmp_path / "a")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model().train(params(val_loader=loader()), root=tmp_path / "b")  # another loader (even of the same rows): quiet


def test_a_loader_that_can_yield_no_batch_says_why():
    with pytest.raises(nnx.ParamsError, match=r"drop_last=True drops the only, partial batch \(batch_size=64 > 16 rows"):
        params(train_loader=loader(batch_size=64, drop_last=True))
    with pytest.raises(nnx.ParamsError, match="val_loader: yields no batch: its dataset is empty"):
        params(val_loader=DataLoader(TensorDataset(torch.zeros(0, 4), torch.zeros(0)), batch_size=4))
    assert params(train_loader=loader(batch_size=64)).train_loader is not None  # one partial batch: fine
    assert params(train_loader=loader(batch_size=16, drop_last=True)).train_loader is not None


def test_whole_arrays_given_as_a_loader_are_told_to_be_wrapped():
    x, y = data()
    with pytest.raises(nnx.ParamsError, match=r"wrap it: DataLoader\(TensorDataset\(X, Y\), batch_size="):
        params(train_loader=(x, y))
    with pytest.raises(nnx.ParamsError, match="val_loader: is a tuple of 2 whole arrays"):
        params(val_loader=(x.numpy(), y.numpy()))
    assert len(params(train_loader=[(x[:8], y[:8]), (x[8:], y[8:])]).train_loader) == 2  # a list of batches


# -- batch adapters -----------------------------------------------------------------------------------------------
def test_a_keyword_target_missing_from_the_batch_names_the_keys(tmp_path):
    x, y = data()
    batches = [{"x": x[i:i + 8], "y": y[i:i + 8]} for i in range(0, 16, 8)]
    m = nnx.NNModel(module=OneInput(), batch_adapter=nnx.KeywordInputs(["x"]))
    with pytest.raises(nnx.TrainingInputError, match=r"no target key 'labels'.*\['x', 'y'\].*target="):
        m.train(params(train_loader=batches), root=tmp_path)
    assert nothing_written(tmp_path)
    fixed = nnx.NNModel(module=OneInput(), batch_adapter=nnx.KeywordInputs(["x"], target="y"))
    assert fixed.train(params(train_loader=batches), root=tmp_path).epochs


@pytest.mark.parametrize("cls", [nnx.KeywordInputs, nnx.PositionalInputs])
def test_an_adapter_class_for_an_instance_says_to_call_it(cls):
    with pytest.raises(nnx.ParamsError, match=f"is the class {cls.__name__}.*write {cls.__name__}\\(\\.\\.\\.\\)"):
        nnx.NNModel(module=OneInput(), batch_adapter=cls)


def test_positional_inputs_taking_every_item_as_an_input_is_refused_before_the_forward(tmp_path):
    m = nnx.NNModel(module=OneInput(), batch_adapter=nnx.PositionalInputs(2))
    with pytest.raises(nnx.TrainingInputError, match=r"PositionalInputs\(2\) reads all 2 items.*no item is left as the "
                                                     r"target; the module's forward takes 1 input.*PositionalInputs\(1\)"):
        m.train(params(), root=tmp_path)
    assert nothing_written(tmp_path)


def test_a_tuple_batch_of_several_inputs_suggests_positional_inputs(tmp_path):
    x, y = data()
    with pytest.raises(nnx.TrainingInputError, match=r"forward takes 2 inputs.*PositionalInputs\(2\)"):
        nnx.NNModel(module=TwoInputs()).train(params(train_loader=[(x, x.flip(0), y)]), root=tmp_path)
    fixed = nnx.NNModel(module=TwoInputs(), batch_adapter=nnx.PositionalInputs(2))
    assert fixed.train(params(train_loader=[(x, x.flip(0), y)]), root=tmp_path).epochs


# -- the classifier default over continuous targets ----------------------------------------------------------------
def test_float_targets_shaped_like_the_inputs_point_to_a_regression_loss(tmp_path):
    x, _ = data()
    reconstruct = DataLoader(TensorDataset(x, x), batch_size=8)
    with pytest.raises(nnx.TaskValidationError, match=r"NNModelParams\(loss=nnx.Losses.MEAN_SQUARED_ERROR\)") as caught:
        nnx.NNModel(module=AutoEncoder()).train(params(train_loader=reconstruct), root=tmp_path)
    assert "shaped like the model's outputs" in str(caught.value)
    mse = nnx.NNModel(params=nnx.NNModelParams(loss="mean_squared_error"), module=AutoEncoder())
    assert mse.train(params(train_loader=reconstruct), root=tmp_path).epochs


# -- one NNModel object, several runs ---------------------------------------------------------------------------
def test_an_nnmodel_trained_again_into_a_new_run_is_warned_about(tmp_path):
    m = model()
    first = m.train(params(), root=tmp_path)
    with pytest.warns(UserWarning, match=f"already trained run {first.id}.*build a new NNModel per run"):
        m.train(params(optim=nnx.NNOptimParams(max_lr=0.02)), root=tmp_path)


def test_an_nnmodel_going_on_with_its_own_run_or_a_lineage_run_is_quiet(tmp_path):
    m = model()
    first = m.train(params(resume="auto"), root=tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        again = m.train(params(resume="auto"), root=tmp_path)  # the same run: returned as it is
        longer = m.train(params(n_epochs=2, resume_from_run_id=first.id), root=tmp_path)  # an extension
        model().train(params(), root=tmp_path / "other")  # a new object per run
    assert again.id == first.id and longer.id != first.id
