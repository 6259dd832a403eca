"""``ComponentSpec``: what ``component_spec()`` returns — a component's name, schema version and
whether a resume requires it — and the two questions every restore asks of a component.

A component may return a plain ``(name, version)`` pair instead (the built-in ones do); a spec
unpacks and indexes as that pair, so both forms are read the same way everywhere.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import attrs

from nnx_core.errors import ParamsError

__all__ = ["ComponentSpec", "call_with_version", "spec_of"]

_SLUG = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def _check_name(_instance: Any, _attribute: Any, value: Any) -> None:
    if not isinstance(value, str) or _SLUG.fullmatch(value) is None:
        raise ParamsError("ComponentSpec.name", f"must be a slug (letters, digits, '.', '_', '-'), got {value!r}")


def _check_version(_instance: Any, _attribute: Any, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ParamsError("ComponentSpec.version", f"must be a positive integer, got {value!r}")


def _check_required(_instance: Any, _attribute: Any, value: Any) -> None:
    if not isinstance(value, bool):
        raise ParamsError("ComponentSpec.required", f"must be a bool (True or False), got {value!r}")


@attrs.frozen
class ComponentSpec:
    """A checkpointed component's identity: ``name`` (a slug, unique in a run), ``version`` (of
    its state's schema, from 1) and ``required`` (False: a resume whose checkpoint has no state
    for it starts it fresh, and a run without it ignores its saved state). Unpacks as
    ``name, version = spec``."""

    name: str = attrs.field(validator=_check_name)
    version: int = attrs.field(default=1, kw_only=True, validator=_check_version)
    required: bool = attrs.field(default=True, kw_only=True, validator=_check_required)

    def __iter__(self) -> Iterator[Any]:
        return iter((self.name, self.version))

    def __getitem__(self, index: int) -> Any:
        return (self.name, self.version)[index]

    def __len__(self) -> int:
        return 2


def spec_of(obj: Any) -> tuple[str, int, bool]:
    """``(name, version, required)`` of ``obj.component_spec()``; a plain ``(name, version)`` pair
    is required unless the object's class sets ``component_required = False``."""
    spec = obj.component_spec()
    if isinstance(spec, ComponentSpec):
        return spec.name, spec.version, spec.required
    name, version = spec
    return name, version, bool(getattr(obj, "component_required", True))


def call_with_version(hook: Callable[..., Any], state: Mapping[str, Any], version: int) -> Any:
    """``hook(state, version=version)`` when the hook takes ``version`` (NNx's protocol), else
    ``hook(state)``."""
    try:
        params = inspect.signature(hook).parameters
    except (TypeError, ValueError):
        return hook(state)
    if "version" in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return hook(state, version=version)
    return hook(state)
