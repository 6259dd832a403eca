"""Typed-decision results: the validated answers to questions, and the validation itself.

A provider returns one *result* per input (``ChoiceResult``, ``BooleanResult``, ``ScoreResult``),
keyed by the question's option ids in question order and carrying the ``digest`` of the question
it answers. Rules this module owns, once:

* A result is valid when every probability is finite and in [0, 1], a distribution names exactly
  the question's options and sums to 1 within ``PROBABILITY_TOLERANCE``. Invalid answers are
  refused (``InvalidDecisionResponse``), never renormalised (``validate_response``).
* ``deferred_results`` builds a batch's results over rows the provider already validated; their
  fields are filled on first read, indistinguishable from results built by their constructors.

The questions and the errors are ``nnx_core.decision_questions``; what a provider can answer
(checked before any model call) is ``nnx_core.decision_capabilities``. Pure Python (stdlib +
attrs): no torch, no numpy, no I/O.
"""

from __future__ import annotations

import functools
import math
import numbers
import types
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from itertools import repeat
from typing import Any, ClassVar, Protocol, Union

import attrs

from nnx_core.dataclass_view import expose_dataclass_fields
from nnx_core.decision_questions import InvalidDecisionResponse, Question, check_question

PROBABILITY_TOLERANCE = 1e-6
"""How far a distribution's sum may be from 1 and still be valid."""


def _probability(value: Any, what: str) -> float:
    """A finite float in [0, 1]; booleans, non-numbers, overflow, NaN and infinities refused."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidDecisionResponse(f"{what} must be a real number, got {value!r}")
    try:
        p = float(value)
    except OverflowError as error:  # an integer or fraction too large for a float (10**400)
        raise InvalidDecisionResponse(f"{what} is not representable as a float: too large for a float") from error
    except (ValueError, TypeError) as error:
        raise InvalidDecisionResponse(f"{what} is not representable as a float: {value!r}") from error
    if not math.isfinite(p) or not 0.0 <= p <= 1.0:
        raise InvalidDecisionResponse(f"{what} must be finite and in [0, 1], got {p!r}")
    return p


def _to_distribution(value: Any) -> tuple[tuple[str, float], ...]:
    """Validate ``((id, p), ...)``: ≥2 unique non-empty string ids, valid probabilities, Σ = 1."""
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise InvalidDecisionResponse(f"a distribution is a sequence of (id, p) pairs, got {value!r}")
    pairs = []
    for item in value:
        if not isinstance(item, (tuple, list)) or len(item) != 2:
            raise InvalidDecisionResponse(f"a distribution entry is an (id, p) pair, got {item!r}")
        option_id, p = item
        if not isinstance(option_id, str) or not option_id:
            raise InvalidDecisionResponse(f"unlabeled entry: ids are non-empty strings, got {option_id!r}")
        pairs.append((option_id, _probability(p, f"probability of {option_id!r}")))
    if len(pairs) < 2:
        raise InvalidDecisionResponse(f"a distribution needs at least 2 entries, got {len(pairs)}")
    ids = [option_id for option_id, _ in pairs]
    if len(set(ids)) != len(ids):
        raise InvalidDecisionResponse(f"a distribution repeats ids: {ids}")
    total = math.fsum(p for _, p in pairs)
    if abs(total - 1.0) > PROBABILITY_TOLERANCE:
        raise InvalidDecisionResponse(
            f"probabilities sum to {total!r}, not 1 within {PROBABILITY_TOLERANCE}; "
            "answers are never renormalized"
        )
    return tuple(pairs)


def _check_digest(_instance: Any, _attribute: Any, value: Any) -> None:
    if not (isinstance(value, str) and len(value) == 64
            and all(c in "0123456789abcdef" for c in value)):
        raise InvalidDecisionResponse(f"question_digest must be a SHA-256 hex digest, got {value!r}")


class ResultRows(Protocol):
    """Validated answers for a batch, shared by that batch's results (see ``deferred_results``).

    ``fields(index)`` returns the public field values of row ``index`` (``question_digest``,
    ``distribution`` or ``p_true``, ``raw``). The provider validated every row before sharing it.
    """

    def fields(self, index: int) -> Mapping[str, Any]: ...


@functools.cache
def _public_fields(result_type: type) -> tuple[tuple[str, Any], ...]:
    return tuple((f.name, f.default) for f in attrs.fields(result_type) if f.init)


class _Deferred:
    """Lets a result read its fields from a shared, already validated batch on first access.

    Results built by ``deferred_results`` leave their public slots unset; the first read of one
    lands here (Python calls ``__getattr__`` for an unset slot), copies the row's values into the
    slots and drops the batch reference. Equality, hashing, repr and pickling all read the
    fields, so a deferred result is indistinguishable from one built by its constructor.
    """

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            rows = object.__getattribute__(self, "_rows")
        except AttributeError:
            rows = None
        if rows is None:  # never deferred, or another thread has just filled the fields
            return object.__getattribute__(self, name)
        values = rows.fields(object.__getattribute__(self, "_row"))
        result_type: type = type(self)  # typed as a plain type: mypy takes a class object for unhashable
        for field_name, default in _public_fields(result_type):
            value = values.get(field_name, default)
            if value is attrs.NOTHING:
                raise AttributeError(f"the shared rows gave no {field_name!r} for this result")
            object.__setattr__(self, field_name, value)
        object.__setattr__(self, "_rows", None)
        return object.__getattribute__(self, name)


def _consume(iterator: Iterable[Any]) -> None:
    deque(iterator, maxlen=0)


@functools.cache
def _slot_writers(result_type: type) -> tuple[Callable[[Any, Any], None], Callable[[Any, Any], None]]:
    """Writers of a result type's ``_rows`` and ``_row``: the slots' own C setters when the type
    keeps them in ``__slots__`` (no lookup by name per write), else ``object.__setattr__``."""
    rows_slot, row_slot = getattr(result_type, "_rows", None), getattr(result_type, "_row", None)
    if isinstance(rows_slot, types.MemberDescriptorType) and isinstance(row_slot, types.MemberDescriptorType):
        return rows_slot.__set__, row_slot.__set__
    return (lambda obj, value: object.__setattr__(obj, "_rows", value)), (
        lambda obj, value: object.__setattr__(obj, "_row", value)
    )


def deferred_results(result_type: type, rows: ResultRows, count: int) -> list[Any]:
    """``count`` results of ``result_type`` whose fields come from ``rows.fields(i)`` on first use.

    The fast path for providers: ``rows`` must already be validated (as a whole batch) because
    nothing is validated again. The loops run in C (``map``), so a result costs one allocation and
    two slot writes (through the slots' own setters rather than ``object.__setattr__``, which looks
    the slot up by name); a row's tuples and floats are only built if someone reads that result.
    What it costs: docs/decisions.md (Performance).
    """
    set_rows, set_row = _slot_writers(result_type)
    results: list[Any] = list(map(object.__new__, repeat(result_type, count)))
    _consume(map(set_rows, results, repeat(rows, count)))
    _consume(map(set_row, results, range(count)))
    return results


def _check_provider(_instance: Any, _attribute: Any, value: Any) -> None:
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise InvalidDecisionResponse(f"provider names who answered: a non-blank string or None, got {value!r}")


@attrs.frozen
class _DistributionResult(_Deferred):
    question_digest: str = attrs.field(validator=_check_digest)
    distribution: tuple[tuple[str, float], ...] = attrs.field(converter=_to_distribution)
    provider: str | None = attrs.field(default=None, validator=_check_provider)
    raw: Any = attrs.field(default=None, eq=False, repr=False)
    _rows: Any = attrs.field(default=None, init=False, eq=False, repr=False)
    _row: Any = attrs.field(default=None, init=False, eq=False, repr=False)

    @property
    def top(self) -> str:
        """The id with the highest probability (the first in question order on a tie)."""
        best_id, best_p = self.distribution[0]
        for option_id, p in self.distribution[1:]:
            if p > best_p:
                best_id, best_p = option_id, p
        return best_id

    @property
    def option_ids(self) -> tuple[str, ...]:
        """The ids in question order."""
        return tuple(option_id for option_id, _ in self.distribution)

    def probability(self, option_id: str) -> float:
        """The probability of one option; ``KeyError`` for an id the question does not have."""
        for candidate, p in self.distribution:
            if candidate == option_id:
                return p
        raise KeyError(option_id)

    def probabilities(self) -> dict[str, float]:
        """``{id: p}`` in question order."""
        return dict(self.distribution)


@attrs.frozen
class ChoiceResult(_DistributionResult):
    """The answer to a ``Choice``: ``distribution = ((id, p), ...)`` in question order, validated.

    ``provider`` names who answered (None when unknown); ``raw`` keeps the provider's own output
    (for ``FixedHeadProvider``: the row's logits) and is left out of equality.
    """

    kind: ClassVar[str] = "choice"


@attrs.frozen
class ScoreResult(_DistributionResult):
    """The answer to a ``Score``: a validated distribution over the levels, lowest first.

    ``vendor_score`` holds a provider's own numeric score when it has one (never derived).
    """

    kind: ClassVar[str] = "score"
    vendor_score: float | None = None

    @property
    def expected_index(self) -> float:
        """Σ i·p_i over the zero-based level positions (ordinal, not an interval scale)."""
        return math.fsum(i * p for i, (_, p) in enumerate(self.distribution))


def _to_p_true(value: Any) -> float:
    return _probability(value, "p_true")


@attrs.frozen
class BooleanResult(_Deferred):
    """The answer to a ``Boolean``: ``p_true`` finite in [0, 1]; ``raw`` left out of equality."""

    kind: ClassVar[str] = "boolean"

    question_digest: str = attrs.field(validator=_check_digest)
    p_true: float = attrs.field(converter=_to_p_true)
    provider: str | None = attrs.field(default=None, validator=_check_provider)
    raw: Any = attrs.field(default=None, eq=False, repr=False)
    _rows: Any = attrs.field(default=None, init=False, eq=False, repr=False)
    _row: Any = attrs.field(default=None, init=False, eq=False, repr=False)

    @property
    def p_false(self) -> float:
        """``1 - p_true``."""
        return 1.0 - self.p_true


DecisionResult = Union[ChoiceResult, BooleanResult, ScoreResult]  # noqa: UP007 — a typing.Union at runtime, as exported
"""Any result."""

RESULT_TYPES: dict[str, type] = {"choice": ChoiceResult, "boolean": BooleanResult, "score": ScoreResult}
"""The result type answering each question kind."""

# dataclasses.fields() / replace() / asdict() work on the results as on NNx's dataclasses: replace() builds the
# result again through its constructor, so a changed field is validated as a new answer is
expose_dataclass_fields(ChoiceResult)
expose_dataclass_fields(BooleanResult)
expose_dataclass_fields(ScoreResult, ("question_digest", "distribution", "provider", "vendor_score", "raw"))

def _response_pairs(response: Any) -> list[tuple[Any, Any]]:
    if isinstance(response, Mapping):
        return list(response.items())
    if isinstance(response, (str, bytes)) or not isinstance(response, Iterable):
        raise InvalidDecisionResponse(f"expected a mapping or a sequence of (id, p) pairs ({{id: p}} or [(id, p), ...]), got {response!r}")
    pairs = []
    for item in response:
        if not isinstance(item, (tuple, list)) or len(item) != 2:
            raise InvalidDecisionResponse(f"response entries are (id, p) pairs, got {item!r}")
        pairs.append((item[0], item[1]))
    return pairs


def validate_response(
    question: Question, response: Any, *, provider: str | None = None, raw: Any = None, vendor_score: float | None = None
) -> DecisionResult:
    """Check ``response`` against ``question`` and return its typed result (``InvalidDecisionResponse``
    when it does not fit; nothing is ever renormalised). ``provider`` names who answered and is
    kept on the result; ``raw`` (the provider's own output) and a Score's ``vendor_score`` (its own
    number, finite) are kept apart from the validated fields.

    * Choice / Score: a mapping ``{id: p}`` or ``(id, p)`` pairs in any order; the ids must be
      exactly the question's (no missing, duplicate, unknown or unlabeled ids). The result lists
      them in question order.
    * Boolean: ``p_true`` as a number, or ``{"true": p, "false": 1 - p}``.
    * A result object is accepted too when it answers this very question (same kind and digest).
    """
    check_question(question)
    digest = question.digest()
    result_type = RESULT_TYPES[question.kind]
    if isinstance(response, (ChoiceResult, ScoreResult, BooleanResult)):
        if type(response) is not result_type or response.question_digest != digest:
            raise InvalidDecisionResponse(
                f"this {type(response).__name__} answers another question "
                f"(digest {response.question_digest[:12]}…, expected {digest[:12]}…)"
            )
        raw = response.raw if raw is None else raw
        provider = response.provider if provider is None else provider
        if isinstance(response, ScoreResult) and vendor_score is None:
            vendor_score = response.vendor_score
        response = response.p_true if question.kind == "boolean" else response.distribution
    if vendor_score is not None:
        if question.kind != "score":
            raise InvalidDecisionResponse(f"vendor_score belongs to a Score answer, not a {question.kind} one")
        vendor_score = _finite_score(vendor_score)

    if question.kind == "boolean":
        if isinstance(response, Mapping):
            if set(response) != {"true", "false"}:
                raise InvalidDecisionResponse(
                    "a Boolean answer mapping has exactly the keys 'true' and 'false', "
                    f"got {sorted(map(repr, response))}"
                )
            p_true = _probability(response["true"], "p('true')")
            p_false = _probability(response["false"], "p('false')")
            if abs(p_true + p_false - 1.0) > PROBABILITY_TOLERANCE:
                raise InvalidDecisionResponse(
                    f"p('true') + p('false') = {p_true + p_false!r}, not 1 within {PROBABILITY_TOLERANCE}; "
                    "answers are never renormalized"
                )
            response = p_true
        return BooleanResult(digest, response, provider=provider, raw=raw)

    by_id: dict[str, Any] = {}
    for option_id, p in _response_pairs(response):
        if not isinstance(option_id, str) or not option_id:
            raise InvalidDecisionResponse(f"unlabeled entry: ids are non-empty strings, got {option_id!r}")
        if option_id in by_id:
            raise InvalidDecisionResponse(f"duplicate id {option_id!r} in the answer")
        by_id[option_id] = p
    expected = question.option_ids
    unknown = [i for i in by_id if i not in expected]
    missing = [i for i in expected if i not in by_id]
    if unknown or missing:
        problems = [f"unknown id {option_id!r}" for option_id in unknown] + ([f"missing ids {missing}"] if missing else [])
        raise InvalidDecisionResponse(
            f"answer ids do not match the question's {list(expected)}: {'; '.join(problems)}"
        )
    distribution = [(option_id, by_id[option_id]) for option_id in expected]
    if result_type is ScoreResult:
        return ScoreResult(digest, distribution, provider=provider, raw=raw, vendor_score=vendor_score)
    result: DecisionResult = result_type(digest, distribution, provider=provider, raw=raw)
    return result


def _finite_score(value: Any) -> float:
    """A vendor's own score: a finite real number (bools and strings refused)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidDecisionResponse(f"vendor_score must be a finite number, got {value!r}")
    try:
        score = float(value)
    except OverflowError as exc:  # an integer too large for a float
        raise InvalidDecisionResponse("vendor_score must be a finite number, got one too large for a float") from exc
    if not math.isfinite(score):
        raise InvalidDecisionResponse(f"vendor_score must be a finite number, got {value!r}")
    return score

