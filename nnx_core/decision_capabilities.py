"""Typed-decision providers: what a provider can answer (``Capabilities``) and what it is.

A provider refuses what it cannot answer (``UnsupportedCapability``) before any model call:
``Capabilities.check`` compares a question (its kind, digest and the labels its options resolve
to), the input modality and the batch size with what the provider declares. ``DecisionProvider``
is the protocol every provider meets; its results are validated as ``nnx_core.decisions`` says.

Pure Python (stdlib + attrs): no torch, no numpy, no I/O.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Sequence
from typing import Any, Protocol, runtime_checkable

import attrs

from nnx_core.decision_questions import PRIMITIVES, InvalidDecisionRequest, Question, UnsupportedCapability, check_question
from nnx_core.decisions import DecisionResult

# --------------------------------------------------------------------------------- capabilities


def _frozen_strings(value: Iterable[str]) -> frozenset[str]:
    return frozenset(value)


def _optional_labels(value: Iterable[str] | None) -> tuple[str, ...] | None:
    return None if value is None else tuple(value)


def _optional_digests(value: Iterable[str] | None) -> frozenset[str] | None:
    return None if value is None else frozenset(value)


def _check_primitives(_instance: Any, _attribute: Any, value: frozenset[str]) -> None:
    unknown = sorted(value - set(PRIMITIVES))
    if unknown:
        raise InvalidDecisionRequest(f"unknown primitives {unknown}; expected a subset of {PRIMITIVES}")


def _check_max_batch(_instance: Any, _attribute: Any, value: Any) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1):
        raise InvalidDecisionRequest(f"max_batch must be a positive integer or None, got {value!r}")


@attrs.frozen
class Capabilities:
    """What a provider can answer, checked before any model call.

    * ``primitives``: the question kinds it answers ("choice", "boolean", "score").
    * ``modalities``: the input kinds it takes ("tensor", "text", …).
    * ``labels``: a fixed label set the options must resolve to (``None``: no fixed set);
      ``dynamic_labels``: whether any option texts can be asked (zero-shot providers).
    * ``questions``: when set, the digests of the only questions it answers (a Bernoulli head
      answers only the Boolean it was trained for).
    * ``max_batch``: the most inputs one call takes (``None``: unbounded); ``check`` refuses more.
    * ``inference`` / ``training`` / ``export``: what else the provider supports.
    """

    primitives: frozenset[str] = attrs.field(converter=_frozen_strings, validator=_check_primitives)
    modalities: frozenset[str] = attrs.field(default=frozenset({"tensor"}), converter=_frozen_strings)
    labels: tuple[str, ...] | None = attrs.field(default=None, converter=_optional_labels)
    dynamic_labels: bool = False
    questions: frozenset[str] | None = attrs.field(default=None, converter=_optional_digests)
    max_batch: int | None = attrs.field(default=None, validator=_check_max_batch)
    inference: bool = True
    training: bool = False
    export: bool = False

    def check(self, question: Question, *, modality: str, batch_size: int,
              label_ids: Sequence[str] | None = None) -> None:
        """Raise ``UnsupportedCapability`` (or ``InvalidDecisionRequest`` for a malformed request)
        unless this provider can answer ``question`` for ``batch_size`` inputs of ``modality``.

        ``label_ids`` are the labels the question's options resolve to, in question order (after
        a provider's option map); by default the option ids themselves. With fixed ``labels`` a
        Choice must name each label exactly once, in any order; a Score must name them in label
        (class) order, lowest level first.
        """
        check_question(question)
        if isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral) or batch_size < 0:
            raise InvalidDecisionRequest(f"batch_size must be a non-negative integer, got {batch_size!r}")
        if not self.inference:
            raise UnsupportedCapability("this provider declares no inference capability: it answers nothing")
        if question.kind not in self.primitives:
            raise UnsupportedCapability(
                f"this provider answers {sorted(self.primitives)}, not {question.kind!r} questions"
            )
        if self.questions is not None and question.digest() not in self.questions:
            raise UnsupportedCapability(
                f"this provider answers only the {question.kind} question(s) it was built for; "
                f"{question.prompt!r} (digest {question.digest()[:12]}…) is not one of them"
            )
        if modality not in self.modalities:
            raise UnsupportedCapability(f"this provider reads {sorted(self.modalities)} inputs, not {modality!r}")
        if self.max_batch is not None and batch_size > self.max_batch:
            raise UnsupportedCapability(
                f"a batch of {batch_size} inputs exceeds this provider's max_batch={self.max_batch}; "
                "send at most that many per call"
            )
        if question.kind == "boolean" or self.labels is None or self.dynamic_labels:
            return
        resolved = question.option_ids if label_ids is None else tuple(label_ids)
        if len(resolved) != len(question.options):
            raise InvalidDecisionRequest(
                f"label_ids has {len(resolved)} entries for {len(question.options)} options"
            )
        if question.kind == "score":
            if resolved != self.labels:
                raise UnsupportedCapability(
                    f"a Score's levels must follow the head's class order {list(self.labels)}, "
                    f"lowest first; got {list(resolved)}"
                )
            return
        if len(set(resolved)) != len(resolved) or set(resolved) != set(self.labels):
            missing = [label for label in self.labels if label not in resolved]
            unknown = [label for label in resolved if label not in self.labels]
            problems = ([f"unseen labels {unknown}"] if unknown else []) + ([f"missing {missing}"] if missing else [])
            raise UnsupportedCapability(
                f"the options must map one-to-one onto the labels {list(self.labels)}; "
                f"{', '.join(problems) or 'repeated labels'}; given {list(resolved)}"
            )


@runtime_checkable
class DecisionProvider(Protocol):
    """Anything that answers typed questions about a batch of inputs.

    ``decide`` returns one result per input, in input order, each validated against the question.
    Providers may also offer ``check(question, inputs)`` to refuse a request without running it.
    """

    def capabilities(self) -> Capabilities:
        """What this provider can answer."""

    def decide(self, question: Question, inputs: Any) -> list[DecisionResult]:
        """Answer ``question`` for every input."""
