"""Properties of typed decisions: answers always validate, follow the question's option order
whatever the option map says, digests see every edit, and question state round-trips."""

from __future__ import annotations

import json
import math
import os
from typing import Any

import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from nnx_api.decisions import (
    PROBABILITY_TOLERANCE,
    Boolean,
    Choice,
    FixedHeadProvider,
    InvalidDecisionResponse,
    Option,
    Score,
    question_from_state,
    validate_response,
)
from nnx_api.model import Head, PredictionResult  # the real NNModel types the fakes return

EXAMPLES = 500 if os.environ.get("NNX_DEEP") == "1" else 50
SETTINGS = settings(max_examples=EXAMPLES, deadline=None)


class IdentityModel:
    """The NNModel contract over a Linear layer set to the identity: the inputs are the logits."""

    def __init__(self, width: int, labels: tuple[str, ...] | None, kind: str = "categorical") -> None:
        self.net = torch.nn.Linear(width, width, bias=False)
        with torch.no_grad():
            self.net.weight.copy_(torch.eye(width))
        self.head = Head(kind, width, labels)

    def predict_proba(self, X: torch.Tensor, spec: Any = None) -> PredictionResult:
        training = self.net.training
        self.net.eval()
        try:
            with torch.no_grad():
                logits = self.net(X)
        finally:
            self.net.train(training)
        return PredictionResult(logits, None, logits.argmax(-1), list(range(len(X))))


texts = st.text(min_size=1, max_size=12).filter(lambda s: s.strip())
logit_values = st.floats(-(2.0**100), 2.0**100, width=32)


@st.composite
def option_lists(draw: Any, min_size: int = 2, max_size: int = 6) -> list[Option]:
    ids = draw(st.lists(texts, min_size=min_size, max_size=max_size, unique=True))
    return [Option(option_id, draw(texts)) for option_id in ids]


@st.composite
def questions(draw: Any) -> Any:
    kind = draw(st.sampled_from(["choice", "score", "boolean"]))
    prompt = draw(texts)
    if kind == "boolean":
        return Boolean(prompt)
    return (Choice if kind == "choice" else Score)(prompt, draw(option_lists()))


@st.composite
def mapped_requests(draw: Any) -> tuple[FixedHeadProvider, Choice, torch.Tensor, dict[str, str]]:
    """A categorical head, a question whose option ids map onto its labels through a random
    option_map, in a random order, and a batch of logits."""
    width = draw(st.integers(2, 6))
    labels = tuple(f"class-{i}" for i in range(width))
    ids = draw(st.lists(texts, min_size=width, max_size=width, unique=True))
    option_map = dict(zip(ids, draw(st.permutations(labels)), strict=True))
    asked = draw(st.permutations(ids))
    question = Choice(draw(texts), [(option_id, f"about {option_id}") for option_id in asked])
    rows = draw(st.integers(1, 5))
    logits = torch.tensor(draw(st.lists(st.lists(logit_values, min_size=width, max_size=width),
                                        min_size=rows, max_size=rows)), dtype=torch.float32)
    max_batch = draw(st.none() | st.integers(rows, 6))  # a larger batch is refused (tested apart)
    provider = FixedHeadProvider(IdentityModel(width, labels), option_map=option_map, max_batch=max_batch)
    return provider, question, logits, option_map


@SETTINGS
@given(mapped_requests())
def test_choice_answers_always_validate_and_follow_the_question_order(request: Any) -> None:
    provider, question, logits, option_map = request
    results = provider.decide(question, logits)
    assert len(results) == len(logits)
    expected = torch.softmax(logits.double(), dim=-1)
    for row, result in enumerate(results):
        assert validate_response(question, result) == result
        assert result.option_ids == question.option_ids
        assert abs(math.fsum(p for _, p in result.distribution) - 1.0) <= PROBABILITY_TOLERANCE
        for option_id, p in result.distribution:
            column = provider.labels.index(option_map[option_id])
            assert math.isclose(p, float(expected[row, column]), rel_tol=1e-9, abs_tol=1e-12)


@SETTINGS
@given(texts, st.lists(logit_values, min_size=1, max_size=8))
def test_boolean_answers_always_validate(prompt: str, values: list[float]) -> None:
    question = Boolean(prompt)
    provider = FixedHeadProvider(IdentityModel(1, None, kind="bernoulli"), question=question)
    results = provider.decide(question, torch.tensor(values, dtype=torch.float32).unsqueeze(-1))
    for value, result in zip(values, results, strict=True):
        assert validate_response(question, result) == result
        assert math.isclose(result.p_true, 1.0 / (1.0 + math.exp(-max(min(value, 700.0), -700.0))),
                            rel_tol=1e-9, abs_tol=1e-12)


@SETTINGS
@given(st.data())
def test_digest_changes_when_an_option_is_reworded_or_reordered(data: Any) -> None:
    kind = data.draw(st.sampled_from([Choice, Score]))
    prompt = data.draw(texts)
    options = data.draw(option_lists())
    question = kind(prompt, options)
    assert kind(prompt, list(options)).digest() == question.digest()

    index = data.draw(st.integers(0, len(options) - 1))
    new_text = data.draw(texts.filter(lambda t: t != options[index].description))
    reworded = list(options)
    reworded[index] = Option(options[index].id, new_text)
    assert kind(prompt, reworded).digest() != question.digest()

    order = data.draw(st.permutations(range(len(options))))
    assume(list(order) != list(range(len(options))))
    assert kind(prompt, [options[i] for i in order]).digest() != question.digest()


@SETTINGS
@given(questions())
def test_state_round_trips(question: Any) -> None:
    state = json.loads(json.dumps(question.state()))
    rebuilt = question_from_state(state)
    assert rebuilt == question and type(rebuilt) is type(question)
    assert rebuilt.digest() == question.digest()
    assert rebuilt.model_view() == question.model_view()


@SETTINGS
@given(option_lists(), st.floats(2 * PROBABILITY_TOLERANCE, 0.5), st.booleans())
def test_distributions_off_by_more_than_the_tolerance_are_refused(options: list[Option], error: float,
                                                                  high: bool) -> None:
    question = Choice("Which?", options)
    share = (1.0 + error if high else 1.0 - error) / len(options)
    assume(0.0 <= share <= 1.0)
    try:
        validate_response(question, {option.id: share for option in options})
    except InvalidDecisionResponse:
        return
    raise AssertionError("a distribution that does not sum to 1 was accepted")
