"""NNx's deferred decision jobs (REFERENCE §10.4–10.5), written from its documentation:
``DecisionJob.ask / collect / map / then`` build immutable trees and call nothing; only ``run`` /
``arun`` have effects; independent questions over one state take ``ceil(count / cap)`` calls (cap:
the provider's ``max_questions``, 1 for a decide-only provider, lowered by
``Limits.max_questions``); duplicate ids, unsupported questions and an unenforceable
``max_tokens`` are refused before any call (``InvalidJob``); fail-fast ``JobFailed(outcomes,
completed, failed, skipped)`` never retries; ``JobLimitExceeded``, ``JobTimeout``; ``JobResult(value,
outcomes, calls, status)``; ``arun(cancel=asyncio.Event)``."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

import nnx_api as nnx
from nnx_api import decisions as d
from nnx_api.decide import runner
from nnx_api.decisions import Boolean, Choice, DecisionJob, Follow, Limits

STATE = ["row one", "row two", "row three"]


def question(name, ids=("a", "b")):
    return Choice(f"{name}?", [(i, f"option {i}") for i in ids])


class Provider:
    """Answers every question with a uniform distribution; records each call's questions."""

    def __init__(self, *, fail_on=None, wrong_rows=False):
        self.calls = []
        self.fail_on, self.wrong_rows = fail_on, wrong_rows

    def _one(self, q, inputs):
        if q.prompt == self.fail_on:
            raise d.ProviderFailure(f"cannot answer {q.prompt}")
        n = len(inputs) - (1 if self.wrong_rows else 0)
        if isinstance(q, Boolean):
            return [d.validate_response(q, 0.5, provider="test") for _ in range(n)]
        ids = q.option_ids
        return [d.validate_response(q, {i: 1 / len(ids) for i in ids}, provider="test") for _ in range(n)]

    def decide(self, q, inputs):
        self.calls.append([q.prompt])
        return self._one(q, inputs)


class BatchingProvider(Provider):
    def __init__(self, max_questions=None, **kw):
        super().__init__(**kw)
        self.max_questions = max_questions

    def decide_many(self, questions, inputs):
        self.calls.append([q.prompt for q in questions])
        return [self._one(q, inputs) for q in questions]


def three():
    return DecisionJob.collect({k: DecisionJob.ask(question(k), id=k) for k in ("x", "y", "z")})


def test_building_a_job_calls_nothing_and_run_answers_every_row():
    provider = Provider()
    job = three().map(lambda answers: {k: v[0].top for k, v in answers.items()})
    assert provider.calls == [] and job.question_ids() == ("x", "y", "z")
    result = job.run(provider, state=STATE)
    assert result.status == "completed" and result.calls == 3
    assert provider.calls == [["x?"], ["y?"], ["z?"]]  # a decide-only provider: one question per call
    assert list(result.value) == ["x", "y", "z"] and set(result.value.values()) <= {"a", "b"}
    assert list(result.outcomes) == ["x", "y", "z"]
    outcome = result.outcomes["y"]
    assert outcome.kind == "answered" and outcome.sent and len(outcome.rows) == len(STATE)
    assert all(row.kind == "answered" and isinstance(row.result, d.ChoiceResult) for row in outcome.rows)


@pytest.mark.parametrize("own_cap, limit, calls", [(None, None, 1), (2, None, 2), (None, 2, 2), (5, 1, 3)])
def test_independent_questions_take_ceil_count_over_cap_calls(own_cap, limit, calls):
    provider = BatchingProvider(max_questions=own_cap)
    result = three().run(provider, state=STATE, limits=Limits(max_questions=limit))
    assert result.calls == len(provider.calls) == calls
    assert [p for call in provider.calls for p in call] == ["x?", "y?", "z?"]  # stable order


def test_then_runs_a_dependent_job_over_the_state_it_maps_to():
    provider = Provider()
    seen = []

    def follow(answers):
        seen.append(answers)
        return Follow(DecisionJob.ask(Boolean("urgent?"), id="urgent"), state=STATE[:1])

    result = DecisionJob.ask(question("topic"), id="topic").then(follow).run(provider, state=STATE)
    assert len(seen) == 1 and len(seen[0]) == 3  # the prerequisite's value: one result per row
    assert len(result.value) == 1 and isinstance(result.value[0], d.BooleanResult)
    assert list(result.outcomes) == ["topic", "urgent"] and result.calls == 2
    with pytest.raises(d.JobLimitExceeded) as caught:
        DecisionJob.ask(question("topic"), id="topic").then(follow).run(Provider(), state=STATE, limits=Limits(max_depth=0))
    assert list(caught.value.completed) == ["topic"]
    with pytest.raises(d.InvalidJob, match="Follow"):
        DecisionJob.ask(question("topic"), id="topic").then(lambda v: v).run(Provider(), state=STATE)


def test_refusals_come_before_any_call():
    provider = Provider()
    duplicate = DecisionJob.collect({"a": DecisionJob.ask(question("p"), id="same"),
                                     "b": DecisionJob.ask(question("q"), id="same")})
    with pytest.raises(d.InvalidJob, match="same") as caught:
        duplicate.run(provider, state=STATE)
    assert isinstance(caught.value, ValueError) and caught.value.outcomes == {}
    with pytest.raises(d.InvalidJob, match="count_tokens"):
        three().run(provider, state=STATE, limits=Limits(max_tokens=100))

    class Picky(Provider):
        def check(self, q, inputs):
            if q.prompt == "z?":
                raise d.UnsupportedCapability("no z here")

    picky = Picky()
    with pytest.raises(d.InvalidJob, match="no z here"):
        three().run(picky, state=STATE)
    assert provider.calls == [] and picky.calls == []
    with pytest.raises(d.InvalidJob):
        Limits(max_questions=0)
    with pytest.raises(d.InvalidJob):
        DecisionJob.ask("not a question", id="x")


def test_a_failed_call_fails_fast_with_the_outcomes_so_far_and_is_never_retried():
    provider = Provider(fail_on="y?")
    with pytest.raises(d.JobFailed) as caught:
        three().run(provider, state=STATE)
    error = caught.value
    assert provider.calls == [["x?"], ["y?"]]  # z never sent, y not retried
    assert list(error.completed) == ["x"] and error.failed == ("y",) and error.skipped == ("z",)
    assert error.outcomes["y"].kind == "failed" and error.outcomes["y"].sent
    assert error.outcomes["z"].kind == "skipped" and not error.outcomes["z"].sent
    assert isinstance(error.__cause__, d.ProviderFailure)


def test_answers_are_checked():
    with pytest.raises(d.JobFailed) as caught:
        three().run(Provider(wrong_rows=True), state=STATE)
    assert isinstance(caught.value.__cause__, d.InvalidDecisionResponse)


def test_request_limit_and_timeout(monkeypatch):
    provider = Provider()
    with pytest.raises(d.JobLimitExceeded) as caught:
        three().run(provider, state=STATE, limits=Limits(max_requests=2))
    assert list(caught.value.completed) == ["x", "y"] and caught.value.outcomes["z"].kind == "skipped"
    assert len(provider.calls) == 2
    now = [0.0]
    monkeypatch.setattr(runner, "_clock", lambda: now[0])

    class Slow(Provider):  # every call takes one second of the run's clock
        def decide(self, q, inputs):
            now[0] += 1.0
            return super().decide(q, inputs)

    with pytest.raises(d.JobTimeout) as timed_out:
        three().run(Slow(), state=STATE, limits=Limits(timeout=1.5))
    assert isinstance(timed_out.value, TimeoutError) and list(timed_out.value.completed) == ["x", "y"]
    assert timed_out.value.outcomes["z"].kind == "skipped"


def test_arun_gives_the_same_answers_and_cancel_stops_scheduling():
    provider = BatchingProvider(max_questions=1)
    result = asyncio.run(three().arun(provider, state=STATE, limits=Limits(max_concurrency=3)))
    assert result.status == "completed" and result.calls == 3 and list(result.value) == ["x", "y", "z"]

    async def cancelled():
        cancel = asyncio.Event()
        cancel.set()
        return await three().arun(Provider(), state=STATE, cancel=cancel)

    stopped = asyncio.run(cancelled())
    assert stopped.status == "cancelled" and stopped.value is None and stopped.calls == 0
    assert {o.kind for o in stopped.outcomes.values()} == {"cancelled"}


def test_abstention_policies_are_out_of_scope():
    with pytest.raises(nnx.OutOfScopeError, match="abstention"):
        DecisionJob.ask(question("p"), id="p", policy=object(), model_id="m")


def test_the_docs_example_runs(capsys):
    text = (Path(__file__).parents[2] / "docs" / "decisions.md").read_text()
    block = text.split("## Decision jobs", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    exec(block, {})  # noqa: S102 - the page's own example
    assert capsys.readouterr().out.strip() == "2 ['topic', 'urgent']"


# --- rounds, hooks, tokens and async cancellation (the behaviour of the NNx 0.4.1 wheel) --------------


class Counting(BatchingProvider):
    """Counts ten tokens a question; ``broken_after`` token counts, the next one raises."""

    def __init__(self, broken_after=None, **kw):
        super().__init__(**kw)
        self.counts, self.broken_after = 0, broken_after

    def count_tokens(self, questions, inputs):
        self.counts += 1
        if self.broken_after is not None and self.counts > self.broken_after:
            raise ConnectionError("token service down")
        return 10 * len(questions)


def test_continuations_over_one_state_object_share_a_call():
    shared = ["a", "b"]
    provider = BatchingProvider()
    job = DecisionJob.collect({
        k: DecisionJob.ask(question(k), id=k).then(
            lambda _, k=k: Follow(DecisionJob.ask(question(k + "2"), id=k + "2"), state=shared))
        for k in ("x", "y")})
    result = job.run(provider, state=STATE)
    assert provider.calls == [["x?", "y?"], ["x2?", "y2?"]] and result.calls == 2
    assert [len(result.value[k]) for k in ("x", "y")] == [2, 2]  # the follow-ups answered the two shared rows
    copy = ["a", "b"]  # an equal state that is another object: its own call
    job = DecisionJob.collect({
        "x": DecisionJob.ask(question("x"), id="x").then(lambda _: Follow(DecisionJob.ask(question("p"), id="p"), shared)),
        "y": DecisionJob.ask(question("y"), id="y").then(lambda _: Follow(DecisionJob.ask(question("q"), id="q"), copy))})
    assert job.run(BatchingProvider(), state=STATE).calls == 3


def test_a_token_cap_packs_questions_greedily_and_a_broken_count_fails_the_job():
    provider = Counting()
    result = three().run(provider, state=STATE, limits=Limits(max_tokens=25))  # 10 a question: 2 + 1
    assert provider.calls == [["x?", "y?"], ["z?"]] and result.calls == 2
    with pytest.raises(d.InvalidJob, match="alone exceeds max_tokens=5") as refused:
        three().run(Counting(), state=STATE, limits=Limits(max_tokens=5))
    assert refused.value.outcomes == {}  # before any call
    job = DecisionJob.collect({
        "x": DecisionJob.ask(question("x"), id="x").then(lambda _: Follow(DecisionJob.ask(question("w"), id="w"), STATE)),
        "y": DecisionJob.ask(question("y"), id="y")})
    for run in (lambda p: job.run(p, state=STATE, limits=Limits(max_tokens=50)),
                lambda p: asyncio.run(job.arun(p, state=STATE, limits=Limits(max_tokens=50)))):
        provider = Counting(broken_after=2)  # round one counts [x] and [x, y]; round two's count raises
        with pytest.raises(d.JobFailed) as caught:
            run(provider)
        error = caught.value
        assert isinstance(error.__cause__, ConnectionError) and list(error.completed) == ["x", "y"]
        assert error.skipped == ("w",) and error.outcomes["w"].kind == "skipped" and provider.calls == [["x?", "y?"]]

    class Nonsense(BatchingProvider):
        def count_tokens(self, questions, inputs):
            return "3"

    with pytest.raises(d.JobFailed, match="count_tokens") as caught:
        three().run(Nonsense(), state=STATE, limits=Limits(max_tokens=5))
    assert isinstance(caught.value.__cause__, d.InvalidDecisionResponse)


def test_a_question_refused_after_a_call_reports_every_unsent_question():
    class Picky(Provider):
        def check(self, q, inputs):
            if q.prompt == "w?":
                raise d.UnsupportedCapability("no w here")

    follow = DecisionJob.collect({"v": DecisionJob.ask(question("v"), id="v"), "w": DecisionJob.ask(question("w"), id="w")})
    job = DecisionJob.ask(question("x"), id="x").then(lambda _: Follow(follow, STATE))
    with pytest.raises(d.InvalidJob, match="no w here") as caught:
        job.run(Picky(), state=STATE)
    assert {k: o.kind for k, o in caught.value.outcomes.items()} == {"x": "answered", "v": "skipped", "w": "skipped"}

    class Broken(Provider):
        def check(self, q, inputs):
            raise RuntimeError("capability service down")

    with pytest.raises(d.JobFailed, match="pre-call check failed") as broken:
        three().run(Broken(), state=STATE)
    assert broken.value.outcomes == {} and isinstance(broken.value.__cause__, RuntimeError)


def test_a_job_of_questions_is_plain_data_and_immutable():
    import pickle

    job = three()
    assert pickle.loads(pickle.dumps(job)).state() == job.state() == {
        "collect": [[k, {"ask": k, "question": question(k).state()}] for k in ("x", "y", "z")]}
    with pytest.raises(TypeError, match="cannot be serialised"):
        pickle.dumps(job.map(len))
    with pytest.raises(AttributeError, match="immutable"):
        job._node = None


class Sleepy(BatchingProvider):
    """An asynchronous provider whose calls take ``seconds``."""

    def __init__(self, seconds, **kw):
        super().__init__(**kw)
        self.seconds, self.began = seconds, 0

    async def adecide_many(self, questions, inputs):
        self.began += 1
        await asyncio.sleep(self.seconds)
        return self.decide_many(questions, inputs)


def test_arun_cancels_calls_in_flight_on_cancel_and_on_the_timeout():
    async def cancelled():
        cancel = asyncio.Event()
        task = asyncio.ensure_future(three().arun(Sleepy(30.0, max_questions=1), state=STATE, cancel=cancel))
        await asyncio.sleep(0.05)
        cancel.set()
        return await asyncio.wait_for(task, timeout=10)  # not the 30 s the call would take

    result = asyncio.run(cancelled())
    assert result.status == "cancelled" and result.value is None and result.calls == 1
    assert [(o.kind, o.sent) for o in result.outcomes.values()] == [("cancelled", True), ("cancelled", False),
                                                                   ("cancelled", False)]
    began = time.monotonic()
    with pytest.raises(d.JobTimeout, match="not rolled back") as caught:
        asyncio.run(three().arun(Sleepy(30.0), state=STATE, limits=Limits(timeout=0.1)))
    assert time.monotonic() - began < 10 and caught.value.outcomes["x"].kind == "cancelled"
    with pytest.raises(d.InvalidJob, match="asyncio.Event"):
        asyncio.run(three().arun(Provider(), state=STATE, cancel=threading.Event()))


def test_a_limit_in_arun_lets_calls_in_flight_finish():
    provider = Sleepy(0.02, max_questions=1)
    with pytest.raises(d.JobLimitExceeded, match="max_requests=2") as caught:
        asyncio.run(three().arun(provider, state=STATE, limits=Limits(max_requests=2, max_concurrency=2)))
    assert {k: (o.kind, o.sent) for k, o in caught.value.outcomes.items()} == {
        "x": ("answered", True), "y": ("answered", True), "z": ("skipped", False)}


def test_cancelling_the_task_waits_for_a_synchronous_call_in_its_thread():
    class Slow(Provider):
        finished = 0

        def decide(self, q, inputs):
            time.sleep(0.3)
            Slow.finished += 1
            return super().decide(q, inputs)

    async def scenario():
        task = asyncio.ensure_future(DecisionJob.ask(question("x"), id="x").arun(Slow(), state=STATE))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return Slow.finished

    assert asyncio.run(scenario()) == 1  # the borrowed provider is no longer in use when the task ends
