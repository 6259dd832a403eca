"""Deferred decision jobs (NNx's ``DecisionJob``): batch independent questions, chain dependent ones.

A :class:`DecisionJob` only *describes* work — building one calls no provider and runs no user
function. ``ask(question, id=...)`` is one question over the run's state (the provider's inputs);
``collect({key: job})`` gathers independent jobs into a mapping (in key order); ``job.map(fn)``
transforms a value; ``job.then(fn)`` is a dependent job: ``fn(value)`` returns a
:class:`Follow` (the next job and the state it reads). ``run(provider, state=, limits=)`` and
``await arun(..., cancel=asyncio.Event())`` are the only effects; the provider is borrowed, never
closed. A job of ``ask`` / ``collect`` only is plain data (``state()``, pickling); one holding a
function is not.

* **Rounds** — a run evaluates the job in rounds: every question whose prerequisites are answered
  is *ready*; the ready questions are batched per state object (continuations that return the
  same state object share calls) into ``ceil(count / cap)`` calls in a stable order, where
  ``cap`` is the provider's ``max_questions`` (1 for a provider without ``decide_many``) lowered
  by ``Limits.max_questions``, and split further so that each call stays under
  ``Limits.max_tokens`` by the provider's ``count_tokens(questions, inputs)``. Then each
  continuation whose prerequisite is answered runs, once.
* **Checked before they are sent** — every question a round discovers is registered and checked
  (the provider's ``check(question, inputs)``, else its ``capabilities().check``) before that
  round's calls. A refusal, a duplicate id, a question that alone exceeds ``max_tokens`` or a
  ``max_tokens`` the provider cannot count is :class:`InvalidJob`; a hook that fails otherwise is
  :class:`JobFailed` (the hook's error as ``__cause__``). Before the first call the outcomes are
  empty; later, every known question without an answer is reported ``"skipped"``.
* **Checked answers** — one result sequence per question, one result per input row, each a
  result of that question's kind and digest with its options in its order; anything else fails
  the call with ``InvalidDecisionResponse``.
* **Fail-fast, never retried** — a failed call raises :class:`JobFailed` carrying every outcome so
  far: ``completed`` (answered), ``failed`` (that call's questions), ``skipped`` (ready but never
  sent). ``max_requests`` / ``max_depth`` raise :class:`JobLimitExceeded`, the ``timeout``
  :class:`JobTimeout` (``run`` checks it between calls and provider hooks).
* **Async** — ``arun`` keeps up to ``Limits.max_concurrency`` calls in flight through
  ``adecide_many`` / ``adecide``; a provider with only synchronous methods runs in a worker
  thread, one call at a time. The timeout cancels calls in flight (a worker thread is waited
  for); a limit lets them finish first. Setting ``cancel`` (even if it is cleared again) stops the
  run: calls in flight are cancelled (``sent`` — never rolled back), no continuation runs, and
  the result is ``"cancelled"`` with no value. Cancelling the task cleans up the job's own tasks,
  waits for a worker thread and re-raises.

Abstention policies (``ask(policy=...)``) are out of scope here. Independent questions share a
call, nothing more: their answers stay separate marginals.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

from nnx_core.decision_questions import question_from_state
from nnx_core.errors import OutOfScopeError
from nnx_api.decide.runner import Runner
from nnx_api.decide.values import (
    QUESTION_TYPES,
    Ask,
    Collect,
    Follow,
    InvalidJob,
    JobError,
    JobFailed,
    JobLimitExceeded,
    JobResult,
    JobTimeout,
    JobTree,
    Limits,
    Map,
    QuestionOutcome,
    RowOutcome,
    Then,
)


class DecisionJob(JobTree):
    """An immutable, deferred description of decision work (see the module docstring)."""

    __slots__ = ()

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
        return DecisionJob(Ask(question, id))

    @staticmethod
    def collect(jobs: Mapping[str, DecisionJob]) -> DecisionJob:
        """Independent jobs; the value maps each key to its job's value, in ``jobs``' order."""
        if not isinstance(jobs, Mapping) or not jobs:
            raise InvalidJob("collect() needs a non-empty mapping of key -> DecisionJob")
        bad = [k for k, j in jobs.items() if not isinstance(k, str) or not isinstance(j, DecisionJob)]
        if bad:
            raise InvalidJob(f"collect() needs string keys and DecisionJob values; bad entries {bad}")
        return DecisionJob(Collect(tuple(jobs.items())))

    def map(self, fn: Callable[[Any], Any]) -> DecisionJob:
        """This job with ``fn`` applied to its value (no provider call)."""
        if not callable(fn):
            raise InvalidJob(f"map() needs a callable, got {type(fn).__name__}")
        return DecisionJob(Map(self, fn))

    def then(self, fn: Callable[[Any], Follow]) -> DecisionJob:
        """A dependent job: once this one succeeds, ``fn(value)`` returns the ``Follow`` to run."""
        if not callable(fn):
            raise InvalidJob(f"then() needs a callable, got {type(fn).__name__}")
        return DecisionJob(Then(self, fn))

    def state(self) -> dict[str, Any]:
        """Plain data for a job of ``ask`` / ``collect`` only (``{"ask": id, "question": ...}`` or
        ``{"collect": [[key, state], ...]}``); a job holding a function is refused (``TypeError``)."""
        node = self._node
        if isinstance(node, Ask):
            return {"ask": node.id, "question": node.question.state()}
        if isinstance(node, Collect):
            return {"collect": [[key, job.state()] for key, job in node.items]}
        raise TypeError("a DecisionJob holding a function (map / then) cannot be serialised; build it where it runs")

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickles as its ``state()`` (refused for a job holding a function)."""
        return (_job_from_state, (self.state(),))

    def run(self, provider: Any, *, state: Any, limits: Limits | None = None) -> JobResult:
        """Run the job against ``provider`` (borrowed) over ``state``."""
        return Runner(self, provider, state, limits).run()

    async def arun(self, provider: Any, *, state: Any, limits: Limits | None = None,
                   cancel: asyncio.Event | None = None) -> JobResult:
        """Run the job asynchronously; setting ``cancel`` (an ``asyncio.Event``) cancels it."""
        return await Runner(self, provider, state, limits).arun(cancel)


def _job_from_state(state: Mapping[str, Any]) -> DecisionJob:
    """The job a ``DecisionJob.state()`` describes."""
    if "ask" in state:
        return DecisionJob.ask(question_from_state(state["question"]), id=state["ask"])
    if "collect" in state:
        return DecisionJob.collect({key: _job_from_state(item) for key, item in state["collect"]})
    raise InvalidJob(f"not a DecisionJob state: keys {sorted(state)}")


__all__ = [
    "DecisionJob", "Follow", "InvalidJob", "JobError", "JobFailed", "JobLimitExceeded", "JobResult", "JobTimeout",
    "Limits", "QuestionOutcome", "RowOutcome",
]
