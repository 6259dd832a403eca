"""``dataclasses.fields()`` on this project's attrs records, as on NNx's dataclasses.

NNx's records (``NNEvaluationDataPoint``, ``NNIterationDataPoint``, ``NNCheckpoint``) are
dataclasses, so user code calls ``dataclasses.fields`` / ``asdict`` / ``replace`` on them. Ours are
frozen attrs classes (their state, converters and validators stay as they are);
:func:`expose_dataclass_fields` gives such a class the ``__dataclass_fields__`` those functions
read: every attrs field, NNx's names first in NNx's order, each with its default. The fields are
taken from a mirror dataclass, so no private part of ``dataclasses`` is touched. attrs and cattrs
(``nnx_core.convert``) still see the class as attrs first.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, TypeVar

import attrs

T = TypeVar("T", bound=type)


def _field_of(field: attrs.Attribute[Any]) -> Any:
    default: Any = field.default
    if default is attrs.NOTHING:
        return dataclasses.field()
    if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
        if default.takes_self:
            return dataclasses.field()  # depends on the instance: no default a dataclass could state
        return dataclasses.field(default_factory=default.factory)
    return dataclasses.field(default=default)


def expose_dataclass_fields(cls: T, order: Sequence[str] = ()) -> T:
    """Give the attrs class ``cls`` a ``__dataclass_fields__`` (see the module docstring): the
    names of ``order`` that ``cls`` has come first, in that order, then its other fields in
    declaration order. ``dataclasses.replace(obj, **changes)`` then builds ``cls`` by keyword
    from every field, and ``dataclasses.asdict(obj)`` recurses into nested records. Returns ``cls``."""
    declared = {f.name: f for f in attrs.fields(cls) if f.init}
    names = [n for n in order if n in declared] + [n for n in declared if n not in order]
    mirror = dataclasses.make_dataclass(
        cls.__name__, [(n, declared[n].type or Any, _field_of(declared[n])) for n in names], kw_only=True
    )
    cls.__dataclass_fields__ = mirror.__dataclass_fields__  # type: ignore[attr-defined]
    return cls
