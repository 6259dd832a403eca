"""Fine-tuning helpers: freeze parameters by name, load pretrained weights.

* ``freeze(module, *patterns)`` / ``unfreeze(module, *patterns)`` set ``requires_grad`` on the
  parameters whose dotted name matches a glob (``fnmatch``, case-sensitive; ``*`` crosses dots:
  ``"layers.0.*"``); they return how many parameters changed. No pattern is refused (``"*"``
  means all). ``frozen(module)`` lists the frozen names, sorted.
* ``load_pretrained(module, source, key_map=None, strict=False, prefix=None)`` loads the
  overlapping keys of a state dict — a path (read with the safe loader: tensors only, never
  code), a mapping or another module — after stripping ``prefix`` and rewriting key prefixes
  with ``key_map``; it reports loaded / missing / unexpected keys (``strict=True`` refuses any).
* ``build_param_groups(module, specs, default_lr, default_weight_decay, strict=False)``: the
  optimizer parameter groups of ``NNParamGroupSpec`` s, as ``NNModel`` (and, with ``strict``,
  ``Trainer``) builds them: the first matching spec owns a parameter, frozen ones are left out.

>>> net = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 1))
>>> freeze(net, "0.*"), frozen(net)
(2, ['0.bias', '0.weight'])
"""

from __future__ import annotations

import fnmatch
import os
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import torch
from torch import nn

from nnx_core.errors import ParamsError, ResumeMismatchError
from nnx_adapters.pytorch.optim import param_groups as optimizer_groups
from nnx_adapters.pytorch.state import safe_load
from nnx_api.config.optim_params import NNParamGroupSpec


class PretrainedKeysError(ResumeMismatchError, RuntimeError):
    """``load_pretrained(strict=True)`` met keys the module and the source do not share: a
    ``ResumeMismatchError`` (a ``ValueError``) and a ``RuntimeError``, as PyTorch's strict
    ``load_state_dict`` raises there. Nothing was loaded."""


def _set_trainable(module: nn.Module, patterns: tuple[str, ...], trainable: bool, what: str) -> int:
    if not patterns:
        raise ParamsError(what, "needs at least one pattern (a glob over parameter names); pass '*' for every parameter")
    changed = 0
    for name, parameter in module.named_parameters():
        if any(fnmatch.fnmatchcase(name, p) for p in patterns):
            changed += parameter.requires_grad != trainable
            parameter.requires_grad = trainable
    return changed


def freeze(module: nn.Module, *patterns: str) -> int:
    """Freeze the parameters matching any pattern; how many were trainable before."""
    return _set_trainable(module, patterns, False, "freeze")


def unfreeze(module: nn.Module, *patterns: str) -> int:
    """Unfreeze the parameters matching any pattern; how many were frozen before."""
    return _set_trainable(module, patterns, True, "unfreeze")


def frozen(module: nn.Module) -> list[str]:
    """The dotted names of the frozen parameters, sorted."""
    return sorted(name for name, p in module.named_parameters() if not p.requires_grad)


@attrs.frozen
class LoadPretrainedResult:
    """Which keys ``load_pretrained`` loaded, which the module kept (missing from the source) and
    which the source had that the module does not (unexpected); each sorted."""

    loaded_keys: list[str]
    missing_keys: list[str]
    unexpected_keys: list[str]


def read_state_dict(source: str | os.PathLike[str] | Mapping[str, Any] | nn.Module) -> dict[str, Any]:
    """A state dict from a path (safe loader), a mapping or a module."""
    if isinstance(source, nn.Module):
        return dict(source.state_dict())
    if isinstance(source, Mapping):
        return dict(source)
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if path.is_dir():
            run = (f"; it is the folder of run {path.name}, whose weights NNModel.from_checkpoint({path.name!r}, "
                   f"root={str(path.parent)!r}) loads") if (path / "run.yaml").is_file() else ""
            raise ParamsError("load_pretrained.source", f"{str(source)!r} is a folder; load_pretrained reads one file (a "
                              f"state dict saved with torch.save, or a .safetensors file){run}")
        loaded = safe_load(Path(source).read_bytes(), where=str(source))
        if not isinstance(loaded, Mapping):
            raise ParamsError("load_pretrained.source", f"{source} holds a {type(loaded).__name__}, not a state dict")
        return dict(loaded)
    raise ParamsError("load_pretrained.source", f"must be a file path, dict, or nn.Module, got {type(source).__name__}")


def load_pretrained(
    module: nn.Module,
    source: str | os.PathLike[str] | Mapping[str, Any] | nn.Module,
    *,
    key_map: Mapping[str, str] | None = None,
    strict: bool = False,
    prefix: str | None = None,
) -> LoadPretrainedResult:
    """Load the keys ``source`` and ``module`` share into ``module`` (in place)."""
    remapped: dict[str, Any] = {}
    for key, value in read_state_dict(source).items():
        new = key[len(prefix):] if prefix and key.startswith(prefix) else key
        for foreign, local in (key_map or {}).items():
            if new.startswith(foreign):
                new = local + new[len(foreign):]
                break
        if new in remapped and not torch.equal(remapped[new], value):
            raise ParamsError(
                "load_pretrained.key_map", f"prefix / key_map collapses two different source tensors onto {new!r}"
            )
        remapped[new] = value
    target = set(module.state_dict())
    loaded, missing, unexpected = sorted(target & set(remapped)), sorted(target - set(remapped)), sorted(set(remapped) - target)
    if strict and (missing or unexpected):
        raise PretrainedKeysError(
            f"load_pretrained(strict=True): key mismatches, nothing loaded: missing {missing}, unexpected "
            f"{unexpected}; map the source's names with key_map= / prefix=, or pass strict=False to load the shared keys"
        )
    module.load_state_dict({k: remapped[k] for k in loaded}, strict=False)
    return LoadPretrainedResult(loaded, missing, unexpected)


def build_param_groups(
    module: nn.Module, specs: list[NNParamGroupSpec], default_lr: float, default_weight_decay: float, strict: bool = False,
) -> list[dict[str, Any]]:
    """Torch optimizer groups (``{"params": [...], "lr": ..., "weight_decay": ...}``) of ``specs``
    over ``module``'s trainable parameters; unmatched ones form a last default group unless
    ``strict``."""
    spec = types.SimpleNamespace(param_groups=tuple(specs), max_lr=default_lr)
    groups, _ = optimizer_groups(module, "default", spec, strict=strict, required=False)
    return [{"lr": default_lr, "weight_decay": default_weight_decay, **g} for g in groups]


__all__ = [
    "LoadPretrainedResult", "NNParamGroupSpec", "PretrainedKeysError", "build_param_groups", "freeze", "frozen", "load_pretrained", "read_state_dict",
    "unfreeze",
]
