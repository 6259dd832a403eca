"""A run's identity: the configuration whose content address (``nnx_core.identity.run_id``) is
the run id, built once for every entry point (``NNModel.run_config``, ``Trainer.run_config``).

The configuration is the model's state, ``train`` (the train params' state), ``trainer`` (a
Trainer's named-optimizer params, only for a Trainer) and ``salt`` (only when given). Nothing
else enters it, so the ids pinned in tests/api/test_run_id_pins.py never change.

A module of your own enters it as its class's importable name and a digest of its parameter
names and shapes (``NNModel``'s ``module_signature``). ``class_path`` names a class the same way
however the code that defines it was started: a class defined in a script run as ``python
train.py`` is ``train.Net``, as it is when a notebook or another script does ``from train import
Net``; under ``python -m pkg.train`` it is ``pkg.train.Net``. Only a class typed into a notebook
or a shell keeps ``__main__`` (it has no importable name). Runs trained before this rule named a
script's classes ``__main__.Net``; ``earlier_config`` rebuilds that configuration so a fresh run
can say where the earlier one is.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nnx_core.errors import ParamsError

__all__ = ["check_salt", "class_path", "earlier_config", "module_topology", "run_config", "tensor_layout"]


def check_salt(salt: object) -> str:
    """``salt`` if it is a non-blank string (``ParamsError`` naming ``salt`` otherwise)."""
    if not isinstance(salt, str) or not salt.strip():
        raise ParamsError("salt", f"must be a non-empty string that is not blank, got {salt!r}; e.g. salt='trial-2'")
    return salt


def run_config(
    model: Mapping[str, Any], train: Mapping[str, Any], salt: str | None, *, trainer: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The run's configuration from the model's state, the train params' state, a Trainer's
    params' state (None for ``NNModel.train``) and the salt (None: no salt); the salt is checked."""
    config = {**model, "train": train}
    if trainer is not None:
        config["trainer"] = trainer
    if salt is not None:
        config["salt"] = check_salt(salt)
    return config


def class_path(cls: type) -> str:
    """``<module>.<qualname>`` of ``cls``, a class of the started script named by the module it is
    imported as (module docstring)."""
    module = cls.__module__
    if module == "__main__":
        module = _main_module() or module
    return f"{module}.{cls.__qualname__}"


def _main_module() -> str | None:
    """The importable name of the started script: ``pkg.train`` under ``python -m pkg.train``, the
    file's stem under ``python train.py``; None in a notebook or a shell."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    name = getattr(spec, "name", None)
    if name and name != "__main__":
        return str(name)
    path = getattr(main, "__file__", None)
    return Path(path).stem if path else None


def earlier_config(config: Mapping[str, Any], cls: type) -> dict[str, Any] | None:
    """The configuration a run of ``config`` had when a script's module classes were named
    ``__main__.<qualname>``; None when ``config`` names no such class."""
    module = config.get("module")
    if cls.__module__ != "__main__" or not isinstance(module, Mapping) or module.get("class") == f"__main__.{cls.__qualname__}":
        return None
    return {**config, "module": {**module, "class": f"__main__.{cls.__qualname__}"}}



def tensor_layout(module: Any) -> list[list[Any]]:
    """``[name, shape, dtype]`` of each entry of a ``torch.nn.Module``'s state dict; a lazy
    module's uninitialised parameter has no shape yet and is written ``[name, None, None]``."""
    from torch import nn  # only where a module is described (reading runs never imports torch)

    layout: list[list[Any]] = []
    for name, t in module.state_dict().items():
        if isinstance(t, nn.parameter.UninitializedTensorMixin):
            layout.append([name, None, None])
        else:
            layout.append([name, list(t.shape), str(t.dtype)])
    return layout


def module_topology(module: Any) -> tuple[str, str]:
    """``(class path, topology digest)`` of a caller's module, the fields of its
    ``RuntimeModule``: the digest covers its state dict's names, shapes and dtypes and its
    ``repr`` (layer hyperparameters such as dropout rates), never weight values."""
    from torch import nn

    if not isinstance(module, nn.Module):
        raise ParamsError("RuntimeModule.of", f"expected a torch.nn.Module, got {type(module).__name__}")
    described = repr([tensor_layout(module), repr(module)])
    return class_path(type(module)), hashlib.sha256(described.encode()).hexdigest()[:32]
