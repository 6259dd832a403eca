"""NNx's dataset wrappers (``nnx.nn.dataset``: ``NNTabularDataset``, ``NNDataset``,
``NNDatasetBase``), written from NNx's documentation of them: train / val / test loaders carved at
random (reproducibly with ``seed=``), ``input_dim`` / ``output_dim``, ``state()``, None for an empty
split, and the refusals of bad proportions and missing columns. pandas is not a dependency here:
the table is a minimal stand-in for the two things the wrapper reads from a ``DataFrame``."""

from __future__ import annotations

import doctest

import numpy as np
import pytest
import torch

import nnx_api as nnx
import nnx_api.parts.datasets
from nnx_api.nn.dataset import nn_dataset, nn_dataset_base, nn_tabular_dataset


class Column:
    def __init__(self, values):
        self.values = np.asarray(values)

    def to_numpy(self):
        return self.values


class Table:
    """``columns`` and ``table[name]`` / ``table[[names]]`` with ``.to_numpy()``: what a DataFrame offers."""

    def __init__(self, **columns):
        self.data = {k: np.asarray(v) for k, v in columns.items()}
        self.columns = list(columns)

    def __getitem__(self, key):
        if isinstance(key, list):
            return Column(np.stack([self.data[k] for k in key], axis=1))
        return Column(self.data[key])


def table(n=100, classes=3):
    rng = np.random.default_rng(0)
    return Table(a=rng.normal(size=n), b=rng.normal(size=n), c=np.arange(n, dtype=float), label=np.arange(n) % classes)


def rows(loader):
    return torch.cat([x for x, _ in loader]) if loader is not None else None


def test_tabular_dataset_splits_into_three_loaders():
    ds = nnx.NNTabularDataset(df=table(), feature_cols=["a", "b", "c"], target_col="label", batch_sizes=(16, 8, None),
                              val_proportion=0.15, test_proportion=0.1, seed=3)
    assert (ds.input_dim, ds.output_dim, ds.name) == (3, 3, "NNTabularDataset")
    assert ds.state() == {"name": "NNTabularDataset", "input_dim": 3, "output_dim": 3, "n_train": 75, "n_val": 15,
                          "n_test": 10, "feature_cols": ["a", "b", "c"], "target_col": "label"}
    assert ds.batch_sizes == (16, 8, 10)  # None: the whole split in one batch
    x_train, x_val, x_test = rows(ds.train_loader), rows(ds.val_loader), rows(ds.test_loader)
    assert (len(x_train), len(x_val), len(x_test)) == (75, 15, 10)
    ids = torch.cat([x_train[:, 2], x_val[:, 2], x_test[:, 2]]).sort().values  # column c numbers the rows
    assert torch.equal(ids, torch.arange(100, dtype=torch.float32))  # a partition: every row once
    x, y = next(iter(ds.test_loader))
    assert x.dtype == torch.float32 and y.dtype == torch.int64
    assert torch.equal(y, (x[:, 2].long() % 3))  # features and targets stay row-aligned


def test_tabular_dataset_seed_makes_the_split_reproducible():
    def val_rows(seed):
        ds = nnx.NNTabularDataset(df=table(), feature_cols=["c"], target_col="label", seed=seed)
        return rows(ds.val_loader)[:, 0]

    assert torch.equal(val_rows(7), val_rows(7))
    assert not torch.equal(val_rows(7), val_rows(8))


def test_tabular_dataset_empty_splits_are_none_and_it_trains(runs):
    ds = nnx.NNTabularDataset(df=table(n=30), feature_cols=["a", "b"], target_col="label", val_proportion=0.2,
                              test_proportion=0.0, batch_sizes=(8, None, None), seed=0, name_override="toy")
    assert ds.test_loader is None and ds.name == "toy"
    model = nnx.NNModel(nnx.NNParams(input_dim=ds.input_dim, output_dim=ds.output_dim), nnx.NNModelParams())
    run = model.train(nnx.NNTrainParams(n_epochs=1, train_loader=ds.train_loader, val_loader=ds.val_loader, seed=0),
                      root=runs)
    assert run.epochs[0].val_edp.count == 6


@pytest.mark.parametrize(
    "kw",
    [{"val_proportion": 1.0}, {"test_proportion": -0.1}, {"val_proportion": 0.6, "test_proportion": 0.4},
     {"batch_sizes": (0, None, None)}, {"batch_sizes": (8, 8)}],
)
def test_tabular_dataset_refuses_bad_proportions_and_batch_sizes(kw):
    with pytest.raises(ValueError):  # ParamsError: NNx code catching ValueError keeps working
        nnx.NNTabularDataset(df=table(), feature_cols=["a"], target_col="label", **kw)


def test_tabular_dataset_refuses_missing_columns_and_an_empty_table():
    with pytest.raises(KeyError, match="zz"):
        nnx.NNTabularDataset(df=table(), feature_cols=["a", "zz"], target_col="label")
    with pytest.raises(KeyError, match="nope"):
        nnx.NNTabularDataset(df=table(), feature_cols=["a"], target_col="nope")
    with pytest.raises(ValueError, match="non-empty"):
        nnx.NNTabularDataset(df=Table(a=[], label=[]), feature_cols=["a"], target_col="label")


class Digits:
    """A vision dataset class with torchvision's constructor: 50 train / 20 test 1×4×4 images."""

    classes = ["zero", "one"]
    calls: list = []

    def __init__(self, root, train, download, transform):
        Digits.calls.append((root, train, download, transform))
        n = 50 if train else 20
        self.items = [(torch.full((1, 4, 4), float(i)), i % 2) for i in range(n)]

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


def test_vision_dataset_carves_validation_out_of_train_and_keeps_test_whole():
    Digits.calls.clear()
    ds = nnx.NNDataset(ds_class=Digits, root_dir="/data", download=False, batch_sizes=(10, None, 5), val_proportion=0.2,
                       seed=1)
    assert Digits.calls == [("/data", True, False, None), ("/data", False, False, None)]
    assert (ds.name, ds.input_dim, ds.output_dim) == ("Digits", 16, 2)
    assert ds.batch_sizes == (10, 10, 5)
    assert ds.state() == {"name": "Digits", "input_dim": 16, "output_dim": 2, "train_batch_size": "10",
                          "val_batch_size": "10", "test_batch_size": "5"}
    assert (len(rows(ds.train_loader)), len(rows(ds.val_loader)), len(rows(ds.test_loader))) == (40, 10, 20)
    assert sorted(rows(ds.test_loader)[:, 0, 0, 0].tolist()) == [float(i) for i in range(20)]


def test_dataset_module_paths_and_docstring_example():
    assert nn_tabular_dataset.NNTabularDataset is nnx.NNTabularDataset
    assert nn_dataset.NNDataset is nnx.NNDataset
    assert nn_dataset_base.NNDatasetBase is nnx.NNDatasetBase
    assert issubclass(nnx.NNTabularDataset, nnx.NNDatasetBase) and issubclass(nnx.NNDataset, nnx.NNDatasetBase)
    from nnx_api.nn.dataset.nn_graph_dataset import NNGraphDataset

    with pytest.raises(nnx.OutOfScopeError, match="graph nets"):
        NNGraphDataset()
    outcome = doctest.testmod(nnx_api.parts.datasets)
    assert outcome.attempted > 0 and outcome.failed == 0


def test_tabular_dataset_refuses_what_its_dtypes_cannot_hold_and_reads_regression_targets():
    """NNx's refusals, before the split: a target among the features, non-finite cells (naming the
    columns), labels that are not contiguous 0..K-1; a floating ``target_dtype`` is regression."""
    with pytest.raises(nnx.ParamsError, match="must not appear in feature_cols"):
        nnx.NNTabularDataset(df=table(), feature_cols=["a", "label"], target_col="label")
    bad = Table(a=[1.0, np.inf, 2.0], b=[1.0, 2.0, 3.0], label=[0, 1, 0])
    with pytest.raises(nnx.ParamsError, match=r"\['a'\] hold non-finite values .*torch.float32"):
        nnx.NNTabularDataset(df=bad, feature_cols=["a", "b"], target_col="label")
    with pytest.raises(nnx.ParamsError, match="contiguous"):
        nnx.NNTabularDataset(df=Table(a=[1.0, 2.0], label=[0, 5]), feature_cols=["a"], target_col="label")
    ds = nnx.NNTabularDataset(df=Table(a=[1.0, 2.0, 3.0], label=[0.5, 1.5, 2.5]), feature_cols=["a"],
                              target_col="label", target_dtype=torch.float64, val_proportion=0.0, test_proportion=0.0)
    _, target = next(iter(ds.train_loader))
    assert (ds.output_dim, target.dtype, tuple(target.shape)) == (1, torch.float64, (3, 1))
    assert "target_dtype" not in ds.state()
