"""The one helper the scenarios share: which package is under test, and how a value is written down.

A scenario imports the package under test through ``nnx`` below (``NNX_PACKAGE`` names it: ``nnx``
for NNx 0.4.1, ``nnx_api`` for this project) and records what a user can see into an ``Obs``.
"""

from __future__ import annotations

import builtins
import dataclasses
import importlib
import os
import random
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

PACKAGE = os.environ.get("NNX_PACKAGE", "nnx_api")
nnx = importlib.import_module(PACKAGE)

BUILTINS = (
    "ValueError", "TypeError", "KeyError", "IndexError", "LookupError", "RuntimeError", "NotImplementedError",
    "FileExistsError", "FileNotFoundError", "OSError", "FloatingPointError", "ArithmeticError",
    "AttributeError", "TimeoutError", "PermissionError",
)


def sub(path: str) -> Any:
    """The package's submodule ``path`` (``"nn.callbacks"`` → ``nnx.nn.callbacks``)."""
    return importlib.import_module(f"{PACKAGE}.{path}")


def seed(value: int = 0) -> None:
    random.seed(value)
    np.random.seed(value)
    torch.manual_seed(value)


def error(exc: BaseException) -> dict:
    return {"raised": type(exc).__name__,
            "bases": [n for n in BUILTINS if isinstance(exc, getattr(builtins, n))]}


def describe(value: Any) -> Any:
    """A JSON-able picture of ``value``: plain data as is, arrays/tensors as kind+dtype+shape."""
    if isinstance(value, str):  # a path under the scenario's temporary folder: relative to it
        return value.replace(os.getcwd(), "<cwd>")
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, float):
        return value
    if isinstance(value, (np.integer, np.floating)):
        return {"type": "numpy-scalar", "dtype": str(value.dtype)}
    if isinstance(value, torch.Tensor):
        return {"type": "tensor", "dtype": str(value.dtype), "shape": list(value.shape)}
    if isinstance(value, np.ndarray):
        return {"type": "ndarray", "dtype": str(value.dtype), "shape": list(value.shape)}
    if isinstance(value, (list, tuple)):
        return {"type": type(value).__name__, "len": len(value)}
    return {"type": type(value).__name__}


def floats(values: Any) -> list:
    """Tensor / array / nested list → flat list of Python floats."""
    if isinstance(values, torch.Tensor):
        values = values.detach().cpu().double().reshape(-1).tolist()
    return [float(v) for v in np.asarray(values, dtype=np.float64).reshape(-1)]


def weights(net: torch.nn.Module) -> dict:
    return {name: floats(t) for name, t in sorted(net.state_dict().items())}


def field_names(obj_or_cls: Any) -> Any:
    """``dataclasses.fields`` names, or the error it raised (not a dataclass)."""
    try:
        return [f.name for f in dataclasses.fields(obj_or_cls)]
    except TypeError as exc:
        return error(exc)


def attr(obj: Any, name: str) -> Any:
    """``describe(obj.name)``, or ``"<no attribute>"``."""
    return describe(getattr(obj, name, "<no attribute>"))


class Obs:
    """What one scenario observed: ``obs[key] = value``, or ``obs.call(key, fn)`` which records
    ``fn()``'s result or the exception it raised (so one missing feature does not hide the rest)."""

    def __init__(self) -> None:
        self.data: dict[str, Any] = {}

    def __setitem__(self, key: str, value: Any) -> None:
        self.data[key] = value

    def call(self, key: str, fn: Callable[[], Any], picture: Callable[[Any], Any] = lambda v: v) -> Any:
        try:
            value = fn()
        except Exception as exc:  # noqa: BLE001 — the exception *is* the observation
            self.data[key] = error(exc)
            return None
        self.data[key] = picture(value)
        return value


def fixed_weights(net: torch.nn.Module) -> None:
    """Overwrite every parameter with values that depend only on its sorted position and shape, so a
    training comparison does not hinge on how either package draws its initial weights."""
    with torch.no_grad():
        for k, (_, p) in enumerate(sorted(net.named_parameters())):
            g = torch.Generator().manual_seed(1000 + k)
            p.copy_(torch.rand(p.shape, generator=g) - 0.5)


def toy_model():
    """The scenarios' model: a 4 → 8 → 3 ReLU MLP without dropout, its weights ``fixed_weights``."""
    model = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=[8], dropout_prob=0.0,
                                     activation=nnx.Activations.RELU),
                        nnx.NNModelParams(net=nnx.Nets.FEED_FWD))
    fixed_weights(model.net)
    return model


def toy_data(n: int = 12, dim: int = 4, classes: int = 3, batch: int = 4, seed_value: int = 7):
    """``n`` rows of ``dim`` features with labels in ``range(classes)``, as a list of batches."""
    g = torch.Generator().manual_seed(seed_value)
    x = torch.randn(n, dim, generator=g)
    y = torch.randint(0, classes, (n,), generator=g)
    return x, y, [(x[i:i + batch], y[i:i + batch]) for i in range(0, n, batch)]


def idp_rows(idps) -> list:
    """The per-record fields a user reads from ``run.idps``."""
    rows = []
    for idp in idps:
        rows.append({
            "iter_idx": idp.iter_idx, "epoch_idx": idp.epoch_idx, "batch_idx": idp.batch_idx,
            "update_count": getattr(idp, "update_count", "<no attribute>"),
            "lr": float(idp.lr), "has_val_edp": idp.val_edp is not None,
            "train_loss": None if idp.train_edp.loss is None else float(idp.train_edp.loss),
        })
    return rows
