"""Domain checks for parameters: typed, with the field path, before any side effect.

Integer counts must be real integers (``bool`` and ``2.0`` are refused); real values must be
finite and in their documented range. Each check raises :class:`ParamsError` naming the field.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from typing import Any

from nnx_core.errors import ParamsError


def check_int(path: str, value: Any, *, minimum: int | None = None) -> int:
    """An integer ≥ ``minimum``; bools and floats are refused."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ParamsError(path, f"must be an integer, got {type(value).__name__} {value!r}")
    number = int(value)
    if minimum is not None and number < minimum:
        raise ParamsError(path, f"must be ≥ {minimum}, got {number}")
    return number


def check_float(
    path: str,
    value: Any,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    exclusive_min: bool = False,
    exclusive_max: bool = False,
) -> float:
    """A finite real number in ``[minimum, maximum]`` (bounds optionally exclusive)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ParamsError(path, f"must be a number, got {type(value).__name__} {value!r}")
    number = float(value)
    if not math.isfinite(number):
        raise ParamsError(path, f"must be finite, got {number!r}")
    if minimum is not None and (number < minimum or (exclusive_min and number == minimum)):
        raise ParamsError(path, f"must be {'>' if exclusive_min else '≥'} {minimum}, got {number}")
    if maximum is not None and (number > maximum or (exclusive_max and number == maximum)):
        raise ParamsError(path, f"must be {'<' if exclusive_max else '≤'} {maximum}, got {number}")
    return number


def check_choice(path: str, value: Any, choices: tuple[Any, ...]) -> Any:
    """One of ``choices``."""
    if value not in choices:
        raise ParamsError(path, f"must be one of {', '.join(map(repr, choices))}; got {value!r}")
    return value


def check_str(path: str, value: Any) -> str:
    """A non-blank string."""
    if not isinstance(value, str) or not value.strip():
        raise ParamsError(path, f"must be a non-blank string, got {value!r}")
    return value


def validator(check: Callable[..., Any], **kwargs: Any) -> Callable[[Any, Any, Any], None]:
    """An attrs validator running ``check`` with the class and field name as the path."""

    def run(instance: Any, attribute: Any, value: Any) -> None:
        check(f"{type(instance).__name__}.{attribute.name}", value, **kwargs)

    return run


def optional(check: Callable[..., Any], **kwargs: Any) -> Callable[[Any, Any, Any], None]:
    """Like :func:`validator` but lets None through."""
    inner = validator(check, **kwargs)

    def run(instance: Any, attribute: Any, value: Any) -> None:
        if value is not None:
            inner(instance, attribute, value)

    return run
