"""Deferred decision jobs (NNx's ``DecisionJob``): batch independent questions, chain dependent ones.

A :class:`DecisionJob` only *describes* work — building one calls no provider and runs no user
function. ``ask(question, id=...)`` is one question over the run's state (the provider's inputs);
``collect({key: job})`` gathers independent jobs into a mapping (in key order); ``job.map(fn)``
transforms a value; ``job.then(fn)`` is a dependent job: ``fn(value)`` returns a
:class:`Follow` (the next job and the state it reads). ``run(provider, state=, limits=)`` and
``await arun(..., cancel=asyncio.Event())`` are the only effects; the provider is borrowed, never
closed.

* **Batching** — the questions known before running (``ask`` / ``collect`` / ``map`` and each
  ``then``'s prerequisite) go out in ``ceil(count / cap)`` calls per state, in a stable order:
  ``cap`` is the provider's ``max_questions`` (1 for a provider with only ``decide``; a provider
  with ``decide_many`` and no ``max_questions`` takes them all) lowered by
  ``Limits.max_questions``.
* **Refused before any call** (:class:`InvalidJob`): duplicate ids, a question the provider's
  ``check(question, inputs)`` refuses, and ``Limits.max_tokens`` for a provider without
  ``count_tokens(questions, inputs)``.
* **Checked answers** — one result list per question, one result per input row, each a result
  of that question (its digest); anything else fails the call with ``InvalidDecisionResponse``.
* **Fail-fast, never retried** — a failed call raises :class:`JobFailed` (the provider's error
  as ``__cause__``) carrying every outcome so far: ``completed`` (answered), ``failed`` (that
  call's questions), ``skipped`` (never sent). ``max_requests`` / ``max_depth`` raise
  :class:`JobLimitExceeded`, the ``timeout`` :class:`JobTimeout`, with the outcomes so far.
* **Async** — ``arun`` runs up to ``Limits.max_concurrency`` calls of one batch at once through
  ``adecide_many`` / ``adecide`` (a synchronous provider runs in a worker thread, one call at a
  time). Setting ``cancel`` stops scheduling; the run returns a ``"cancelled"`` :class:`JobResult`
  with no value, and questions it never sent are ``"cancelled"``.

Abstention policies (``ask(policy=...)``) are out of scope here. Independent questions share a
call, nothing more: their answers stay separate marginals.
"""

from __future__ import annotations

import asyncio
import math
import numbers
import pickle
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from nnx_core.decision_questions import (
    Boolean,
    Choice,
    DecisionError,
    InvalidDecisionResponse,
    ProviderFailure,
    Score,
    UnsupportedCapability,
)
from nnx_core.errors import OutOfScopeError

QUESTION_TYPES = (Choice, Boolean, Score)
_clock = time.monotonic  # seconds for Limits.timeout (a module attribute, so tests can drive it)


class JobError(DecisionError):
    """Base of the job errors: ``outcomes`` (question id → :class:`QuestionOutcome`, in scheduling
    order) and ``completed`` (the answered ones) — empty when refused before any call."""

    def __init__(self, message: str, *, outcomes: Mapping[str, QuestionOutcome] | None = None) -> None:
        super().__init__(message)
        self.outcomes = dict(outcomes or {})
        self.completed = {k: v for k, v in self.outcomes.items() if v.kind == "answered"}

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickles with its outcomes and its cause; a provider error that does not pickle travels as
        a ``ProviderFailure`` naming it (so a job error crosses a process boundary)."""
        state = dict(self.__dict__)
        state["outcomes"] = {k: attrs.evolve(v, error=_portable(v.error)) for k, v in self.outcomes.items()}
        state["completed"] = {k: state["outcomes"][k] for k in self.completed}
        return (_rebuilt, (type(self), self.args, state, _portable(self.__cause__)))


class InvalidJob(JobError, ValueError):
    """A job that cannot run as described (duplicate ids, an unsupported question, an
    unenforceable token cap, a continuation that does not return a ``Follow``, bad limits)."""


class JobFailed(JobError):
    """A provider call failed: ``failed`` are its questions, ``skipped`` the ones never sent."""

    def __init__(self, message: str, *, outcomes: Mapping[str, QuestionOutcome] | None = None,
                 failed: Sequence[str] = (), skipped: Sequence[str] = ()) -> None:
        super().__init__(message, outcomes=outcomes)
        self.failed, self.skipped = tuple(failed), tuple(skipped)


class JobLimitExceeded(JobError):
    """``Limits.max_requests`` or ``max_depth`` stopped the job before its next call."""


class JobTimeout(JobError, TimeoutError):
    """``Limits.timeout`` elapsed; requests already sent are not rolled back."""


def _portable(error: BaseException | None) -> BaseException | None:
    """``error`` when it survives pickling, else a ``ProviderFailure`` naming it."""
    if error is None:
        return None
    try:
        pickle.loads(pickle.dumps(error))
    except Exception:  # noqa: BLE001 - whatever stops it from pickling or unpickling
        return ProviderFailure(f"{type(error).__name__}: {error}")
    return error


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
    concurrent calls (``arun``) and seconds in all (checked between calls)."""

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

    job: DecisionJob
    state: Any


@attrs.frozen
class _Ask:
    question: Any
    id: str


@attrs.frozen
class _Collect:
    items: tuple[tuple[str, DecisionJob], ...]


@attrs.frozen
class _Map:
    job: DecisionJob
    fn: Callable[[Any], Any]


@attrs.frozen
class _Then:
    job: DecisionJob
    fn: Callable[[Any], Follow]


@attrs.frozen
class DecisionJob:
    """An immutable, deferred description of decision work (see the module docstring)."""

    node: _Ask | _Collect | _Map | _Then

    @staticmethod
    def ask(question: Any, *, id: str, policy: Any = None, model_id: str | None = None) -> DecisionJob:  # noqa: A002
        """One question over the state, keyed by ``id`` (unique in a run). The value is the
        provider's results, one per input row."""
        if policy is not None or model_id is not None:
            raise OutOfScopeError("DecisionJob.ask(policy=...): abstention policies are out of scope of this implementation")
        if not isinstance(question, QUESTION_TYPES):
            raise InvalidJob(f"ask() needs a Choice, Boolean or Score, got {type(question).__name__}")
        if not isinstance(id, str) or not id.strip():
            raise InvalidJob(f"a question id must be a non-blank string, got {id!r}")
        return DecisionJob(_Ask(question, id))

    @staticmethod
    def collect(jobs: Mapping[str, DecisionJob]) -> DecisionJob:
        """Independent jobs; the value maps each key to its job's value, in ``jobs``' order."""
        if not isinstance(jobs, Mapping) or not jobs:
            raise InvalidJob("collect() needs a non-empty mapping of key -> DecisionJob")
        bad = [k for k, j in jobs.items() if not isinstance(k, str) or not isinstance(j, DecisionJob)]
        if bad:
            raise InvalidJob(f"collect() needs string keys and DecisionJob values; bad entries {bad}")
        return DecisionJob(_Collect(tuple(jobs.items())))

    def map(self, fn: Callable[[Any], Any]) -> DecisionJob:
        """This job with ``fn`` applied to its value (no provider call)."""
        if not callable(fn):
            raise InvalidJob(f"map() needs a callable, got {type(fn).__name__}")
        return DecisionJob(_Map(self, fn))

    def then(self, fn: Callable[[Any], Follow]) -> DecisionJob:
        """A dependent job: once this one succeeds, ``fn(value)`` returns the ``Follow`` to run."""
        if not callable(fn):
            raise InvalidJob(f"then() needs a callable, got {type(fn).__name__}")
        return DecisionJob(_Then(self, fn))

    def question_ids(self) -> tuple[str, ...]:
        """The ids known before running (not those a continuation creates), in scheduling order."""
        return tuple(ask.id for ask in _static_asks(self))

    def run(self, provider: Any, *, state: Any, limits: Limits | None = None) -> JobResult:
        """Run the job against ``provider`` (borrowed) over ``state``."""
        coroutine = _Runner(provider, limits or Limits(), None, asynchronous=False).job(self, state)
        try:  # nothing in the synchronous path awaits: the coroutine finishes on its first step
            coroutine.send(None)
        except StopIteration as done:
            return done.value
        coroutine.close()
        raise RuntimeError("a synchronous decision job awaited")  # pragma: no cover

    async def arun(self, provider: Any, *, state: Any, limits: Limits | None = None,
                   cancel: asyncio.Event | None = None) -> JobResult:
        """Run the job asynchronously; ``cancel`` (an ``asyncio.Event``) stops scheduling."""
        return await _Runner(provider, limits or Limits(), cancel, asynchronous=True).job(self, state)


def _static_asks(job: DecisionJob) -> list[_Ask]:
    node = job.node
    if isinstance(node, _Ask):
        return [node]
    if isinstance(node, _Collect):
        return [ask for _, sub in node.items for ask in _static_asks(sub)]
    return _static_asks(node.job)


class _Cancelled(Exception):
    pass


def _rows(state: Any) -> int | None:
    try:
        return len(state)
    except TypeError:
        return None


class _Runner:
    def __init__(self, provider: Any, limits: Limits, cancel: asyncio.Event | None, *, asynchronous: bool) -> None:
        self.provider, self.limits, self.cancel, self.asynchronous = provider, limits, cancel, asynchronous
        self.outcomes: dict[str, QuestionOutcome] = {}
        self.calls = 0
        self.started = _clock()
        self.lock = asyncio.Lock() if asynchronous else None
        many = getattr(provider, "decide_many", None) or getattr(provider, "adecide_many", None)
        own = getattr(provider, "max_questions", None)
        cap = (own or math.inf) if many is not None else 1
        self.cap = min(cap, limits.max_questions or math.inf)

    async def job(self, job: DecisionJob, state: Any) -> JobResult:
        if self.limits.max_tokens is not None and not callable(getattr(self.provider, "count_tokens", None)):
            raise InvalidJob("Limits.max_tokens needs a provider with count_tokens(questions, inputs); this one has none")
        try:
            value = await self._evaluate(job, state, 0)
        except _Cancelled:
            return JobResult(None, dict(self.outcomes), self.calls, "cancelled")
        return JobResult(value, dict(self.outcomes), self.calls)

    def _check(self, asks: list[_Ask], state: Any) -> None:
        ids = [a.id for a in asks]
        duplicate = sorted({i for i in ids if ids.count(i) > 1 or i in self.outcomes})
        if duplicate:
            raise InvalidJob(f"question ids must be unique in a run; repeated: {duplicate} (duplicate question id "
                             f"{duplicate[0]!r})", outcomes=self.outcomes)
        check = getattr(self.provider, "check", None)
        for ask in asks if callable(check) else ():
            try:
                check(ask.question, state)
            except (UnsupportedCapability, ValueError) as exc:
                raise InvalidJob(f"question {ask.id!r} cannot be served by this provider: {exc}",
                                 outcomes=self.outcomes) from exc

    async def _evaluate(self, job: DecisionJob, state: Any, depth: int) -> Any:
        asks = _static_asks(job)
        self._check(asks, state)
        answers = await self._answer(asks, state)
        return await self._value(job, answers, depth)

    async def _value(self, job: DecisionJob, answers: Mapping[str, list[Any]], depth: int) -> Any:
        node = job.node
        if isinstance(node, _Ask):
            return answers[node.id]
        if isinstance(node, _Collect):
            return {key: await self._value(sub, answers, depth) for key, sub in node.items}
        value = await self._value(node.job, answers, depth)
        if isinstance(node, _Map):
            return node.fn(value)
        follow = node.fn(value)
        if not isinstance(follow, Follow):
            raise InvalidJob(f"a then() continuation must return Follow(job, state), got {type(follow).__name__}",
                             outcomes=self.outcomes)
        if depth + 1 > self.limits.max_depth:
            raise JobLimitExceeded(f"continuations nest deeper than Limits.max_depth={self.limits.max_depth}",
                                   outcomes=self.outcomes)
        self._stop_if_cancelled()
        return await self._evaluate(follow.job, follow.state, depth + 1)

    def _batches(self, asks: list[_Ask], state: Any) -> list[list[_Ask]]:
        size = self.cap
        batches: list[list[_Ask]] = []
        for ask in asks:
            if batches and len(batches[-1]) < size and self._fits(batches[-1] + [ask], state):
                batches[-1].append(ask)
            else:
                batches.append([ask])
        return batches

    def _fits(self, asks: list[_Ask], state: Any) -> bool:
        cap = self.limits.max_tokens
        return cap is None or self.provider.count_tokens([a.question for a in asks], state) <= cap

    def _stop_if_cancelled(self) -> None:
        if self.cancel is not None and self.cancel.is_set():
            raise _Cancelled

    def _mark(self, asks: Sequence[_Ask], kind: str, **fields: Any) -> None:
        for ask in asks:
            self.outcomes[ask.id] = QuestionOutcome(ask.id, kind, **fields)

    async def _answer(self, asks: list[_Ask], state: Any) -> dict[str, list[Any]]:
        batches = self._batches(asks, state)
        answers: dict[str, list[Any]] = {}
        wave = max(1, self.limits.max_concurrency) if self.asynchronous else 1
        for start in range(0, len(batches), wave):
            group, rest = batches[start:start + wave], [a for b in batches[start:] for a in b]
            if self.cancel is not None and self.cancel.is_set():
                self._mark(rest, "cancelled")
                raise _Cancelled
            if self.limits.timeout is not None and _clock() - self.started > self.limits.timeout:
                self._mark(rest, "skipped")
                raise JobTimeout(f"the run took longer than Limits.timeout={self.limits.timeout}s", outcomes=self.outcomes)
            if self.limits.max_requests is not None and self.calls + len(group) > self.limits.max_requests:
                self._mark(rest, "skipped")
                raise JobLimitExceeded(f"the job needs more than Limits.max_requests={self.limits.max_requests} calls",
                                       outcomes=self.outcomes)
            self.calls += len(group)
            done = await asyncio.gather(*(self._attempt(b, state) for b in group)) \
                if self.asynchronous else [await self._attempt(group[0], state)]
            failure = next(((b, r) for b, r in zip(group, done, strict=True) if isinstance(r, BaseException)), None)
            for batch, results in zip(group, done, strict=True):
                if isinstance(results, BaseException):
                    self._mark(batch, "failed", error=results, sent=True)
                else:
                    for ask, rows in zip(batch, results, strict=True):
                        answers[ask.id] = rows
                        self.outcomes[ask.id] = QuestionOutcome(ask.id, "answered", tuple(RowOutcome("answered", r) for r in rows), sent=True)
            if failure is not None:
                skipped = [a for b in batches[start + wave:] for a in b]
                self._mark(skipped, "skipped")
                failed = [a.id for a in failure[0]]
                raise JobFailed(f"the provider call for {failed} failed: {failure[1]}", outcomes=self.outcomes,
                                failed=failed, skipped=[a.id for a in skipped]) from failure[1]
        return answers

    async def _attempt(self, batch: list[_Ask], state: Any) -> list[list[Any]] | Exception:
        """One call's checked answers, or the error it raised (fail-fast decides what follows)."""
        try:
            return await self._call(batch, state)
        except Exception as exc:  # noqa: BLE001 - any provider error fails the job, with its cause
            return exc

    async def _call(self, batch: list[_Ask], state: Any) -> list[list[Any]]:
        questions = [a.question for a in batch]
        provider = self.provider
        if self.asynchronous:
            if len(batch) > 1 and callable(getattr(provider, "adecide_many", None)):
                results = await provider.adecide_many(questions, state)
            elif len(batch) == 1 and callable(getattr(provider, "adecide", None)):
                results = [await provider.adecide(questions[0], state)]
            else:
                async with self.lock:  # a synchronous provider: a worker thread, one call at a time
                    results = await asyncio.to_thread(self._sync_call, questions, state)
        else:
            results = self._sync_call(questions, state)
        return self._checked(batch, results, state)

    def _sync_call(self, questions: list[Any], state: Any) -> list[list[Any]]:
        if len(questions) > 1:
            return self.provider.decide_many(questions, state)
        return [self.provider.decide(questions[0], state)]

    @staticmethod
    def _checked(batch: list[_Ask], results: Any, state: Any) -> list[list[Any]]:
        results = list(results)
        if len(results) != len(batch):
            raise InvalidDecisionResponse(f"the provider answered {len(results)} questions, not {len(batch)}")
        rows = _rows(state)
        for ask, answer in zip(batch, results, strict=True):
            answer = list(answer)
            if rows is not None and len(answer) != rows:
                raise InvalidDecisionResponse(f"question {ask.id!r}: {len(answer)} results for {rows} input rows")
            digest = ask.question.digest()
            if any(getattr(r, "question_digest", None) != digest for r in answer):
                raise InvalidDecisionResponse(
                    f"question {ask.id!r}: a result answers another question (its digest and kind do not answer it)"
                )
        return [list(a) for a in results]


__all__ = [
    "DecisionJob", "Follow", "InvalidJob", "JobError", "JobFailed", "JobLimitExceeded", "JobResult", "JobTimeout",
    "Limits", "QuestionOutcome", "RowOutcome",
]
