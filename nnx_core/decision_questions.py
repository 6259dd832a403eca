"""Typed-decision questions and the decision errors: what is asked, and what refusing it raises.

A *question* (``Choice``, ``Boolean``, ``Score``) is asked of a provider about a batch of inputs.
Option ids are bookkeeping: they are never shown to a model (``model_view``) but every result is
keyed by them, in the question's order, and records the question's ``digest`` (SHA-256 of its
canonical JSON). ``question.state()`` / ``question_from_state`` round-trip a question as plain data.

The answers and their validation are ``nnx_core.decisions``; what a provider can answer is
``nnx_core.decision_capabilities``. Pure Python (stdlib + attrs): no torch, no numpy, no I/O.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Union

import attrs

from nnx_core.errors import NNxError

PRIMITIVES = ("choice", "boolean", "score")
"""The question kinds, as ``Question.kind`` and ``Capabilities.primitives`` spell them."""


# --------------------------------------------------------------------------------------- errors


class DecisionError(NNxError):
    """Base class of every typed-decision error."""


class InvalidDecisionRequest(DecisionError, ValueError):
    """A question, option, inputs or provider setting is malformed; fix the request."""


class InvalidDecisionResponse(DecisionError, ValueError):
    """An answer does not fit its question (ids, range, sum); it is refused, never repaired."""


class UnsupportedCapability(DecisionError):
    """The provider cannot answer this request (kind, labels, modality); nothing was run."""


class ProviderFailure(DecisionError, RuntimeError):
    """The model or service behind a provider failed; the original error is the ``__cause__``."""


# ------------------------------------------------------------------------------------ questions


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        lead = "a question needs a non-empty prompt: " if what == "prompt" else ""
        raise InvalidDecisionRequest(f"{lead}{what} must be a non-empty string, got {value!r}")
    return value


def _check_text(what: str) -> Callable[[Any, Any, Any], None]:
    def check(_instance: Any, _attribute: Any, value: Any) -> None:
        _text(value, what)

    return check


@attrs.frozen
class Option:
    """One answer a question offers: ``id`` keys results, ``description`` is shown to models."""

    id: str = attrs.field(validator=_check_text("option id"))
    description: str = attrs.field(validator=_check_text("option description"))


def _to_options(value: Any, noun: str = "option") -> tuple[Option, ...]:
    """Options as ``Option`` objects or ``(id, description)`` pairs; at least two, unique ids.
    ``noun`` names them in errors ("option" for a Choice, "level" for a Score)."""
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise InvalidDecisionRequest(
            f"{noun}s must be a sequence of options (Option or (id, description) pairs), got {value!r}"
        )
    options = []
    for item in value:
        if isinstance(item, Option):
            options.append(item)
        elif isinstance(item, (tuple, list)) and len(item) == 2:
            options.append(Option(item[0], item[1]))
        else:
            raise InvalidDecisionRequest(
                f"{noun}s must be Option objects or (id, description) pairs, got {item!r}"
            )
    if len(options) < 2:
        raise InvalidDecisionRequest(f"a question needs at least 2 {noun}s, got {len(options)}")
    ids = [option.id for option in options]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise InvalidDecisionRequest(f"{noun} ids must be unique; duplicated: {duplicates}")
    return tuple(options)


def _to_levels(value: Any) -> tuple[Option, ...]:
    """A Score's levels: ``_to_options`` naming them levels."""
    return _to_options(value, "level")


def _digest(kind: str, prompt: str, options: Sequence[Option]) -> str:
    canonical = json.dumps(
        {"kind": kind, "prompt": prompt, "options": [[o.id, o.description] for o in options]},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=True,
    )
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


class _QuestionMethods:
    """What every question offers; subclasses provide ``kind``, ``prompt`` and ``options``."""

    __slots__ = ()
    kind: ClassVar[str]

    if TYPE_CHECKING:  # what the subclasses provide (attrs fields or properties), for the type checker only
        _digest: str

        @property
        def prompt(self) -> str: ...

        @property
        def options(self) -> tuple[Option, ...]: ...

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "_digest", _digest(self.kind, self.prompt, self.options))

    @property
    def option_ids(self) -> tuple[str, ...]:
        """The option ids in question order (empty for a Boolean)."""
        return tuple(option.id for option in self.options)

    def digest(self) -> str:
        """SHA-256 (hex) of the canonical JSON of kind, prompt and every option id and text, in
        order: rewording or reordering anything gives a different digest."""
        return self._digest

    def model_view(self) -> dict[str, Any]:
        """What a model may see: the prompt and the option texts in order (``"options"`` for a
        Choice, ``"levels"`` for a Score, none for a Boolean), never the ids."""
        view: dict[str, Any] = {"prompt": self.prompt}
        if self.options:
            view["levels" if self.kind == "score" else "options"] = [option.description for option in self.options]
        return view


def _options_state(options: Sequence[Option]) -> list[dict[str, str]]:
    return [{"id": o.id, "description": o.description} for o in options]


@attrs.frozen
class Choice(_QuestionMethods):
    """Pick one of at least two options; answered by a distribution over the options."""

    kind: ClassVar[str] = "choice"
    prompt: str = attrs.field(validator=_check_text("prompt"))
    options: tuple[Option, ...] = attrs.field(converter=_to_options)
    _digest: str = attrs.field(init=False, eq=False, repr=False)

    def state(self) -> dict[str, Any]:
        """A plain, JSON/YAML-safe dict; ``question_from_state`` rebuilds an equal question."""
        return {"kind": self.kind, "prompt": self.prompt, "options": _options_state(self.options)}


@attrs.frozen
class Score(_QuestionMethods):
    """Rate on at least two ordered levels, lowest first; answered by a distribution over them."""

    kind: ClassVar[str] = "score"
    prompt: str = attrs.field(validator=_check_text("prompt"))
    levels: tuple[Option, ...] = attrs.field(converter=_to_levels)
    _digest: str = attrs.field(init=False, eq=False, repr=False)

    @property
    def options(self) -> tuple[Option, ...]:
        """The levels, lowest first (so every question kind has ``options``)."""
        return self.levels

    def state(self) -> dict[str, Any]:
        """A plain, JSON/YAML-safe dict; ``question_from_state`` rebuilds an equal question."""
        return {"kind": self.kind, "prompt": self.prompt, "levels": _options_state(self.levels)}


@attrs.frozen
class Boolean(_QuestionMethods):
    """A yes/no question; answered by one probability ``p_true``."""

    kind: ClassVar[str] = "boolean"
    prompt: str = attrs.field(validator=_check_text("prompt"))
    _digest: str = attrs.field(init=False, eq=False, repr=False)

    @property
    def options(self) -> tuple[Option, ...]:
        """Always empty: a Boolean has no options."""
        return ()

    def state(self) -> dict[str, Any]:
        """A plain, JSON/YAML-safe dict; ``question_from_state`` rebuilds an equal question."""
        return {"kind": self.kind, "prompt": self.prompt}


Question = Union[Choice, Boolean, Score]  # noqa: UP007 — a typing.Union at runtime, as exported
"""Any question."""

_QUESTION_TYPES: dict[str, type] = {"choice": Choice, "boolean": Boolean, "score": Score}
_STATE_KEYS = {"choice": {"kind", "prompt", "options"}, "boolean": {"kind", "prompt"},
               "score": {"kind", "prompt", "levels"}}


def _state_options(value: Any) -> list[Any]:
    """Options of a question state: ``{id, description}`` mappings (``state()``) or NNx's
    ``[id, description]`` pairs."""
    if not isinstance(value, (list, tuple)):
        raise InvalidDecisionRequest(f"options in a question state must be a list, got {value!r}")
    options: list[Any] = []
    for item in value:
        if isinstance(item, Mapping) and set(item) == {"id", "description"}:
            options.append(Option(item["id"], item["description"]))
        elif isinstance(item, (list, tuple)) and len(item) == 2:
            options.append(Option(item[0], item[1]))
        else:
            raise InvalidDecisionRequest(
                "an option state is a mapping with exactly id and description, or an (id, description) "
                f"pair; options are such pairs, got {item!r}"
            )
    return options


def question_from_state(state: Mapping[str, Any]) -> Question:
    """Rebuild a question from ``question.state()``; malformed state → ``InvalidDecisionRequest``."""
    if not isinstance(state, Mapping):
        raise InvalidDecisionRequest(f"a question state must be a mapping, got {state!r}")
    kind = state.get("kind")
    if not isinstance(kind, str) or kind not in _QUESTION_TYPES:
        raise InvalidDecisionRequest(f"unknown decision kind {kind!r}; expected one of {PRIMITIVES}")
    if set(state) != _STATE_KEYS[kind]:
        missing = sorted(_STATE_KEYS[kind] - set(state))
        unexpected = sorted(set(state) - _STATE_KEYS[kind])
        raise InvalidDecisionRequest(
            f"a {kind} state has exactly the keys {sorted(_STATE_KEYS[kind])}, got {sorted(state)}: "
            f"missing {missing}, unexpected {unexpected}"
        )
    if kind == "boolean":
        return Boolean(state["prompt"])
    if kind == "choice":
        return Choice(state["prompt"], _state_options(state["options"]))
    return Score(state["prompt"], _state_options(state["levels"]))


def check_question(question: Any) -> Question:
    """``question`` itself when it is a ``Choice``, ``Boolean`` or ``Score``; else ``InvalidDecisionRequest``."""
    if not isinstance(question, (Choice, Boolean, Score)):
        raise InvalidDecisionRequest(f"expected a Choice, Boolean or Score, got {question!r}")
    return question
