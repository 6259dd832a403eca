"""NNx's dataset wrappers (``nnx.nn.dataset``): train / validation / test loaders with the net's
input and output widths.

* ``NNTabularDataset(df=..., feature_cols=[...], target_col="label")`` — a table (a pandas
  ``DataFrame``, or anything with ``columns`` and ``df[cols].to_numpy()``; pandas is the caller's,
  never imported here) split at random into train / validation / test. Features become
  ``feature_dtype`` tensors, targets int64 class indices; ``output_dim`` is the number of distinct
  targets.
* ``NNDataset(ds_class=MNIST, root_dir="./data")`` — a vision dataset class called as
  ``ds_class(root=, train=, download=, transform=)`` (torchvision's signature; torchvision is the
  caller's); the validation slice is carved out of the ``train=True`` split, the test split is
  left whole.

A split is reproducible with ``seed=``; without it the global torch RNG draws it. A batch size of
None is the whole split in one batch. ``state()`` describes the data (it is not part of a run id;
pass ``NNTrainParams(data_id=...)`` to make the data part of it)::

    >>> import numpy as np
    >>> class Table:  # the two things NNTabularDataset reads from a DataFrame
    ...     columns = ["a", "b", "y"]
    ...     def __init__(self): self.data = {"a": np.arange(10.0), "b": np.ones(10), "y": np.arange(10) % 2}
    ...     def __getitem__(self, key): return Column(np.stack([self.data[k] for k in key], 1) if isinstance(key, list) else self.data[key])
    >>> class Column:
    ...     def __init__(self, values): self.values = values
    ...     def to_numpy(self): return self.values
    >>> ds = NNTabularDataset(df=Table(), feature_cols=["a", "b"], target_col="y", seed=0)
    >>> ds.input_dim, ds.output_dim, ds.state()["n_train"], ds.state()["n_val"]
    (2, 2, 8, 1)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset, random_split

from nnx_core.errors import NNxError, ParamsError, TrainingInputError

BatchSizes = tuple[int | None, int | None, int | None]


class DatasetColumnError(NNxError, KeyError):
    """A column ``NNTabularDataset`` was told to read is not in the table (a ``KeyError``, as NNx
    raises there)."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class NNDatasetBase:
    """What every dataset wrapper gives: ``name``, ``input_dim``, ``output_dim``, the three
    loaders (validation / test None when that split is empty) and ``state()``."""

    name: str = dataclasses.field(init=False)
    input_dim: int = dataclasses.field(init=False)
    output_dim: int = dataclasses.field(init=False)
    train_loader: Any = dataclasses.field(init=False, repr=False)
    val_loader: Any = dataclasses.field(init=False, repr=False)
    test_loader: Any = dataclasses.field(init=False, repr=False)
    _state: dict[str, Any] = dataclasses.field(init=False, repr=False)

    def state(self) -> dict[str, Any]:
        """A plain description of the data (name, widths, split sizes or batch sizes)."""
        return dict(self._state)

    def _set(self, **values: Any) -> None:
        for name, value in values.items():
            object.__setattr__(self, name, value)


def _proportion(path: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or not 0.0 <= value < 1.0:
        raise ParamsError(path, f"must be a number in [0, 1), got {value!r}")
    return float(value)


def _batch_sizes(path: str, value: Any) -> BatchSizes:
    sizes = tuple(value)
    if len(sizes) != 3 or any(s is not None and (isinstance(s, bool) or not isinstance(s, int) or s < 1) for s in sizes):
        raise ParamsError(path, f"must be (train, val, test) batch sizes, each a positive int or None, got {value!r}")
    return sizes  # type: ignore[return-value]


def _generator(seed: int | None) -> torch.Generator:
    """A generator seeded with ``seed``; without one, the global torch RNG (as ``set_seed`` left it)."""
    return torch.default_generator if seed is None else torch.Generator().manual_seed(int(seed))


def _loader(split: Any, size: int | None, *, shuffle: bool) -> DataLoader | None:
    if len(split) == 0:
        return None
    return DataLoader(split, batch_size=size or len(split), shuffle=shuffle)


def _numbers(column: str, raw: np.ndarray) -> np.ndarray:
    """The target column as float64 numbers (numeric strings read as their values)."""
    try:
        return raw.astype(np.float64)
    except (TypeError, ValueError) as exc:
        raise ParamsError("NNTabularDataset.target_col", f"{column!r} must hold numbers ({exc})") from None


def _class_labels(column: str, values: np.ndarray) -> np.ndarray:
    """Integer class labels 0..K-1 of the target column, or a ``ParamsError`` saying what is wrong."""
    where = "NNTabularDataset.target_col"
    if np.isnan(values).any():
        raise ParamsError(where, f"{column!r} holds NaN; class labels must be finite integers 0..K-1")
    if not np.isfinite(values).all():
        raise ParamsError(where, f"{column!r} holds non-finite values (±inf); class labels must be finite integers")
    if (values != np.trunc(values)).any():
        raise ParamsError(where, f"{column!r} holds {values[values != np.trunc(values)][:3].tolist()}; class labels "
                          "must be finite integers 0..K-1")
    labels = values.astype(np.int64)
    present = np.unique(labels)
    if present.tolist() != list(range(len(present))):
        raise ParamsError(where, f"{column!r} holds the labels {present[:10].tolist()}; they must be contiguous "
                          f"integers 0..K-1 (K = {len(present)} classes): remap them")
    return labels


def _check_cells(field: str, dtype_field: str, values: np.ndarray, names: list[str], dtype: torch.dtype) -> None:
    """Refuse cells ``dtype`` cannot hold: non-finite floats, values outside an integer dtype's
    range (after truncation) or beyond a narrower float's largest value; naming the columns."""
    def columns(bad: np.ndarray) -> list[str]:
        return list(dict.fromkeys(names[i % len(names)] for i in np.flatnonzero(bad.any(axis=0))))

    where, said = f"NNTabularDataset.{field}", f"{dtype_field}={dtype}"
    if values.dtype.kind not in "biufc":
        return  # strings or objects: torch's own conversion says what it cannot read
    if values.dtype.kind in "fc":
        bad = ~np.isfinite(values)
        if bad.any():
            raise ParamsError(where, f"{columns(bad)} hold non-finite values (NaN or ±inf), which {said} cannot take; "
                              "drop or impute them first")
    if dtype == torch.bool or values.dtype.kind == "b":
        return
    if not dtype.is_floating_point and not dtype.is_complex:
        info = torch.iinfo(dtype)
        kept = np.trunc(values.real) if values.dtype.kind in "fc" else values
        bad = (kept < info.min) | (kept > info.max)
        if bad.any():
            raise ParamsError(where, f"{columns(bad)} hold values outside the range of {said} "
                              f"[{info.min}, {info.max}]; rescale them or choose a wider dtype")
        return
    largest = torch.finfo(dtype).max
    parts = (values.real, values.imag) if values.dtype.kind == "c" else (values,)
    bad = np.zeros(values.shape, dtype=bool)
    for part in parts:
        bad |= np.abs(part.astype(np.float64)) > largest
    if bad.any():
        raise ParamsError(where, f"{columns(bad)} hold values that overflow {said} (largest {largest:g}); rescale them "
                          "or choose a wider dtype")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class NNTabularDataset(NNDatasetBase):
    """A table of feature columns and an integer class column as train / val / test loaders.
    ``val_proportion`` and ``test_proportion`` (each in [0, 1), together below 1) are drawn at
    random, the rest is train; the train loader shuffles, the others do not. A floating
    ``target_dtype`` makes the target a regression value (``(batch, 1)`` targets, ``output_dim``
    1; not in ``state()``). Cells the dtypes cannot hold (NaN / ±inf, values out of range),
    labels that are not contiguous integers 0..K-1 and a target among the features are refused
    before anything is split."""

    df: Any = dataclasses.field(repr=False)
    feature_cols: Sequence[str]
    target_col: str
    batch_sizes: BatchSizes = (None, None, None)
    val_proportion: float = 0.15
    test_proportion: float = 0.15
    name_override: str | None = None
    feature_dtype: torch.dtype = torch.float32
    seed: int | None = None
    target_dtype: torch.dtype | None = None

    def __post_init__(self) -> None:
        val = _proportion("NNTabularDataset.val_proportion", self.val_proportion)
        test = _proportion("NNTabularDataset.test_proportion", self.test_proportion)
        if val + test >= 1.0:
            raise ParamsError("NNTabularDataset", f"val_proportion + test_proportion must be below 1, got {val + test}")
        sizes = _batch_sizes("NNTabularDataset.batch_sizes", self.batch_sizes)
        columns = list(self.df.columns)
        missing = [c for c in self.feature_cols if c not in columns]
        if missing:
            raise DatasetColumnError(f"NNTabularDataset feature_cols not in the table: {missing} (columns: {columns})")
        if self.target_col not in columns:
            raise DatasetColumnError(f"NNTabularDataset target_col {self.target_col!r} not in the table (columns: {columns})")
        if self.target_col in self.feature_cols:
            raise ParamsError("NNTabularDataset.feature_cols", f"the target_col {self.target_col!r} must not appear in "
                              "feature_cols: the model would see its own label")
        regression = self.target_dtype is not None
        if regression and not (isinstance(self.target_dtype, torch.dtype) and self.target_dtype.is_floating_point):
            raise ParamsError("NNTabularDataset.target_dtype", "must be a floating-point dtype (regression targets), got "
                              f"{self.target_dtype!r}; leave it None for integer class labels")
        values = np.asarray(self.df[list(self.feature_cols)].to_numpy())
        if len(values) == 0:
            raise TrainingInputError("NNTabularDataset needs a non-empty table")
        _check_cells("feature_cols", "feature_dtype", values.reshape(len(values), -1), list(self.feature_cols),
                     self.feature_dtype)
        features = torch.as_tensor(np.array(values), dtype=self.feature_dtype)  # a writable copy
        targets_np = _numbers(self.target_col, np.asarray(self.df[self.target_col].to_numpy()))
        if regression:
            _check_cells("target_col", "target_dtype", targets_np.reshape(-1, 1), [self.target_col], self.target_dtype)
            targets = torch.as_tensor(targets_np, dtype=self.target_dtype).reshape(-1, 1)
        else:
            targets = torch.as_tensor(_class_labels(self.target_col, targets_np))
        n = len(targets)
        n_val, n_test = int(n * val), int(n * test)
        n_train = n - n_val - n_test
        train, val_split, test_split = random_split(
            TensorDataset(features, targets), [n_train, n_val, n_test], generator=_generator(self.seed)
        )
        name = self.name_override or "NNTabularDataset"
        output_dim = 1 if regression else len(np.unique(targets_np))
        self._set(
            name=name, input_dim=len(self.feature_cols), output_dim=output_dim,
            batch_sizes=(sizes[0] or n_train, sizes[1] or max(1, n_val), sizes[2] or max(1, n_test)),
            train_loader=_loader(train, sizes[0], shuffle=True), val_loader=_loader(val_split, sizes[1], shuffle=False),
            test_loader=_loader(test_split, sizes[2], shuffle=False),
            _state={"name": name, "input_dim": len(self.feature_cols), "output_dim": output_dim, "n_train": n_train,
                    "n_val": n_val, "n_test": n_test, "feature_cols": list(self.feature_cols), "target_col": self.target_col},
        )


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class NNDataset(NNDatasetBase):
    """A vision dataset class (torchvision's ``ds_class(root=, train=, download=, transform=)``,
    with ``classes``) as loaders: ``val_proportion`` of its train split becomes validation, its
    test split is the test loader. ``input_dim`` is the product of a sample's shape."""

    ds_class: Callable[..., Any]
    root_dir: str = "./data"
    download: bool = True
    transform: Callable[[Any], Any] | None = None
    batch_sizes: BatchSizes = (None, None, None)
    val_proportion: float = 0.1
    seed: int | None = None

    def __post_init__(self) -> None:
        val = _proportion("NNDataset.val_proportion", self.val_proportion)
        sizes = _batch_sizes("NNDataset.batch_sizes", self.batch_sizes)
        full, test = (self.ds_class(root=self.root_dir, train=flag, download=self.download, transform=self.transform)
                      for flag in (True, False))
        n_val = int(len(full) * val)
        train, val_split = random_split(full, [len(full) - n_val, n_val], generator=_generator(self.seed))
        resolved = (sizes[0] or len(train), sizes[1] or max(1, n_val), sizes[2] or max(1, len(test)))
        name = getattr(self.ds_class, "__name__", type(full).__name__)
        input_dim = math.prod(torch.as_tensor(full[0][0]).shape)
        self._set(
            name=name, input_dim=input_dim, output_dim=len(full.classes), batch_sizes=resolved,
            train_loader=_loader(train, resolved[0], shuffle=True), val_loader=_loader(val_split, resolved[1], shuffle=False),
            test_loader=_loader(test, resolved[2], shuffle=False),
            _state={"name": name, "input_dim": input_dim, "output_dim": len(full.classes),
                    "train_batch_size": f"{resolved[0]:,}", "val_batch_size": f"{resolved[1]:,}",
                    "test_batch_size": f"{resolved[2]:,}"},
        )


__all__ = ["DatasetColumnError", "NNDataset", "NNDatasetBase", "NNTabularDataset"]
