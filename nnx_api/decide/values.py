"""The plain values of a decision job (``nnx_api.decide.jobs``): its errors, ``Limits``, outcomes and
result, ``Follow``, and the immutable tree of nodes a job is made of (``JobTree``)."""

from __future__ import annotations

import numbers
import pickle
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from nnx_core.decision_questions import Boolean, Choice, DecisionError, ProviderFailure, Score

QUESTION_TYPES = (Choice, Boolean, Score)


class JobError(DecisionError):
    """Base of the job errors: ``outcomes`` (question id → :class:`QuestionOutcome`, in scheduling
    order) and ``completed`` (the answered ones) — empty when refused before any call."""

    def __init__(self, message: str, *, outcomes: Mapping[str, QuestionOutcome] | None = None) -> None:
        super().__init__(message)
        self.outcomes = dict(outcomes or {})
        self.completed = {k: v for k, v in self.outcomes.items() if v.kind == "answered"}

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickles with its outcomes and its cause (so a job error crosses a process boundary): a
        provider error that does not survive pickling travels as a ``ProviderFailure`` naming it,
        and an answer whose provider ``raw`` output does not survive loses that ``raw``."""
        seen: dict[int, BaseException | None] = {}
        state = dict(self.__dict__)
        state["outcomes"] = {k: _portable_outcome(v, seen) for k, v in self.outcomes.items()}
        state["completed"] = {k: v for k, v in state["outcomes"].items() if v.kind == "answered"}
        return (_rebuilt, (type(self), self.args, state, _portable(self.__cause__, seen)))


class InvalidJob(JobError, ValueError):
    """A job that cannot run as described (duplicate ids, an unsupported question, a token cap
    the provider cannot enforce, a continuation that does not return a ``Follow``, bad limits)."""


class JobFailed(JobError):
    """A provider call or hook failed: ``failed`` are that call's questions, ``skipped`` the known
    ones never sent (both empty when the job was refused before any call)."""

    def __init__(self, message: str, *, outcomes: Mapping[str, QuestionOutcome] | None = None,
                 failed: Sequence[str] = (), skipped: Sequence[str] = ()) -> None:
        super().__init__(message, outcomes=outcomes)
        self.failed, self.skipped = tuple(failed), tuple(skipped)


class JobLimitExceeded(JobError):
    """``Limits.max_requests`` or ``max_depth`` stopped the job before its next call."""


class JobTimeout(JobError, TimeoutError):
    """``Limits.timeout`` elapsed; requests already sent are not rolled back."""


def _pickles(value: Any) -> bool:
    try:
        pickle.loads(pickle.dumps(value))
    except Exception:  # noqa: BLE001 - whatever stops it from pickling or unpickling
        return False
    return True


def _portable(error: BaseException | None, seen: dict[int, BaseException | None]) -> BaseException | None:
    """``error`` when it survives pickling, else a ``ProviderFailure`` naming it (one per error)."""
    if error is None:
        return None
    if id(error) not in seen:
        seen[id(error)] = error if _pickles(error) else ProviderFailure(f"{type(error).__name__}: {error}")
    return seen[id(error)]


def _portable_outcome(outcome: QuestionOutcome, seen: dict[int, BaseException | None]) -> QuestionOutcome:
    rows = tuple(row if _pickles(row) else attrs.evolve(row, result=attrs.evolve(row.result, raw=None))
                 for row in outcome.rows)
    return attrs.evolve(outcome, rows=rows, error=_portable(outcome.error, seen))


def _rebuilt(cls: type, args: tuple[Any, ...], state: dict[str, Any], cause: BaseException | None) -> JobError:
    """A pickled job error, rebuilt without calling its ``__init__``."""
    error = cls.__new__(cls)
    Exception.__init__(error, *args)
    error.__dict__.update(state)
    error.__cause__ = cause
    return error


def _positive(what: str, minimum: int = 1, optional: bool = True) -> Callable[[Any, Any, Any], None]:
    def check(_instance: Any, _attribute: Any, value: Any) -> None:
        if value is None and optional:
            return
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
            raise InvalidJob(f"Limits.{what} must be an integer ≥ {minimum}{' or None' if optional else ''}, got {value!r}")

    return check


def _timeout(_instance: Any, _attribute: Any, value: Any) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Real) or not value > 0):
        raise InvalidJob(f"Limits.timeout must be a positive number of seconds or None, got {value!r}")


@attrs.frozen
class Limits:
    """What one run may do: questions and tokens per call, nested continuations, calls in all,
    concurrent calls (``arun``) and seconds in all."""

    max_questions: int | None = attrs.field(default=None, validator=_positive("max_questions"))
    max_tokens: int | None = attrs.field(default=None, validator=_positive("max_tokens"))
    max_depth: int = attrs.field(default=8, validator=_positive("max_depth", 0, optional=False))
    max_requests: int | None = attrs.field(default=None, validator=_positive("max_requests"))
    max_concurrency: int = attrs.field(default=1, validator=_positive("max_concurrency", optional=False))
    timeout: float | None = attrs.field(default=None, validator=_timeout)


@attrs.frozen
class RowOutcome:
    """One input row's answer (``kind`` ``"answered"``) and its result."""

    kind: str
    result: Any
    decision: Any = None


@attrs.frozen
class QuestionOutcome:
    """What happened to one question: ``"answered"`` (``rows``), ``"failed"`` (``error``),
    ``"skipped"`` (never sent) or ``"cancelled"``; ``sent`` says whether its request went out."""

    id: str
    kind: str
    rows: tuple[RowOutcome, ...] = ()
    error: BaseException | None = attrs.field(default=None, eq=False)
    sent: bool = False

    @property
    def abstained(self) -> bool:
        """Whether a row abstained (never here: abstention policies are out of scope)."""
        return any(row.kind == "abstained" for row in self.rows)


@attrs.frozen
class JobResult:
    """A finished run: the job's ``value`` (None when cancelled), every question's outcome in
    scheduling order, the provider ``calls`` made and the ``status`` (completed / cancelled)."""

    value: Any
    outcomes: Mapping[str, QuestionOutcome]
    calls: int
    status: str = "completed"


@attrs.frozen
class Follow:
    """What a ``then`` continuation returns: the next ``job`` and the ``state`` it reads."""

    job: JobTree
    state: Any


@attrs.frozen
class Ask:
    """A job node: one question and its id."""

    question: Any
    id: str


@attrs.frozen
class Collect:
    """A job node: independent jobs, keyed."""

    items: tuple[tuple[str, JobTree], ...]


@attrs.frozen
class Map:
    """A job node: a function of a job's value."""

    job: JobTree
    fn: Callable[[Any], Any]


@attrs.frozen
class Then:
    """A job node: a job and the continuation that runs once it is answered."""

    job: JobTree
    fn: Callable[[Any], Follow]


class JobTree:
    """An immutable holder of a job's root node; ``DecisionJob`` adds the builders and the runs."""

    __slots__ = ("_node",)

    def __init__(self, node: Ask | Collect | Map | Then) -> None:
        object.__setattr__(self, "_node", node)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"DecisionJob is immutable: cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"DecisionJob is immutable: cannot delete {name!r}")

    @property
    def node(self) -> Ask | Collect | Map | Then:
        """The root node."""
        return self._node

    def question_ids(self) -> tuple[str, ...]:
        """The ids known before running (not those a continuation creates), in scheduling order."""
        return tuple(ask.id for ask in static_asks(self))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JobTree) and self._node == other._node

    def __hash__(self) -> int:
        return hash(self._node)

    def __repr__(self) -> str:
        return f"DecisionJob({type(self._node).__name__.lower()}, questions={list(self.question_ids())})"


def static_asks(job: JobTree) -> list[Ask]:
    """The questions of ``job`` that need no continuation to run first, in scheduling order."""
    node = job.node
    if isinstance(node, Ask):
        return [node]
    if isinstance(node, Collect):
        return [ask for _, sub in node.items for ask in static_asks(sub)]
    return static_asks(node.job)


__all__ = [
    "QUESTION_TYPES", "Ask", "Collect", "Follow", "InvalidJob", "JobError", "JobFailed", "JobLimitExceeded",
    "JobResult", "JobTimeout", "JobTree", "Limits", "Map", "QuestionOutcome", "RowOutcome", "Then", "static_asks",
]
