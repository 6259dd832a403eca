"""The typed-decision core without torch: questions and their digest, the one validation rule for
answers, deferred results, and what ``Capabilities.check`` refuses. Oracles: docs/decisions.md
(Concept) and the modules' stated rules; the digest is recomputed here from its definition
(SHA-256 of the canonical JSON of kind, prompt and every option id and text, in order)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import pickle
from typing import Any

import attrs
import pytest

from nnx_core.decision_capabilities import Capabilities, DecisionProvider
from nnx_core.decision_questions import (
    PRIMITIVES,
    Boolean,
    Choice,
    DecisionError,
    InvalidDecisionRequest,
    InvalidDecisionResponse,
    Option,
    ProviderFailure,
    Score,
    UnsupportedCapability,
    check_question,
    question_from_state,
)
from nnx_core.decisions import (
    PROBABILITY_TOLERANCE,
    RESULT_TYPES,
    BooleanResult,
    ChoiceResult,
    ScoreResult,
    _Deferred,
    deferred_results,
    validate_response,
)
from nnx_core.errors import NNxError

DIGEST = "ab" * 32


def animals() -> Choice:
    return Choice("Which animal?", [("cat", "a cat"), ("dog", "a dog"), ("eel", "an eel")])


def sizes() -> Score:
    return Score("How big?", [("s", "small"), ("m", "medium"), ("l", "large")])


def canonical_digest(kind: str, prompt: str, options: list[tuple[str, str]]) -> str:
    text = json.dumps({"kind": kind, "prompt": prompt, "options": [list(o) for o in options]},
                      sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


# ------------------------------------------------------------------------------------ questions


def test_errors_form_one_family_with_the_builtin_bases() -> None:
    assert issubclass(DecisionError, NNxError)
    assert issubclass(InvalidDecisionRequest, DecisionError) and issubclass(InvalidDecisionRequest, ValueError)
    assert issubclass(InvalidDecisionResponse, DecisionError) and issubclass(InvalidDecisionResponse, ValueError)
    assert issubclass(UnsupportedCapability, DecisionError)
    assert issubclass(ProviderFailure, DecisionError) and issubclass(ProviderFailure, RuntimeError)
    assert PRIMITIVES == ("choice", "boolean", "score")


def test_digest_is_sha256_of_the_canonical_json() -> None:
    assert animals().digest() == canonical_digest(
        "choice", "Which animal?", [("cat", "a cat"), ("dog", "a dog"), ("eel", "an eel")])
    assert sizes().digest() == canonical_digest("score", "How big?", [("s", "small"), ("m", "medium"), ("l", "large")])
    assert Boolean("Is it?").digest() == canonical_digest("boolean", "Is it?", [])
    # non-ASCII text is escaped into the canonical (ASCII) JSON
    assert Boolean("Größe?").digest() == canonical_digest("boolean", "Größe?", [])


def test_digest_covers_kind_prompt_ids_texts_and_order() -> None:
    pairs = [("a", "x"), ("b", "y")]
    digests = {
        Choice("q", pairs).digest(), Score("q", pairs).digest(), Choice("q2", pairs).digest(),
        Choice("q", [("a2", "x"), ("b", "y")]).digest(), Choice("q", [("a", "x2"), ("b", "y")]).digest(),
        Choice("q", pairs[::-1]).digest(),
    }
    assert len(digests) == 6


def test_questions_accept_options_or_pairs_and_keep_order() -> None:
    q = Choice("p", [Option("b", "B"), ["a", "A"], ("c", "C")])
    assert q.options == (Option("b", "B"), Option("a", "A"), Option("c", "C"))
    assert q.option_ids == ("b", "a", "c")
    assert sizes().options == sizes().levels and sizes().option_ids == ("s", "m", "l")
    assert Boolean("p").options == () and Boolean("p").option_ids == ()
    assert q.kind == "choice" and sizes().kind == "score" and Boolean("p").kind == "boolean"


def test_model_view_shows_prompt_and_texts_never_ids() -> None:
    assert animals().model_view() == {"prompt": "Which animal?", "options": ["a cat", "a dog", "an eel"]}
    assert sizes().model_view()["levels"] == [o.description for o in sizes().levels]
    assert Boolean("Is it?").model_view() == {"prompt": "Is it?"}


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ("ab", "sequence of options"), (b"ab", "sequence of options"), ({"a": "x", "b": "y"}, "sequence of options"),
        (5, "sequence of options"), ([("a", "x")], "at least 2 options, got 1"), ([], "at least 2 options, got 0"),
        ([("a", "x"), ("a", "y"), ("b", "z"), ("b", "w")], "duplicated: ['a', 'b']"),
        ([("a", "x"), ("b",)], "(id, description) pairs, got"), ([("a", "x"), ("b", "y", "z")], "pairs, got"),
        ([("a", "x"), "by"], "(id, description) pairs, got 'by'"),
        ([("", "x"), ("b", "y")], "option id must be a non-empty string"),
        ([(" ", "x"), ("b", "y")], "option id must be a non-empty string"),
        ([("a", 3), ("b", "y")], "option description must be a non-empty string, got 3"),
    ],
)
def test_malformed_options_are_refused(options: Any, words: str) -> None:
    with pytest.raises(InvalidDecisionRequest) as caught:
        Choice("p", options)
    assert words in str(caught.value)


@pytest.mark.parametrize("prompt", ["", "   ", None, 3])
def test_prompt_must_be_text(prompt: Any) -> None:
    for build in (lambda: Choice(prompt, [("a", "x"), ("b", "y")]), lambda: Boolean(prompt),
                  lambda: Score(prompt, [("a", "x"), ("b", "y")])):
        with pytest.raises(InvalidDecisionRequest, match="prompt must be a non-empty string"):
            build()


def test_state_is_plain_data_and_round_trips() -> None:
    assert animals().state() == {"kind": "choice", "prompt": "Which animal?", "options": [
        {"id": "cat", "description": "a cat"}, {"id": "dog", "description": "a dog"},
        {"id": "eel", "description": "an eel"}]}
    assert sizes().state()["levels"][0] == {"id": "s", "description": "small"}
    assert set(sizes().state()) == {"kind", "prompt", "levels"}
    assert Boolean("b?").state() == {"kind": "boolean", "prompt": "b?"}
    for q in (animals(), sizes(), Boolean("b?")):
        back = question_from_state(json.loads(json.dumps(q.state())))
        assert back == q and type(back) is type(q) and back.digest() == q.digest()
    # a list in state, or a tuple, both read
    assert question_from_state({"kind": "choice", "prompt": "p", "options": (
        {"id": "a", "description": "x"}, {"id": "b", "description": "y"})}) == Choice("p", [("a", "x"), ("b", "y")])


@pytest.mark.parametrize(
    ("state", "words"),
    [
        ([("kind", "boolean")], "must be a mapping"),
        ({"kind": "poll", "prompt": "p"}, "unknown decision kind 'poll'"),
        ({"prompt": "p"}, "unknown decision kind None"),
        ({"kind": ["choice"], "prompt": "p"}, "unknown decision kind"),
        ({"kind": "boolean", "prompt": "p", "options": []}, "exactly the keys ['kind', 'prompt']"),
        ({"kind": "choice", "prompt": "p"}, "exactly the keys ['kind', 'options', 'prompt']"),
        ({"kind": "choice", "prompt": "p"}, "missing ['options']"),
        ({"kind": "score", "prompt": "p", "options": []}, "exactly the keys ['kind', 'levels', 'prompt']"),
        ({"kind": "choice", "prompt": "p", "options": "ab"}, "must be a list"),
        ({"kind": "choice", "prompt": "p", "options": [{"id": "a"}, {"id": "b", "description": "y"}]},
         "exactly id and description"),
        ({"kind": "choice", "prompt": "p", "options": ["ab", "cd"]}, "pairs"),
        ({"kind": "score", "prompt": "p", "levels": [{"id": "a", "description": "x", "x": 1},
                                                     {"id": "b", "description": "y"}]}, "exactly id and description"),
    ],
)
def test_malformed_state_is_refused(state: Any, words: str) -> None:
    with pytest.raises(InvalidDecisionRequest) as caught:
        question_from_state(state)
    assert words in str(caught.value)


def test_check_question() -> None:
    for q in (animals(), sizes(), Boolean("b")):
        assert check_question(q) is q
    with pytest.raises(InvalidDecisionRequest, match="expected a Choice, Boolean or Score"):
        check_question("Which animal?")


# -------------------------------------------------------------------------------------- results


def test_validate_response_puts_answers_in_question_order() -> None:
    q = animals()
    for response in ({"eel": 0.2, "cat": 0.5, "dog": 0.3}, [("dog", 0.3), ["eel", 0.2], ("cat", 0.5)],
                     iter([("dog", 0.3), ("eel", 0.2), ("cat", 0.5)])):
        r = validate_response(q, response, provider="me", raw="logits")
        assert type(r) is ChoiceResult and r.kind == "choice"
        assert r.distribution == (("cat", 0.5), ("dog", 0.3), ("eel", 0.2))
        assert r.question_digest == q.digest() and r.provider == "me" and r.raw == "logits"
        assert r.option_ids == ("cat", "dog", "eel")
        assert r.top == "cat"
        assert r.probability("dog") == 0.3 and r.probabilities() == {"cat": 0.5, "dog": 0.3, "eel": 0.2}
        assert list(r.probabilities()) == ["cat", "dog", "eel"]
    with pytest.raises(KeyError) as caught:
        r.probability("cow")
    assert caught.value.args == ("cow",)
    assert validate_response(q, {"cat": 0.5, "dog": 0.3, "eel": 0.2}).provider is None


def test_top_is_the_highest_and_the_first_on_a_tie() -> None:
    q = animals()
    assert validate_response(q, {"cat": 0.2, "dog": 0.5, "eel": 0.3}).top == "dog"
    assert validate_response(q, {"cat": 0.1, "dog": 0.1, "eel": 0.8}).top == "eel"
    assert validate_response(q, {"cat": 0.2, "dog": 0.4, "eel": 0.4}).top == "dog"
    assert validate_response(q, {"cat": 0.4, "dog": 0.4, "eel": 0.2}).top == "cat"


@pytest.mark.parametrize(
    ("response", "words"),
    [
        ({"cat": 0.5, "dog": 0.5}, "missing ids ['eel']"),
        ({"cat": 0.5, "dog": 0.3, "eel": 0.1, "cow": 0.1}, "unknown id 'cow'"),
        ([("cat", 0.5), ("cat", 0.3), ("eel", 0.2)], "duplicate id 'cat'"),
        ({"": 0.5, "dog": 0.3, "eel": 0.2}, "unlabeled entry"),
        ({1: 0.5, "dog": 0.3, "eel": 0.2}, "unlabeled entry"),
        ({"cat": 0.6, "dog": 0.3, "eel": 0.2}, "answers are never renormalized"),
        ({"cat": 1.5, "dog": -0.3, "eel": -0.2}, "in [0, 1]"),
        ({"cat": math.nan, "dog": 0.5, "eel": 0.5}, "finite"),
        ({"cat": math.inf, "dog": 0.5, "eel": 0.5}, "finite"),
        ({"cat": True, "dog": False, "eel": 0}, "real number"),
        ({"cat": "0.5", "dog": 0.3, "eel": 0.2}, "real number"),
        ({"cat": 10**400, "dog": 0.3, "eel": 0.2}, "not representable as a float"),
        ("cat", "expected a mapping or a sequence of (id, p) pairs"),
        (b"cat", "expected a mapping or a sequence of (id, p) pairs"),
        (0.5, "expected a mapping or a sequence of (id, p) pairs"),
        ([("cat", 0.5, 1), ("dog", 0.3), ("eel", 0.2)], "response entries are (id, p) pairs"),
        (["ca", "do", "ee"], "response entries are (id, p) pairs"),
    ],
)
def test_invalid_choice_responses_are_refused(response: Any, words: str) -> None:
    with pytest.raises(InvalidDecisionResponse) as caught:
        validate_response(animals(), response)
    assert words in str(caught.value)


def test_the_tolerance_is_applied_never_renormalised() -> None:
    q = Choice("p", [("a", "x"), ("b", "y")])
    assert PROBABILITY_TOLERANCE == 1e-6
    inside = validate_response(q, {"a": 0.5 + 0.9e-6, "b": 0.5})
    assert inside.distribution == (("a", 0.5 + 0.9e-6), ("b", 0.5))  # kept as given
    assert validate_response(q, {"a": 0.5 - 0.9e-6, "b": 0.5}).probability("a") == 0.5 - 0.9e-6
    for off in (1.1e-6, -1.1e-6):
        with pytest.raises(InvalidDecisionResponse, match="not 1 within 1e-06"):
            validate_response(q, {"a": 0.5 + off, "b": 0.5})
    # exactly the bounds of [0, 1] are probabilities
    assert validate_response(q, {"a": 1.0, "b": 0.0}).top == "a"
    assert validate_response(q, {"a": 1, "b": 0}).distribution == (("a", 1.0), ("b", 0.0))


def test_boolean_responses() -> None:
    q = Boolean("Is it?")
    r = validate_response(q, 0.25, provider="p")
    assert type(r) is BooleanResult and r.kind == "boolean"
    assert r.p_true == 0.25 and r.p_false == 0.75 and r.question_digest == q.digest() and r.provider == "p"
    assert validate_response(q, {"true": 0.75, "false": 0.25}).p_true == 0.75
    assert validate_response(q, {"false": 1.0, "true": 0.0}).p_true == 0.0
    assert validate_response(q, 1).p_true == 1.0 and type(validate_response(q, 1).p_true) is float
    assert validate_response(q, {"true": 0.3 + 0.9e-6, "false": 0.7}).p_true == 0.3 + 0.9e-6


@pytest.mark.parametrize(
    ("response", "words"),
    [
        ({"true": 0.5}, "exactly the keys 'true' and 'false'"),
        ({"true": 0.5, "false": 0.5, "maybe": 0.0}, "exactly the keys 'true' and 'false'"),
        ({"true": 0.6, "false": 0.5}, "p('true') + p('false') = "),
        ({"true": 0.3 + 1.1e-6, "false": 0.7}, "not 1 within 1e-06"),
        ({"true": 1.5, "false": -0.5}, "p('true') must be finite and in [0, 1]"),
        ({"true": 0.5, "false": "0.5"}, "p('false') must be a real number"),
        (1.5, "p_true must be finite and in [0, 1], got 1.5"),
        (-0.1, "p_true must be finite and in [0, 1]"),
        (math.nan, "p_true must be finite"),
        (True, "p_true must be a real number, got True"),
        ("0.5", "p_true must be a real number"),
        (10**400, "p_true is not representable as a float"),
    ],
)
def test_invalid_boolean_responses_are_refused(response: Any, words: str) -> None:
    with pytest.raises(InvalidDecisionResponse) as caught:
        validate_response(Boolean("Is it?"), response)
    assert words in str(caught.value)


def test_score_results_expected_index_and_vendor_score() -> None:
    q = sizes()
    r = validate_response(q, {"l": 0.5, "s": 0.25, "m": 0.25}, vendor_score=7)
    assert type(r) is ScoreResult and r.kind == "score"
    assert r.distribution == (("s", 0.25), ("m", 0.25), ("l", 0.5))
    assert r.expected_index == pytest.approx(0 * 0.25 + 1 * 0.25 + 2 * 0.5)
    assert r.vendor_score == 7.0 and type(r.vendor_score) is float
    assert validate_response(q, {"s": 1.0, "m": 0.0, "l": 0.0}).vendor_score is None
    assert validate_response(q, {"s": 1.0, "m": 0.0, "l": 0.0}).expected_index == 0.0
    assert validate_response(q, {"s": 0.0, "m": 0.0, "l": 1.0}, vendor_score=-2.5).vendor_score == -2.5


@pytest.mark.parametrize(
    ("vendor_score", "words"),
    [(math.inf, "finite number, got inf"), (math.nan, "finite number, got nan"), (True, "finite number, got True"),
     ("3", "finite number, got '3'"), (10**400, "too large for a float")],
)
def test_a_vendor_score_must_be_a_finite_number(vendor_score: Any, words: str) -> None:
    with pytest.raises(InvalidDecisionResponse) as caught:
        validate_response(sizes(), {"s": 1.0, "m": 0.0, "l": 0.0}, vendor_score=vendor_score)
    assert "vendor_score must be a finite number" in str(caught.value) and words in str(caught.value)


def test_a_vendor_score_too_large_for_a_float_is_refused_saying_so() -> None:
    with pytest.raises(InvalidDecisionResponse) as caught:
        validate_response(sizes(), {"s": 1.0, "m": 0.0, "l": 0.0}, vendor_score=10**400)
    assert str(caught.value) == "vendor_score must be a finite number, got one too large for a float"


def test_a_vendor_score_belongs_to_a_score() -> None:
    with pytest.raises(InvalidDecisionResponse, match="vendor_score belongs to a Score answer, not a choice one"):
        validate_response(animals(), {"cat": 1.0, "dog": 0.0, "eel": 0.0}, vendor_score=1.0)
    with pytest.raises(InvalidDecisionResponse, match="not a boolean one"):
        validate_response(Boolean("b"), 0.5, vendor_score=1.0)


def test_validate_response_refuses_what_is_not_a_question() -> None:
    with pytest.raises(InvalidDecisionRequest):
        validate_response("Which animal?", {"a": 1.0})


def test_a_result_is_accepted_for_its_own_question_only() -> None:
    q = animals()
    r = validate_response(q, {"cat": 0.5, "dog": 0.3, "eel": 0.2}, provider="first", raw=[1, 2])
    again = validate_response(q, r)
    assert again == r and again.provider == "first" and again.raw == [1, 2]
    relabelled = validate_response(q, r, provider="second", raw="mine")
    assert relabelled.provider == "second" and relabelled.raw == "mine"
    other = Choice("Which pet?", [("cat", "a cat"), ("dog", "a dog"), ("eel", "an eel")])
    with pytest.raises(InvalidDecisionResponse) as caught:
        validate_response(other, r)
    assert f"this ChoiceResult answers another question (digest {q.digest()[:12]}…, expected {other.digest()[:12]}…)" \
        == str(caught.value)
    levels = Score("Which animal?", [("cat", "a cat"), ("dog", "a dog"), ("eel", "an eel")])
    with pytest.raises(InvalidDecisionResponse, match="this ChoiceResult answers another question"):
        validate_response(levels, r)  # same ids, another kind
    b = validate_response(Boolean("b"), 0.4, provider="x", raw=3)
    assert validate_response(Boolean("b"), b) == b and validate_response(Boolean("b"), b).raw == 3
    s = validate_response(sizes(), {"s": 1.0, "m": 0.0, "l": 0.0}, vendor_score=4.0)
    assert validate_response(sizes(), s).vendor_score == 4.0
    assert validate_response(sizes(), s, vendor_score=5.0).vendor_score == 5.0
    with pytest.raises(InvalidDecisionResponse, match="this BooleanResult answers another question"):
        validate_response(Boolean("c"), b)


def test_results_validate_on_construction() -> None:
    pairs = (("a", 0.5), ("b", 0.5))
    assert ChoiceResult(DIGEST, pairs).distribution == pairs
    assert ChoiceResult(DIGEST, [["a", 0.5], ["b", 0.5]]).distribution == pairs
    for digest in ("AB" * 32, "ab" * 31, "ab" * 32 + "a", "g" * 64, 7, None):
        with pytest.raises(InvalidDecisionResponse, match="question_digest must be a SHA-256 hex digest"):
            ChoiceResult(digest, pairs)
    for bad, words in [
        ("ab", "a distribution is a sequence of (id, p) pairs"), ({"a": 0.5, "b": 0.5}, "a sequence of (id, p)"),
        (3, "a sequence of (id, p)"), ([("a", 1.0)], "at least 2 entries, got 1"),
        ([("a", 0.5), ("a", 0.5)], "a distribution repeats ids: ['a', 'a']"),
        ([("a", 0.5), ("b", 0.5, 0)], "a distribution entry is an (id, p) pair"), ([("a", 0.5), "b"], "(id, p) pair"),
        ([("", 0.5), ("b", 0.5)], "unlabeled entry"), ([(1, 0.5), ("b", 0.5)], "unlabeled entry"),
        ([("a", 0.5), ("b", 0.4)], "sum to"), ([("a", 2.0), ("b", -1.0)], "probability of 'a' must be finite"),
    ]:
        with pytest.raises(InvalidDecisionResponse) as caught:
            ChoiceResult(DIGEST, bad)
        assert words in str(caught.value), (bad, str(caught.value))
    for provider in ("", "  ", 3):
        with pytest.raises(InvalidDecisionResponse, match="provider names who answered"):
            ChoiceResult(DIGEST, pairs, provider=provider)
        with pytest.raises(InvalidDecisionResponse, match="provider names who answered"):
            BooleanResult(DIGEST, 0.5, provider=provider)
    with pytest.raises(InvalidDecisionResponse, match="question_digest"):
        BooleanResult("x", 0.5)
    assert BooleanResult(DIGEST, 0.5, provider="p").provider == "p"
    assert BooleanResult(DIGEST, 0.5).provider is None and ChoiceResult(DIGEST, pairs).raw is None


def test_raw_is_left_out_of_equality_but_the_fields_are_not() -> None:
    pairs = (("a", 0.5), ("b", 0.5))
    assert ChoiceResult(DIGEST, pairs, raw=1) == ChoiceResult(DIGEST, pairs, raw=2)
    assert hash(ChoiceResult(DIGEST, pairs, raw=1)) == hash(ChoiceResult(DIGEST, pairs, raw=2))
    assert ChoiceResult(DIGEST, pairs) != ChoiceResult(DIGEST, pairs, provider="p")
    assert ChoiceResult(DIGEST, pairs) != ChoiceResult("cd" * 32, pairs)
    assert BooleanResult(DIGEST, 0.5, raw="x") == BooleanResult(DIGEST, 0.5)
    assert "raw" not in repr(ChoiceResult(DIGEST, pairs, raw="secret-raw"))
    assert RESULT_TYPES == {"choice": ChoiceResult, "boolean": BooleanResult, "score": ScoreResult}


# ----------------------------------------------------------------------------- deferred results


class Rows:
    """Validated rows as a provider shares them; counts the reads."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows, self.reads = rows, 0

    def fields(self, index: int) -> dict[str, Any]:
        self.reads += 1
        return self.rows[index]


def test_results_take_dataclasses_replace_and_fields_as_nnx_dataclasses_do() -> None:
    # field names and order: NNx 0.4.1's wheel (dataclasses.fields of its ChoiceResult / BooleanResult / ScoreResult)
    assert [f.name for f in dataclasses.fields(ChoiceResult)] == ["question_digest", "distribution", "provider", "raw"]
    assert [f.name for f in dataclasses.fields(BooleanResult)] == ["question_digest", "p_true", "provider", "raw"]
    assert [f.name for f in dataclasses.fields(ScoreResult)] == [
        "question_digest", "distribution", "provider", "vendor_score", "raw"]
    choice = ChoiceResult(DIGEST, (("a", 0.25), ("b", 0.75)), provider="p")
    swapped = dataclasses.replace(choice, raw={"logits": [1, 2]})
    assert type(swapped) is ChoiceResult and swapped.raw == {"logits": [1, 2]} and swapped == choice  # raw not compared
    assert dataclasses.replace(BooleanResult(DIGEST, 0.5), p_true=1).p_true == 1.0
    with pytest.raises(InvalidDecisionResponse, match="sum to"):  # a replaced field is validated as a new answer
        dataclasses.replace(choice, distribution=(("a", 0.5), ("b", 0.75)))
    deferred = deferred_results(ChoiceResult, Rows([{"question_digest": DIGEST, "distribution": (("a", 1.0), ("b", 0.0))}]), 1)[0]
    assert dataclasses.replace(deferred, provider="q") == ChoiceResult(DIGEST, (("a", 1.0), ("b", 0.0)), provider="q")


def test_deferred_results_read_their_row_once_and_equal_constructed_ones() -> None:
    q = animals()
    rows = Rows([{"question_digest": q.digest(), "distribution": (("cat", p), ("dog", 1 - p), ("eel", 0.0)),
                  "raw": i, "provider": "deferred"} for i, p in enumerate((0.25, 0.5, 1.0))])
    results = deferred_results(ChoiceResult, rows, 3)
    assert len(results) == 3 and all(type(r) is ChoiceResult for r in results) and rows.reads == 0
    assert results[1].top == "cat" and rows.reads == 1  # a tie: the first
    assert results[1].raw == 1 and results[1].provider == "deferred" and rows.reads == 1  # filled, read once
    built = ChoiceResult(q.digest(), (("cat", 0.5), ("dog", 0.5), ("eel", 0.0)), provider="deferred")
    assert results[1] == built and hash(results[1]) == hash(built)
    assert results[2].probability("cat") == 1.0 and results[0].raw == 0
    assert pickle.loads(pickle.dumps(results[0])) == results[0]
    assert repr(results[2]).startswith("ChoiceResult(question_digest=")
    with pytest.raises(AttributeError):
        _ = results[0].no_such_field
    with pytest.raises(AttributeError):
        _ = results[0]._no_such_private
    assert deferred_results(ChoiceResult, rows, 0) == []


def test_deferred_fields_fall_back_to_their_defaults_and_refuse_a_missing_required_one() -> None:
    b = deferred_results(BooleanResult, Rows([{"question_digest": DIGEST, "p_true": 0.25}]), 1)[0]
    assert b.p_true == 0.25 and b.p_false == 0.75 and b.provider is None and b.raw is None
    s = deferred_results(ScoreResult, Rows([{"question_digest": DIGEST, "distribution": (("a", 1.0), ("b", 0.0))}]), 1)
    assert s[0].vendor_score is None and s[0].expected_index == 0.0
    missing = deferred_results(BooleanResult, Rows([{"question_digest": DIGEST}]), 1)[0]
    with pytest.raises(AttributeError, match="the shared rows gave no 'p_true' for this result"):
        _ = missing.p_true


def test_deferred_results_of_a_type_without_slots() -> None:
    @attrs.define(slots=False)
    class Loose(_Deferred):
        question_digest: str = ""
        _rows: Any = attrs.field(default=None, init=False)
        _row: Any = attrs.field(default=None, init=False)

    result = deferred_results(Loose, Rows([{"question_digest": "q"}, {"question_digest": "r"}]), 2)
    assert result[1].question_digest == "r" and result[0].question_digest == "q"


# --------------------------------------------------------------------------------- capabilities


def test_capabilities_defaults_and_conversions() -> None:
    c = Capabilities(["choice", "choice"])
    assert c.primitives == frozenset({"choice"}) and c.modalities == frozenset({"tensor"})
    assert c.labels is None and c.questions is None and c.max_batch is None and not c.dynamic_labels
    assert c.inference and not c.training and not c.export
    c = Capabilities(("choice",), modalities=["text"], labels=iter(["a", "b"]), questions=[DIGEST])
    assert c.modalities == frozenset({"text"}) and c.labels == ("a", "b") and c.questions == frozenset({DIGEST})
    with pytest.raises(InvalidDecisionRequest, match=r"unknown primitives \['poll', 'vote'\]; expected a subset of"):
        Capabilities(["choice", "vote", "poll"])


def test_check_refuses_kinds_questions_modalities_and_bad_batch_sizes() -> None:
    c = Capabilities(["choice", "boolean"], modalities=["tensor", "text"])
    c.check(animals(), modality="text", batch_size=0)
    c.check(Boolean("b"), modality="tensor", batch_size=3)
    with pytest.raises(UnsupportedCapability, match=r"answers \['boolean', 'choice'\], not 'score' questions"):
        c.check(sizes(), modality="tensor", batch_size=1)
    with pytest.raises(UnsupportedCapability, match=r"reads \['tensor', 'text'\] inputs, not 'image'"):
        c.check(animals(), modality="image", batch_size=1)
    for size in (-1, 1.0, True, "2", None):
        with pytest.raises(InvalidDecisionRequest, match="batch_size must be a non-negative integer"):
            c.check(animals(), modality="tensor", batch_size=size)
    with pytest.raises(InvalidDecisionRequest):
        c.check("a question", modality="tensor", batch_size=1)
    only = Capabilities(["boolean"], questions=[Boolean("trained").digest()])
    only.check(Boolean("trained"), modality="tensor", batch_size=1)
    with pytest.raises(UnsupportedCapability) as caught:
        only.check(Boolean("other"), modality="tensor", batch_size=1)
    assert "only the boolean question(s) it was built for; 'other'" in str(caught.value)
    assert Boolean("other").digest()[:12] in str(caught.value)


def test_fixed_labels_a_choice_names_each_once_in_any_order() -> None:
    c = Capabilities(["choice", "score"], labels=["cat", "dog", "eel"])
    c.check(animals(), modality="tensor", batch_size=2)
    c.check(Choice("p", [("eel", "x"), ("cat", "y"), ("dog", "z")]), modality="tensor", batch_size=2)
    c.check(Choice("p", [("a", "x"), ("b", "y"), ("c", "z")]), modality="tensor", batch_size=2,
            label_ids=["dog", "eel", "cat"])
    with pytest.raises(UnsupportedCapability) as caught:
        c.check(Choice("p", [("cat", "x"), ("cow", "y"), ("dog", "z")]), modality="tensor", batch_size=2)
    assert "unseen labels ['cow'], missing ['eel']; given ['cat', 'cow', 'dog']" in str(caught.value)
    with pytest.raises(UnsupportedCapability, match="one-to-one"):
        c.check(Choice("p", [("a", "x"), ("b", "y"), ("c", "z")]), modality="tensor", batch_size=2,
                label_ids=["cat", "cat", "dog"])
    with pytest.raises(UnsupportedCapability, match="missing \\['eel'\\]"):
        c.check(Choice("p", [("cat", "x"), ("dog", "y")]), modality="tensor", batch_size=2)
    with pytest.raises(InvalidDecisionRequest, match="label_ids has 2 entries for 3 options"):
        c.check(animals(), modality="tensor", batch_size=2, label_ids=["cat", "dog"])
    # dynamic labels, no labels, or a Boolean: the options are not compared
    Capabilities(["choice"], labels=["x", "y"], dynamic_labels=True).check(animals(), modality="tensor", batch_size=1)
    Capabilities(["choice"]).check(animals(), modality="tensor", batch_size=1)
    Capabilities(["boolean"], labels=["x", "y"]).check(Boolean("b"), modality="tensor", batch_size=1)


def test_fixed_labels_a_score_names_them_in_class_order() -> None:
    c = Capabilities(["score"], labels=["s", "m", "l"])
    c.check(sizes(), modality="tensor", batch_size=1)
    with pytest.raises(UnsupportedCapability) as caught:
        c.check(Score("p", [("m", "x"), ("s", "y"), ("l", "z")]), modality="tensor", batch_size=1)
    assert "class order ['s', 'm', 'l'], lowest first; got ['m', 's', 'l']" in str(caught.value)
    c.check(Score("p", [("a", "x"), ("b", "y"), ("c", "z")]), modality="tensor", batch_size=1, label_ids=("s", "m", "l"))


def test_a_provider_is_anything_with_capabilities_and_decide() -> None:
    class Echo:
        def capabilities(self) -> Capabilities:
            return Capabilities(["boolean"])

        def decide(self, question: Any, inputs: Any) -> list[Any]:
            return [validate_response(question, 0.5) for _ in inputs]

    assert isinstance(Echo(), DecisionProvider) and not isinstance(object(), DecisionProvider)


def test_refusals_say_exactly_what_is_wrong() -> None:
    q = Choice("p", [("a", "x"), ("b", "y")])
    with pytest.raises(InvalidDecisionResponse) as caught:
        validate_response(q, {"a": 0.5, "b": 0.25})
    assert str(caught.value) == ("probabilities sum to 0.75, not 1 within 1e-06; answers are never renormalized")
    with pytest.raises(InvalidDecisionResponse) as caught:
        validate_response(Boolean("b"), {"true": 0.5})
    assert str(caught.value) == "a Boolean answer mapping has exactly the keys 'true' and 'false', got [\"'true'\"]"
    with pytest.raises(InvalidDecisionResponse) as caught:
        validate_response(Boolean("b"), {"true": 0.75, "false": 0.5})
    assert str(caught.value) == "p('true') + p('false') = 1.25, not 1 within 1e-06; answers are never renormalized"
    only = Capabilities(["boolean"], questions=[Boolean("trained").digest()])
    with pytest.raises(UnsupportedCapability) as caught:
        only.check(Boolean("other"), modality="tensor", batch_size=1)
    assert f"'other' (digest {Boolean('other').digest()[:12]}…) is not one of them" in str(caught.value)
    with pytest.raises(InvalidDecisionResponse, match="SHA-256 hex digest"):
        ChoiceResult("X" * 64, (("a", 0.5), ("b", 0.5)))


def test_a_score_answer_keeps_its_provider_and_raw() -> None:
    r = validate_response(sizes(), {"s": 1.0, "m": 0.0, "l": 0.0}, provider="judge", raw=[0.1])
    assert r.provider == "judge" and r.raw == [0.1]


def test_a_private_name_never_reads_the_shared_rows() -> None:
    rows = Rows([{"question_digest": DIGEST, "p_true": 0.5}])
    result = deferred_results(BooleanResult, rows, 1)[0]
    with pytest.raises(AttributeError) as caught:
        _ = result._no_such_private
    assert caught.value.args == ("_no_such_private",) and rows.reads == 0
    assert result.raw is None and rows.reads == 1  # a plain field read first fills the slots
