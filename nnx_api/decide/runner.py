"""How a :class:`~nnx_api.decide.jobs.DecisionJob` runs (``run`` / ``arun``): the rounds, the
batching, the checks and the outcome bookkeeping its module docstring describes."""

from __future__ import annotations

import asyncio
import numbers
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import numpy as np
import torch

from nnx_core.decision_questions import (
    Boolean,
    InvalidDecisionRequest,
    InvalidDecisionResponse,
    ProviderFailure,
    UnsupportedCapability,
)
from nnx_core.decisions import RESULT_TYPES
from nnx_api.decide.values import (
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
    static_asks,
)

_clock = time.monotonic  # seconds for Limits.timeout (a module attribute, so tests can drive it)


def _modality(state: Any) -> tuple[str, int] | None:
    """The modality and row count of a state a provider reads: a tensor or array (or a tuple led
    by one), or a sequence of texts; None for anything else."""
    first = state[0] if isinstance(state, tuple) and state and not isinstance(state[0], str) else state
    if isinstance(first, (torch.Tensor, np.ndarray)) and first.ndim >= 1:
        return "tensor", int(first.shape[0])
    if isinstance(state, Sequence) and not isinstance(state, str) and all(isinstance(x, str) for x in state):
        return "text", len(state)
    return None


_PENDING = object()


class _HookFailed(Exception):
    """A provider hook (``check``, ``capabilities``, ``count_tokens``) raised something other than
    a refusal: the job fails with it as the cause."""

    def __init__(self, error: BaseException, question: str | None = None) -> None:
        super().__init__(str(error))
        self.error, self.question = error, question


@attrs.frozen(eq=False)
class _Batch:
    """One provider call: its questions and the state they read."""

    asks: tuple[Ask, ...]
    state: Any


class Runner:
    """One run of a job: rounds of ready questions, batched per state, then the continuations."""

    def __init__(self, job: JobTree, provider: Any, state: Any, limits: Limits | None) -> None:
        limits = Limits() if limits is None else limits
        if not isinstance(limits, Limits):
            raise InvalidJob(f"limits must be a Limits, got {type(limits).__name__}")
        if not callable(getattr(provider, "decide", None)):
            raise InvalidJob("a decision provider needs decide(question, inputs)")
        self.job, self.provider, self.limits = job, provider, limits
        self.states: list[Any] = [state]  # questions batch per state object
        self.known: dict[str, None] = {}  # every registered question id, in order
        self.order: dict[str, None] = {}  # question ids in scheduling order
        self.outcomes: dict[str, QuestionOutcome] = {}
        self.answers: dict[str, Any] = {}
        self.memo: dict[tuple[int, ...], Any] = {}  # tree path -> a map's value / a continuation's Follow
        self.calls = self.launched = 0
        self.started = _clock()
        own = getattr(provider, "max_questions", None) if callable(getattr(provider, "decide_many", None)) else 1
        if own is not None and (isinstance(own, bool) or not isinstance(own, numbers.Integral) or own < 1):
            raise InvalidJob(f"the provider's max_questions must be a positive integer or None, got {own!r}")
        self.cap = min(c for c in (own, limits.max_questions, sys.maxsize) if c is not None)
        if limits.max_tokens is not None and not callable(getattr(provider, "count_tokens", None)):
            raise InvalidJob(f"Limits.max_tokens={limits.max_tokens} cannot be enforced: the provider has no "
                             "count_tokens(questions, inputs)")
        try:
            self._register([(ask, 0) for ask in static_asks(job)])
        except _HookFailed as hook:
            raise JobFailed(f"the provider's pre-call check failed ({type(hook.error).__name__}: {hook.error}); "
                            "nothing was sent") from hook.error

    # ---- bookkeeping

    def _ordered(self) -> dict[str, QuestionOutcome]:
        return {i: self.outcomes[i] for i in self.order if i in self.outcomes}

    def _mark(self, batches: Sequence[_Batch], kind: str, *, sent: bool = False) -> None:
        for batch in batches:
            for ask in batch.asks:
                self.outcomes[ask.id] = QuestionOutcome(ask.id, kind, sent=sent)

    def _unsent(self, kind: str) -> list[str]:
        """Every known question without an outcome, now reported as ``kind``."""
        ids = [i for i in self.known if i not in self.outcomes]
        for i in ids:
            self.order.setdefault(i, None)
            self.outcomes[i] = QuestionOutcome(i, kind)
        return ids

    def _expired(self) -> bool:
        return self.limits.timeout is not None and _clock() - self.started > self.limits.timeout

    def _remaining(self) -> float | None:
        return None if self.limits.timeout is None else max(self.limits.timeout - (_clock() - self.started), 0.0)

    def _timeout(self) -> JobTimeout:
        return JobTimeout(f"the run took longer than Limits.timeout={self.limits.timeout}s; requests already "
                          "sent are not rolled back", outcomes=self._ordered())

    def _deadline(self) -> None:
        """Provider hooks run synchronously: the timeout is checked between them."""
        if self._expired():
            raise self._timeout()

    def _limit(self) -> Callable[[], JobError] | None:
        """What builds the error of the limit the next call would break, if any."""
        if self.limits.max_requests is not None and self.launched >= self.limits.max_requests:
            return lambda: JobLimitExceeded(f"the job needs more than Limits.max_requests={self.limits.max_requests} "
                                            "provider calls", outcomes=self._ordered())
        return self._timeout if self._expired() else None

    # ---- registration and checks

    def _register(self, asks: Sequence[tuple[Ask, int]]) -> None:
        """Register every question (so a refusal reports them all), then check each."""
        duplicates = []
        for ask, _ in asks:
            if ask.id in self.known:
                duplicates.append(ask.id)
            else:
                self.known[ask.id] = None
        if duplicates:
            raise InvalidJob(f"duplicate question id {duplicates[0]!r}: ids must be unique in a run",
                             outcomes=self._ordered())
        for ask, group in asks:
            self._deadline()
            self._check(ask, self.states[group])

    def _check(self, ask: Ask, state: Any) -> None:
        try:
            check = getattr(self.provider, "check", None)
            if callable(check):
                check(ask.question, state)
            elif callable(getattr(self.provider, "capabilities", None)):
                found = _modality(state)
                if found is None:
                    raise UnsupportedCapability(f"a job's state must be texts or a tensor / array the provider "
                                                f"reads, got {type(state).__name__}")
                self.provider.capabilities().check(ask.question, modality=found[0], batch_size=found[1])
        except (UnsupportedCapability, InvalidDecisionRequest) as error:
            raise InvalidJob(f"question {ask.id!r} cannot be served by this provider: {error}",
                             outcomes=self._ordered()) from error
        except Exception as error:  # noqa: BLE001 - the provider's own check broke: a provider failure
            raise _HookFailed(error, ask.id) from error

    # ---- evaluation

    def _evaluate(self, job: JobTree, group: int, depth: int, path: tuple[int, ...],
                  ready: list[tuple[Ask, int]]) -> Any:
        """The job's value, or ``_PENDING`` with its unanswered questions appended to ``ready``."""
        node = job.node
        if isinstance(node, Ask):
            if node.id in self.answers:
                return self.answers[node.id]
            ready.append((node, group))
            return _PENDING
        if isinstance(node, Collect):
            values = [self._evaluate(sub, group, depth, (*path, i), ready) for i, (_, sub) in enumerate(node.items)]
            return _PENDING if any(v is _PENDING for v in values) else {
                key: value for (key, _), value in zip(node.items, values, strict=True)}
        value = self._evaluate(node.job, group, depth, (*path, 0), ready)
        if value is _PENDING:
            return _PENDING
        if path not in self.memo:  # a map or a continuation runs once, after its prerequisite
            self.memo[path] = node.fn(value) if isinstance(node, Map) else self._follow(node, value, depth)
        if isinstance(node, Map):
            return self.memo[path]
        follow, follow_group = self.memo[path]
        return self._evaluate(follow.job, follow_group, depth + 1, (*path, 1), ready)

    def _follow(self, node: Then, value: Any, depth: int) -> tuple[Follow, int]:
        if depth + 1 > self.limits.max_depth:
            raise JobLimitExceeded(f"a continuation at depth {depth + 1} exceeds Limits.max_depth="
                                   f"{self.limits.max_depth}", outcomes=self._ordered())
        follow = node.fn(value)
        if not isinstance(follow, Follow) or not isinstance(follow.job, JobTree):
            raise InvalidJob(f"a then() continuation must return Follow(job, state), got {type(follow).__name__}",
                             outcomes=self._ordered())
        group = next((i for i, known in enumerate(self.states) if known is follow.state), None)
        if group is None:
            self.states.append(follow.state)
            group = len(self.states) - 1
        self._register([(ask, group) for ask in static_asks(follow.job)])
        return follow, group

    def _round(self) -> tuple[Any, list[_Batch]]:
        """The job's value (``_PENDING`` while questions remain) and this round's calls."""
        ready: list[tuple[Ask, int]] = []
        try:
            value = self._evaluate(self.job, 0, 0, (), ready)
            groups: dict[int, list[Ask]] = {}
            for ask, group in ready:
                groups.setdefault(group, []).append(ask)
            batches = [b for group, asks in groups.items() for b in self._batches(asks, self.states[group])]
        except JobError as error:
            if self.calls:
                self._unsent("skipped")
            error.outcomes = self._ordered()
            error.completed = {k: v for k, v in error.outcomes.items() if v.kind == "answered"}
            raise
        except _HookFailed as hook:
            skipped = self._unsent("skipped") if self.calls else []
            where = f" checking question {hook.question!r}" if hook.question is not None else ""
            raise JobFailed(f"a provider hook failed{where} ({type(hook.error).__name__}: {hook.error}); "
                            f"{len(skipped)} question(s) skipped", outcomes=self._ordered(),
                            skipped=skipped) from hook.error
        for batch in batches:
            self.order.update(dict.fromkeys(ask.id for ask in batch.asks))
        return value, batches

    def _batches(self, asks: list[Ask], state: Any) -> list[_Batch]:
        """``ceil(len / cap)`` calls in order, each under the token cap when one is set."""
        cap, tokens = self.cap, self.limits.max_tokens
        if tokens is None:
            return [_Batch(tuple(asks[i:i + cap]), state) for i in range(0, len(asks), cap)]
        calls: list[list[Ask]] = []
        current: list[Ask] = []
        for ask in asks:
            self._deadline()
            candidate = [*current, ask]
            if len(candidate) > cap:  # full: a call that cannot be sent is never counted
                calls.append(current)
                current, candidate = [], [ask]
            count = self._count(candidate, state)
            if count > tokens and current:
                calls.append(current)
                current = []
                self._deadline()  # one hook call at most between two checks
                count = self._count([ask], state)
            if count > tokens:
                raise InvalidJob(f"question {ask.id!r} alone exceeds max_tokens={tokens} ({count:g} tokens)",
                                 outcomes=self._ordered())
            current.append(ask)
        return [_Batch(tuple(c), state) for c in (*calls, current) if c]

    def _count(self, asks: list[Ask], state: Any) -> float:
        try:
            tokens = self.provider.count_tokens([a.question for a in asks], state)
        except Exception as error:  # noqa: BLE001 - the provider's token count broke: a provider failure
            raise _HookFailed(error) from error
        value = float("nan")
        if isinstance(tokens, numbers.Real) and not isinstance(tokens, bool):
            try:
                value = float(tokens)
            except OverflowError:  # an integer beyond float range exceeds any cap
                value = float("inf")
        if not value >= 0:
            raise _HookFailed(InvalidDecisionResponse(f"count_tokens() must return a number ≥ 0, got {tokens!r}"))
        return value

    # ---- calls

    @staticmethod
    def _checked(batch: _Batch, answered: Any) -> list[tuple[Any, ...]]:
        """The provider's answers, checked against the questions they claim to answer."""
        answers = list(answered)
        if len(answers) != len(batch.asks):
            raise InvalidDecisionResponse(f"the provider answered {len(answers)} of {len(batch.asks)} questions "
                                          "in one call")
        found = _modality(batch.state)
        checked = []
        for ask, results in zip(batch.asks, answers, strict=True):
            if isinstance(results, (str, bytes)) or not isinstance(results, Sequence):
                raise InvalidDecisionResponse(f"question {ask.id!r}: expected a sequence of results (one per input "
                                              f"row), got {type(results).__name__}")
            results = tuple(results)
            if found is not None and len(results) != found[1]:
                raise InvalidDecisionResponse(f"question {ask.id!r}: {len(results)} results for {found[1]} input rows")
            question = ask.question
            digest, kind = question.digest(), RESULT_TYPES[question.kind]
            options = None if isinstance(question, Boolean) else question.option_ids
            wrong = [i for i, r in enumerate(results) if not isinstance(r, kind) or r.question_digest != digest
                     or (options is not None and r.option_ids != options)]
            if wrong:
                raise InvalidDecisionResponse(
                    f"question {ask.id!r}: results {wrong[:8]} do not answer it (another question's digest or kind, "
                    "or options other than its own in its order)")
            checked.append(results)
        return checked

    def _call(self, batch: _Batch) -> list[tuple[Any, ...]]:
        questions = [ask.question for ask in batch.asks]
        if len(questions) == 1 and not callable(getattr(self.provider, "decide_many", None)):
            return self._checked(batch, [self.provider.decide(questions[0], batch.state)])
        return self._checked(batch, self.provider.decide_many(questions, batch.state))

    def _record(self, batch: _Batch, answered: list[tuple[Any, ...]]) -> None:
        for ask, results in zip(batch.asks, answered, strict=True):
            self.answers[ask.id] = results
            rows = tuple(RowOutcome("answered", r) for r in results)
            self.outcomes[ask.id] = QuestionOutcome(ask.id, "answered", rows, sent=True)

    def _fail(self, failures: Sequence[tuple[_Batch, BaseException]], pending: Sequence[_Batch]) -> JobFailed:
        for batch, error in failures:
            for ask in batch.asks:
                self.outcomes[ask.id] = QuestionOutcome(ask.id, "failed", error=error, sent=True)
        self._mark(pending, "skipped")
        error = failures[0][1]
        skipped = [ask.id for batch in pending for ask in batch.asks]
        failed = [ask.id for batch, _ in failures for ask in batch.asks]
        failure = JobFailed(f"the provider call for {failed} failed ({type(error).__name__}: {error}); "
                            f"{len(skipped)} question(s) not sent", outcomes=self._ordered(), failed=failed,
                            skipped=skipped)
        failure.__cause__ = error
        return failure

    def run(self) -> JobResult:
        """Run the job synchronously: one call at a time, fail-fast."""
        while True:
            value, batches = self._round()
            if not batches:
                return JobResult(value, self._ordered(), self.calls)
            for index, batch in enumerate(batches):
                limit = self._limit()
                if limit is not None:  # nothing more is sent
                    self._mark(batches[index:], "skipped")
                    raise limit()
                self.launched += 1
                self.calls += 1
                try:
                    self._record(batch, self._call(batch))
                except Exception as error:  # noqa: BLE001 - fail-fast: nothing more is scheduled
                    raise self._fail([(batch, error)], batches[index + 1:]) from error

    # ---- async

    async def arun(self, cancel: asyncio.Event | None) -> JobResult:
        """Run the job on the event loop, up to ``Limits.max_concurrency`` calls in flight; setting
        ``cancel`` cancels it (see the module docstring of ``nnx_api.decide.jobs``)."""
        if cancel is not None and not isinstance(cancel, asyncio.Event):
            raise InvalidJob(f"cancel must be an asyncio.Event, got {type(cancel).__name__}")
        self.cancel, self.stop = cancel, None
        self.in_flight: dict[asyncio.Future[Any], tuple[int, _Batch, bool]] = {}  # task -> (launch, batch, sync)
        self.sent: set[int] = set()  # launches whose provider call began
        self.threads: list[asyncio.Future[Any]] = []  # worker threads of synchronous calls
        try:
            if cancel is not None:  # set at any point, even if cleared again, the event cancels the run
                self.stop = asyncio.ensure_future(cancel.wait())
                await asyncio.sleep(0)  # the watcher starts: an event it cannot await is refused before any call
            while True:
                if self._cancelled():  # before any continuation runs
                    self._unsent("cancelled")
                    return JobResult(None, self._ordered(), self.calls, "cancelled")
                value, batches = self._round()
                if not batches:
                    return JobResult(value, self._ordered(), self.calls)
                stopped = await self._arun_round(list(batches))
                if stopped is not None:
                    return stopped
        except asyncio.CancelledError:
            self._abandon()
            raise
        finally:
            await self._settle()

    def _cancelled(self) -> bool:
        stop = self.stop
        if stop is None:
            return False
        if stop.done() and not stop.cancelled() and stop.exception() is not None:
            error = stop.exception()
            raise InvalidJob(f"the cancel event cannot be awaited in this event loop: {error}") from error
        return stop.done() or bool(self.cancel and self.cancel.is_set())

    def _is_async(self, batch: _Batch) -> bool:
        return callable(getattr(self.provider, "adecide_many", None)) or (
            len(batch.asks) == 1 and callable(getattr(self.provider, "adecide", None)))

    def _may_launch(self, batch: _Batch) -> bool:
        """A synchronous call runs alone; asynchronous ones up to ``max_concurrency`` at once."""
        if not self.in_flight:
            return True
        return (self._is_async(batch) and len(self.in_flight) < self.limits.max_concurrency
                and not any(sync for _, _, sync in self.in_flight.values()))

    async def _arun_round(self, queue: list[_Batch]) -> JobResult | None:
        """Send one round's calls; a cancelled result when the run is cancelled, else None."""
        stopping: Callable[[], JobError] | None = None
        while queue or self.in_flight:
            if self._cancelled():
                self._mark(queue, "cancelled")
                self._abandon()
                return JobResult(None, self._ordered(), self.calls, "cancelled")
            while queue and stopping is None and self._may_launch(queue[0]):
                stopping = self._limit()
                if stopping is None:
                    batch = queue.pop(0)
                    launch, self.launched = self.launched, self.launched + 1
                    task = asyncio.ensure_future(self._acall(launch, batch))
                    self.in_flight[task] = (launch, batch, not self._is_async(batch))
            if stopping is not None and not self.in_flight:  # calls in flight finished first
                self._mark(queue, "skipped")
                raise stopping()
            waiting = [*self.in_flight, *([self.stop] if self.stop is not None else [])]
            done, _ = await asyncio.wait(waiting, timeout=self._remaining(), return_when=asyncio.FIRST_COMPLETED)
            if not done:  # the timeout elapsed with calls in flight
                self._mark(queue, "skipped")
                self._abandon()
                raise self._timeout()
            failures: list[tuple[_Batch, BaseException]] = []
            for task in sorted((t for t in done if t in self.in_flight), key=lambda t: self.in_flight[t][0]):
                _, batch, _ = self.in_flight.pop(task)
                if task.cancelled():  # the job cancels nothing before this point: the provider did
                    failures.append((batch, ProviderFailure("the provider's call was cancelled (CancelledError)")))
                    continue
                try:
                    self._record(batch, task.result())
                except Exception as error:  # noqa: BLE001 - every success of this tick is kept first
                    failures.append((batch, error))
            if failures:  # fail-fast: nothing more is scheduled
                self._abandon()
                raise self._fail(failures, queue) from failures[0][1]
        return None

    async def _acall(self, launch: int, batch: _Batch) -> list[tuple[Any, ...]]:
        self.sent.add(launch)
        self.calls += 1
        questions = [ask.question for ask in batch.asks]
        many = getattr(self.provider, "adecide_many", None)
        if callable(many):
            return self._checked(batch, await many(questions, batch.state))
        one = getattr(self.provider, "adecide", None)
        if callable(one) and len(questions) == 1:
            return self._checked(batch, [await one(questions[0], batch.state)])
        # a synchronous provider: a worker thread, which cannot be interrupted; the run waits for it
        work = asyncio.ensure_future(asyncio.to_thread(self._call, batch))
        self.threads.append(work)
        return await asyncio.shield(work)

    def _abandon(self) -> None:
        """Cancel the calls in flight; a call that began was sent (never rolled back)."""
        for task, (launch, batch, _) in self.in_flight.items():
            task.cancel()
            self._mark([batch], "cancelled", sent=launch in self.sent)

    async def _settle(self) -> None:
        """Wait for the job's own tasks and worker threads; a cancellation of the run that arrives
        meanwhile is delivered once they are done, never lost."""
        if self.stop is not None:
            self.stop.cancel()
        for task, (launch, batch, _) in self.in_flight.items():
            task.cancel()
            for ask in batch.asks:
                self.outcomes.setdefault(ask.id, QuestionOutcome(ask.id, "cancelled", sent=launch in self.sent))
        pending = [w for w in (*self.in_flight, *self.threads, *([self.stop] if self.stop else [])) if not w.done()]
        interrupted = False
        while pending:
            try:
                await asyncio.shield(asyncio.gather(*pending, return_exceptions=True))
            except asyncio.CancelledError:
                interrupted = True
            pending = [w for w in pending if not w.done()]
        if interrupted:
            raise asyncio.CancelledError


__all__ = ["Runner"]
