"""NNx path ``nnx.result``: an opt-in ``Ok`` / ``Err`` value for callers who branch instead of
catching (the code lives here).

Everything else in this package raises typed errors; nothing returns a ``Result`` unless one of
the boundary functions below is called:

* ``validate_decision_request_result(kind, prompt, options)`` builds a decision question from
  plain data: ``InvalidDecisionRequest`` becomes ``Err(BoundaryError("invalid_decision_request"))``.
* ``decide_result(provider, question, inputs)`` asks a provider: ``UnsupportedCapability`` →
  ``"unsupported"``, ``InvalidDecisionResponse`` → ``"invalid_decision_response"``, any other
  ``ProviderFailure`` → ``"provider_failure"``.

Only the declared exceptions are converted; any other error, and any error a callback raises,
propagates unchanged. A result has no truth value (``Ok(0)`` is a success): test ``is_ok`` /
``is_err``, ``isinstance`` or ``match``. Abstention policies (``decide_result(policy=...)``) and
run bundles (``inspect_bundle_result``) are out of scope here (``nnx_api.scope``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Generic, NoReturn, TypeVar, Union

from nnx_core.decision_questions import (
    InvalidDecisionRequest,
    InvalidDecisionResponse,
    ProviderFailure,
    UnsupportedCapability,
    question_from_state,
)
from nnx_api.scope import EXTRAS, refuse

__all__ = [
    "BoundaryError", "Err", "Ok", "Result", "UnwrapError", "decide_result", "inspect_bundle_result",
    "validate_decision_request_result",
]

T = TypeVar("T")
E = TypeVar("E")


class UnwrapError(RuntimeError):
    """``unwrap()`` was called on an ``Err``: ``error`` is what it held (also the ``__cause__``
    when it is an exception)."""

    def __init__(self, error: Any) -> None:
        super().__init__(f"called unwrap() on an Err: {error}")
        self.error = error

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.error,))


def _checked(value: Any, callback: str) -> Any:
    if not isinstance(value, (Ok, Err)):
        raise TypeError(f"{callback} must return an Ok or an Err, got {type(value).__name__}")
    return value


class _NoTruthValue:
    """Refuses ``bool()``: ``Ok(0)``, ``Ok(None)`` and ``Ok(False)`` are successes."""

    __slots__ = ()

    def __bool__(self) -> NoReturn:
        raise TypeError(f"a {type(self).__name__} has no truth value: test .is_ok / .is_err, isinstance or match")


@dataclasses.dataclass(frozen=True)
class Ok(_NoTruthValue, Generic[T]):
    """A success holding ``value`` (any value)."""

    value: T

    @property
    def is_ok(self) -> bool:
        """True."""
        return True

    @property
    def is_err(self) -> bool:
        """False."""
        return False

    def map(self, fn: Callable[[T], Any]) -> Ok[Any]:
        """``Ok(fn(value))``."""
        return Ok(fn(self.value))

    def bind(self, fn: Callable[[T], Any]) -> Any:
        """``fn(value)``, which must return an ``Ok`` or an ``Err`` (else ``TypeError``)."""
        return _checked(fn(self.value), "bind's callback")

    def map_error(self, fn: Callable[[Any], Any]) -> Ok[T]:
        """This success, unchanged."""
        return self

    def recover(self, fn: Callable[[Any], Any]) -> Ok[T]:
        """This success, unchanged."""
        return self

    def unwrap(self) -> T:
        """The value."""
        return self.value


@dataclasses.dataclass(frozen=True)
class Err(_NoTruthValue, Generic[E]):
    """A failure holding a typed ``error``."""

    error: E

    @property
    def is_ok(self) -> bool:
        """False."""
        return False

    @property
    def is_err(self) -> bool:
        """True."""
        return True

    def map(self, fn: Callable[[Any], Any]) -> Err[E]:
        """This failure, unchanged."""
        return self

    def bind(self, fn: Callable[[Any], Any]) -> Err[E]:
        """This failure, unchanged."""
        return self

    def map_error(self, fn: Callable[[E], Any]) -> Err[Any]:
        """``Err(fn(error))``."""
        return Err(fn(self.error))

    def recover(self, fn: Callable[[E], Any]) -> Any:
        """``fn(error)``, which must return an ``Ok`` or an ``Err`` (else ``TypeError``)."""
        return _checked(fn(self.error), "recover's callback")

    def unwrap(self) -> NoReturn:
        """Raise ``UnwrapError`` holding the error (chained when it is an exception)."""
        raise UnwrapError(self.error) from (self.error if isinstance(self.error, BaseException) else None)


Result = Union[Ok[T], Err[E]]  # noqa: UP007 — a typing.Union at runtime, as exported
"""``Ok[T]`` or ``Err[E]``."""


@dataclasses.dataclass(frozen=True)
class BoundaryError:
    """Why a boundary failed: a stable ``code``, ``where`` (a field or a path), a read-only
    ``context`` and the original exception as ``cause`` (left out of equality and hashing)."""

    code: str
    where: str
    context: Mapping[str, Any] = dataclasses.field(default_factory=dict, hash=False)
    cause: BaseException | None = dataclasses.field(default=None, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "context", MappingProxyType(dict(self.context)))

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.code, self.where, dict(self.context), self.cause))

    def __str__(self) -> str:
        return f"{self.code} at {self.where}" + ("" if self.cause is None else f": {self.cause}")


def validate_decision_request_result(kind: str, prompt: str, options: Sequence[Any] | None = None) -> Any:
    """``Ok(question)`` built from plain data — ``kind`` ``"choice"`` / ``"boolean"`` / ``"score"``,
    ``options`` as ``(id, description)`` pairs (a Score's levels; none for a Boolean) — or
    ``Err(BoundaryError("invalid_decision_request", "request"))`` when the question constructors
    refuse it. Nothing reaches a provider."""
    state: dict[str, Any] = {"kind": kind, "prompt": prompt}
    if kind in ("choice", "score"):
        state["options" if kind == "choice" else "levels"] = options
    try:
        return Ok(question_from_state(state))
    except InvalidDecisionRequest as error:
        return Err(BoundaryError("invalid_decision_request", "request", {"kind": kind, "prompt": prompt}, error))


def decide_result(provider: Any, question: Any, inputs: Any, *, policy: Any = None, model_id: str | None = None) -> Any:
    """``Ok(tuple of results)`` from ``provider.decide(question, inputs)``, or an ``Err`` whose
    ``BoundaryError`` code names the provider's failure: ``"unsupported"``,
    ``"invalid_decision_response"`` or ``"provider_failure"`` (its ``context`` holds the question's
    digest, the provider's class and, for the last two, the error's ``request_id``). Any other
    exception propagates. ``policy=`` (abstention) is out of scope."""
    if policy is not None:
        refuse("nnx.result.decide_result(policy=...)", EXTRAS)
    context: dict[str, Any] = {"question": question.digest(), "provider": type(provider).__name__}
    try:
        return Ok(tuple(provider.decide(question, inputs)))
    except UnsupportedCapability as error:
        return Err(BoundaryError("unsupported", "provider.decide", context, error))
    except (InvalidDecisionResponse, ProviderFailure) as error:
        code = "invalid_decision_response" if isinstance(error, InvalidDecisionResponse) else "provider_failure"
        context["request_id"] = getattr(error, "request_id", None)
        return Err(BoundaryError(code, "provider.decide", context, error))


def inspect_bundle_result(path: Any) -> NoReturn:
    """Out of scope: run bundles are not provided here (``nnx_api.scope``)."""
    refuse("nnx.result.inspect_bundle_result", EXTRAS)
