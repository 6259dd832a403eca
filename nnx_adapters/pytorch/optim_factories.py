"""User-registered optimizers (NNx's ``register_optimizer_factory``).

``register_optimizer_factory(id, version, factory)`` registers, for this process,
``factory(param_groups, config) -> torch.optim.Optimizer``: the optimizer that
``NNOptimFactoryParams(factory=OptimizerFactorySpec(id, version, config), max_lr=...)`` names.
The factory receives the parameter groups (dicts with ``params``, ``lr`` and ``weight_decay``, and
whatever a ``NNParamGroupSpec`` overrides) and a read-only copy of the spec's ``config``; it must
return an optimizer holding exactly those parameters. The spec holds no code: a run naming it
loads without the factory; only training with it needs the registration.
"""

from __future__ import annotations

import copy
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from nnx_core.errors import NNxError, ParamsError
from nnx_core.validate import check_int, check_str

OptimizerFactory = Callable[[list[dict[str, Any]], Mapping[str, Any]], torch.optim.Optimizer]
_REGISTRY: dict[tuple[str, int], OptimizerFactory] = {}
_identity = id  # the builtin: the functions below name their factory id ``id``, as NNx does


class MissingOptimizerFactoryError(NNxError, ValueError, LookupError):
    """An ``OptimizerFactorySpec`` names a factory this process has not registered (a
    ``ValueError``, as NNx raises there)."""


def _key(id: str, version: int) -> tuple[str, int]:  # noqa: A002
    return check_str("register_optimizer_factory.id", id), check_int("register_optimizer_factory.version", version, minimum=1)


def register_optimizer_factory(id: str, version: int, factory: OptimizerFactory, *, replace: bool = False) -> None:  # noqa: A002
    """Register ``factory(param_groups, config) -> torch.optim.Optimizer`` as ``(id, version)``.
    An existing registration is kept unless ``replace=True``: bump ``version`` when what the
    factory builds changes, so a resumed optimizer state never lands in another optimizer."""
    key = _key(id, version)
    if not callable(factory):
        raise ParamsError("register_optimizer_factory.factory", f"must be callable (param_groups, config) -> Optimizer, got {factory!r}")
    if key in _REGISTRY and not replace:
        raise ParamsError("register_optimizer_factory", f"{key[0]}@v{key[1]} is already registered; pass replace=True or a new version")
    _REGISTRY[key] = factory


def unregister_optimizer_factory(id: str, version: int) -> bool:  # noqa: A002
    """Forget ``(id, version)``; whether it was registered."""
    return _REGISTRY.pop((id, version), None) is not None


def registered_optimizer_factories() -> tuple[tuple[str, int], ...]:
    """The registered ``(id, version)`` pairs, sorted."""
    return tuple(sorted(_REGISTRY))


def build_registered_optimizer(
    id: str, version: int, config: Mapping[str, Any], groups: Sequence[Mapping[str, Any]],  # noqa: A002
    names: Mapping[int, str] | None = None,
) -> torch.optim.Optimizer:
    """The optimizer factory ``(id, version)`` builds over ``groups``; refused unless it is a
    ``torch.optim.Optimizer`` holding exactly the given parameters, each once (``names``:
    ``id(param) → name``, to name the ones that differ)."""
    factory = _REGISTRY.get((id, version))
    if factory is None:
        versions = sorted(v for known, v in _REGISTRY if known == id)
        problem = (f"has no registered version {version} (registered: {', '.join(f'v{v}' for v in versions)})"
                   if versions else "is not registered in this process")
        raise MissingOptimizerFactoryError(
            f"optimizer factory {id!r} {problem}; call nnx.register_optimizer_factory({id!r}, {version}, factory) "
            "before training"
        )
    optimizer = factory([dict(g) for g in groups], types.MappingProxyType(copy.deepcopy(dict(config))))
    where = f"optimizer factory {id}@v{version}"
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise ParamsError(where, (
            f"must return a torch.optim.Optimizer (expected a torch.optim.Optimizer, it returned "
            f"{type(optimizer).__name__}); build it from the param_groups argument"))
    given = [p for g in groups for p in g["params"]]
    held = [p for g in optimizer.param_groups for p in g["params"]]
    if sorted(map(_identity, given)) != sorted(map(_identity, held)):
        raise ParamsError(where, (
            f"must return an optimizer holding exactly the {len(given)} parameters it was given (it holds {len(held)}: "
            f"{_ownership(given, held, names or {})}); build it from the param_groups argument"))
    return optimizer


def _ownership(given: list[Any], held: list[Any], names: Mapping[int, str]) -> str:
    """Which parameters an optimizer misses, holds twice or holds without being given them."""
    wanted, counts = {_identity(p) for p in given}, {}
    for p in held:
        counts[_identity(p)] = counts.get(_identity(p), 0) + 1
    listed = {
        "missing": [k for k in dict.fromkeys(map(_identity, given)) if k not in counts],
        "duplicated": [k for k, n in counts.items() if n > 1],
        "foreign": [k for k in counts if k not in wanted],
    }
    return "; ".join(f"{what} {[names.get(k, f'<parameter {k}>') for k in keys]}" for what, keys in listed.items() if keys)

__all__ = [
    "MissingOptimizerFactoryError", "OptimizerFactory", "build_registered_optimizer", "register_optimizer_factory",
    "registered_optimizer_factories", "unregister_optimizer_factory",
]
