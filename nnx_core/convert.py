"""The one converter between configuration / record objects and their plain ``state()`` mappings.

Every class that derives from :class:`Stateful` maps to a plain, YAML- and JSON-safe ``dict``
through this single cattrs ``Converter``; the run id hashes that mapping. Two field rules,
declared in the field's metadata, are all a class says about its state:

- ``OMIT`` — "omit when default": the field is left out while it holds its default. Fields added
  after a class first shipped carry it, so the state (and the run id) of every existing
  configuration stays byte-identical.
- ``RUNTIME`` — never written (loaders, callbacks, overwrite flags); a saved state naming it is
  refused like any unknown key.

Every other field is always written; enums become their values, tuples become lists, nested
classes their own state. ``from_state`` builds through the class's constructor, so a state is
validated exactly as hand-written arguments are; unknown keys are refused. Every failure is a
:class:`ParamsError` whose path names the field inside the state (cattrs' ``transform_error``).

``nnx_api.config.convert`` registers the API's hooks (enums, devices) on this same object: one
converter at the edge, not one per layer.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypeVar

import attrs
import cattrs
from cattrs.errors import BaseValidationError, ForbiddenExtraKeysError
from cattrs.gen import (
    make_dict_structure_fn,
    make_dict_structure_fn_from_attrs,
    make_dict_unstructure_fn,
    make_dict_unstructure_fn_from_attrs,
    override,
)
from cattrs.v import format_exception, transform_error

from nnx_core.errors import NNxError, ParamsError

__all__ = ["OMIT", "RUNTIME", "Stateful", "as_given", "converter", "structure"]

OMIT: Mapping[str, str] = {"state": "omit"}
"""Field metadata: left out of ``state()`` while the field holds its default."""

RUNTIME: Mapping[str, str] = {"state": "runtime"}
"""Field metadata: never part of ``state()`` (and refused in a saved state)."""

T = TypeVar("T")

converter = cattrs.Converter(forbid_extra_keys=True, detailed_validation=True)
"""The converter. Classes validate their own values, so scalars are handed over as given."""


def as_given(value: Any, _type: Any) -> Any:
    """A structure hook that hands the value to the class unchanged (the class checks it)."""
    return value


for _scalar in (int, float, str, bool):
    converter.register_structure_hook(_scalar, as_given)


class Stateful:
    """Mixin: ``state()`` and ``from_state()`` through the one converter."""

    __slots__ = ()

    def state(self) -> dict[str, Any]:
        """The plain mapping of this object (``OMIT`` fields only when not default, never ``RUNTIME``)."""
        state: dict[str, Any] = converter.get_unstructure_hook(type(self))(self)
        return state

    @classmethod
    def from_state(cls: type[T], state: Mapping[str, Any]) -> T:
        """Rebuild from :meth:`state`; unknown keys and bad values raise ``ParamsError`` with the path."""
        return structure(state, cls)


def _fields(cls: type) -> tuple[Any, ...]:
    return tuple(attrs.fields(cls)) if attrs.has(cls) else dataclasses.fields(cls)


def _rules(cls: type) -> dict[str, str]:
    return {f.name: f.metadata["state"] for f in _fields(cls) if "state" in f.metadata}


def _is_stateful(cls: Any) -> bool:
    return isinstance(cls, type) and issubclass(cls, Stateful)


def _attrs_fields(cls: type) -> list[Any]:
    """An attrs class's fields, string annotations resolved. cattrs reads a class that also has
    ``__dataclass_fields__`` (``nnx_core.dataclass_view``: the records) as a dataclass, which
    would lose the attrs converters and change the state's field order; attrs comes first here."""
    if any(isinstance(f.type, str) for f in attrs.fields(cls)):
        attrs.resolve_types(cls)
    return list(attrs.fields(cls))


def _unstructure_fn(cls: type) -> Any:
    rules = _rules(cls)
    overrides: dict[str, Any] = {
        n: override(omit=True) if r == "runtime" else override(omit_if_default=True) for n, r in rules.items()
    }
    if attrs.has(cls):
        return make_dict_unstructure_fn_from_attrs(_attrs_fields(cls), cls, converter, **overrides)
    return make_dict_unstructure_fn(cls, converter, **overrides)


def _structure_fn(cls: type) -> Any:
    overrides: dict[str, Any] = {n: override(omit=True) for n, r in _rules(cls).items() if r == "runtime"}
    if attrs.has(cls):
        return make_dict_structure_fn_from_attrs(
            _attrs_fields(cls), cls, converter, _cattrs_forbid_extra_keys=True, **overrides
        )
    return make_dict_structure_fn(cls, converter, _cattrs_forbid_extra_keys=True, **overrides)


converter.register_unstructure_hook_factory(_is_stateful, _unstructure_fn)
converter.register_structure_hook_factory(_is_stateful, _structure_fn)


def _describe(exc: BaseException, type_: Any) -> str:
    if isinstance(exc, NNxError):
        return str(exc)
    if isinstance(exc, ForbiddenExtraKeysError):
        names = ", ".join(repr(name) for name in sorted(exc.extra_fields))
        known = ", ".join(f.name for f in _fields(exc.cl) if _rules(exc.cl).get(f.name) != "runtime")
        return f"unknown field {names} in saved state (known: {known})"
    return format_exception(exc, type_)


def _path_and_message(line: str) -> tuple[str, str]:
    message, _, path = line.rpartition(" @ ")  # transform_error writes "<message> @ <path>"
    return path, message


def structure(state: Mapping[str, Any], cls: type[T]) -> T:
    """``cls`` rebuilt from a plain mapping; any failure is one ``ParamsError`` naming the paths."""
    name = cls.__name__
    if not isinstance(state, Mapping):
        raise ParamsError(name, f"a saved state must be a mapping, got {type(state).__name__} {state!r}")
    try:
        return converter.structure(state, cls)
    except BaseValidationError as exc:
        errors = [_path_and_message(line) for line in transform_error(exc, path=name, format_exception=_describe)]
        if len(errors) == 1:
            raise ParamsError(*errors[0]) from exc
        raise ParamsError(name, "; ".join(f"{path}: {message}" for path, message in errors)) from exc
