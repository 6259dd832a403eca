"""Typed decisions: questions, validation, capabilities and FixedHeadProvider over a fake model."""

from __future__ import annotations

import json
import math
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from nnx_core.errors import NNxError
from nnx_api.decisions import (
    PROBABILITY_TOLERANCE,
    Boolean,
    BooleanResult,
    Capabilities,
    Choice,
    ChoiceResult,
    DecisionError,
    DecisionProvider,
    FixedHeadProvider,
    InvalidDecisionRequest,
    InvalidDecisionResponse,
    Option,
    ProviderFailure,
    Score,
    ScoreResult,
    UnsupportedCapability,
    question_from_state,
    validate_response,
)
from nnx_api.model import Head, PredictionResult  # the real NNModel types the fakes return

ROOT = Path(__file__).resolve().parents[2]
LABELS = ("cat", "dog", "fox")


class FakeModel:
    """The NNModel contract FixedHeadProvider uses, over a Linear layer (plus a Dropout child so
    per-module train/eval flags can be told apart)."""

    def __init__(self, kind: str = "categorical", width: int = 3, labels: Any = LABELS,
                 in_features: int = 4, fail: Exception | None = None) -> None:
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Linear(in_features, width), torch.nn.Dropout(0.0))
        self.head = Head(kind, width, labels)
        self.fail = fail
        self.calls: list[int] = []

    def predict_proba(self, X: Any, spec: Any = None) -> PredictionResult:
        self.calls.append(len(X))
        flags = [(module, module.training) for module in self.net.modules()]
        self.net.eval()
        try:
            if self.fail is not None:
                raise self.fail
            with torch.no_grad():
                logits = self.net(torch.as_tensor(X, dtype=torch.float32))
            if self.head.kind == "categorical":
                return PredictionResult(logits, torch.softmax(logits, -1), logits.argmax(-1),
                                        list(range(len(X))))
            return PredictionResult(logits, torch.sigmoid(logits), (logits >= 0).long(),
                                    list(range(len(X))))
        finally:
            for module, training in flags:
                module.training = training


def animals(*ids: str) -> Choice:
    ids = ids or LABELS
    return Choice("Which animal?", [(i, f"a {i}") for i in ids])


def rows(n: int = 5, features: int = 4) -> torch.Tensor:
    return torch.randn(n, features, generator=torch.Generator().manual_seed(1))


def expected_probabilities(model: FakeModel, X: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return torch.softmax(model.net[0](X).double(), -1)


# ------------------------------------------------------------------------------- questions


def test_choice_accepts_options_or_pairs_and_keeps_order() -> None:
    question = Choice("Pick", [Option("a", "first"), ("b", "second"), ["c", "third"]])
    assert question.kind == "choice"
    assert question.option_ids == ("a", "b", "c")
    assert question.options[1] == Option("b", "second")


@pytest.mark.parametrize("options", [
    [("a", "x"), ("a", "y")],           # duplicate ids
    [("a", "x")],                       # one option
    [],                                 # none
    [("a", "x"), "b"],                  # not a pair
    [("a", "x"), ("b", "y", "z")],      # triple
    [("a", "x"), ("", "y")],            # empty id
    [("a", "x"), (2, "y")],             # non-string id
    [("a", "x"), ("b", "")],            # empty description
    "ab",                               # a string is not a sequence of options
    {"a": "x", "b": "y"},               # a mapping is not either
])
def test_malformed_options_are_refused(options: Any) -> None:
    with pytest.raises(InvalidDecisionRequest):
        Choice("Pick", options)
    with pytest.raises(InvalidDecisionRequest):
        Score("Rate", options)


def test_prompt_must_be_text() -> None:
    for prompt in ("", "   ", None, 3):
        with pytest.raises(InvalidDecisionRequest):
            Boolean(prompt)


def test_state_round_trips_through_json() -> None:
    for question in (animals(), Boolean("Is it a cat?"),
                     Score("How cute?", [("1", "meh"), ("2", "cute"), ("3", "adorable")])):
        state = json.loads(json.dumps(question.state()))
        rebuilt = question_from_state(state)
        assert rebuilt == question and type(rebuilt) is type(question)
        assert rebuilt.digest() == question.digest()


@pytest.mark.parametrize("state", [
    None, {}, {"kind": "poll", "prompt": "x"}, {"kind": "boolean"},
    {"kind": "boolean", "prompt": "x", "extra": 1},
    {"kind": "choice", "prompt": "x", "options": [{"id": "a"}, {"id": "b"}]},
    {"kind": "choice", "prompt": "x", "options": "ab"},
])
def test_malformed_state_is_refused(state: Any) -> None:
    with pytest.raises(InvalidDecisionRequest):
        question_from_state(state)


def test_model_view_shows_texts_never_ids() -> None:
    view = Choice("Which?", [("id-one", "first text"), ("id-two", "second text")]).model_view()
    assert view == {"prompt": "Which?", "options": ["first text", "second text"]}
    assert "id-one" not in json.dumps(view)


def test_digest_covers_kind_prompt_ids_texts_and_order() -> None:
    base = Choice("Which?", [("a", "A"), ("b", "B")])
    variants = [
        Choice("Which one?", [("a", "A"), ("b", "B")]),
        Choice("Which?", [("b", "B"), ("a", "A")]),
        Choice("Which?", [("a", "A!"), ("b", "B")]),
        Choice("Which?", [("x", "A"), ("b", "B")]),
        Score("Which?", [("a", "A"), ("b", "B")]),
    ]
    assert base.digest() == Choice("Which?", [("a", "A"), ("b", "B")]).digest()
    assert len({base.digest(), *(v.digest() for v in variants)}) == 1 + len(variants)
    assert len(base.digest()) == 64


# --------------------------------------------------------------------------------- results


def test_validate_response_reorders_to_question_order() -> None:
    question = animals()
    result = validate_response(question, {"fox": 0.5, "cat": 0.2, "dog": 0.3}, raw="r")
    assert isinstance(result, ChoiceResult)
    assert result.distribution == (("cat", 0.2), ("dog", 0.3), ("fox", 0.5))
    assert result.question_digest == question.digest()
    assert result.top == "fox" and result.probability("dog") == 0.3 and result.raw == "r"
    assert validate_response(question, [("dog", 0.3), ("fox", 0.5), ("cat", 0.2)]) == result


@pytest.mark.parametrize("response", [
    {"cat": 0.5, "dog": 0.5},                                  # missing
    {"cat": 0.5, "dog": 0.25, "fox": 0.25, "owl": 0.0},         # unknown
    [("cat", 0.5), ("cat", 0.25), ("fox", 0.25)],               # duplicate
    {"cat": 0.5, "": 0.25, "dog": 0.25},                        # unlabeled
    {"cat": 0.5, None: 0.25, "dog": 0.25},                      # unlabeled
    {"cat": 0.6, "dog": 0.3, "fox": 0.3},                       # sums to 1.2
    {"cat": 0.5, "dog": 0.2, "fox": 0.2},                       # sums to 0.9: never renormalised
    {"cat": 1.5, "dog": -0.25, "fox": -0.25},                   # outside [0, 1]
    {"cat": math.nan, "dog": 0.5, "fox": 0.5},
    {"cat": math.inf, "dog": 0.5, "fox": 0.5},
    {"cat": 10**400, "dog": 0.5, "fox": 0.5},                   # overflows a float
    {"cat": True, "dog": False, "fox": False},                  # booleans are not probabilities
    {"cat": "0.5", "dog": 0.25, "fox": 0.25},
    "cat",
    [("cat", 0.5, 1)],
])
def test_invalid_choice_responses_are_refused(response: Any) -> None:
    with pytest.raises(InvalidDecisionResponse):
        validate_response(animals(), response)


def test_tolerance_is_applied_not_renormalised() -> None:
    near = {"cat": 0.5 + PROBABILITY_TOLERANCE / 2, "dog": 0.25, "fox": 0.25}
    assert validate_response(animals(), near).probability("cat") == near["cat"]
    with pytest.raises(InvalidDecisionResponse):
        validate_response(animals(), {"cat": 0.5 + 3 * PROBABILITY_TOLERANCE, "dog": 0.25, "fox": 0.25})


def test_boolean_responses() -> None:
    question = Boolean("Is it a cat?")
    assert validate_response(question, 0.75).p_true == 0.75
    result = validate_response(question, {"true": 0.25, "false": 0.75})
    assert isinstance(result, BooleanResult) and result.p_false == 0.75
    for bad in (1.5, -0.1, math.nan, True, "0.5", {"true": 0.5}, {"true": 0.5, "false": 0.6},
                {"yes": 0.5, "no": 0.5}):
        with pytest.raises(InvalidDecisionResponse):
            validate_response(question, bad)


def test_score_result_expected_index_and_vendor_score() -> None:
    question = Score("How cute?", [("1", "meh"), ("2", "cute"), ("3", "adorable")])
    result = validate_response(question, {"1": 0.25, "2": 0.25, "3": 0.5})
    assert isinstance(result, ScoreResult)
    assert result.expected_index == pytest.approx(1.25)
    assert ScoreResult(question.digest(), result.distribution, vendor_score=4.0).vendor_score == 4.0


def test_results_validate_on_construction_and_ignore_raw_in_equality() -> None:
    digest = animals().digest()
    a = ChoiceResult(digest, [("cat", 0.5), ("dog", 0.5)], raw=[1, 2])
    assert a == ChoiceResult(digest, (("cat", 0.5), ("dog", 0.5)), raw="other")
    assert hash(a) == hash(ChoiceResult(digest, (("cat", 0.5), ("dog", 0.5))))
    with pytest.raises(InvalidDecisionResponse):
        ChoiceResult(digest, [("cat", 0.5), ("dog", 0.4)])
    with pytest.raises(InvalidDecisionResponse):
        ChoiceResult("not-a-digest", [("cat", 0.5), ("dog", 0.5)])
    with pytest.raises(InvalidDecisionResponse):
        BooleanResult(digest, 2.0)


def test_validate_response_accepts_a_result_for_the_same_question_only() -> None:
    result = validate_response(animals(), {"cat": 0.2, "dog": 0.3, "fox": 0.5})
    assert validate_response(animals(), result) == result
    with pytest.raises(InvalidDecisionResponse):
        validate_response(animals("fox", "dog", "cat"), result)


def test_errors_form_one_family() -> None:
    assert issubclass(DecisionError, NNxError)
    assert issubclass(InvalidDecisionRequest, ValueError)
    assert issubclass(InvalidDecisionResponse, ValueError)
    assert issubclass(ProviderFailure, RuntimeError)
    for error in (InvalidDecisionRequest, InvalidDecisionResponse, UnsupportedCapability, ProviderFailure):
        assert issubclass(error, DecisionError)


# ---------------------------------------------------------------------------- capabilities


def test_capabilities_check_refuses_before_anything_runs() -> None:
    capabilities = Capabilities(primitives={"choice"}, labels=LABELS, max_batch=8)
    capabilities.check(animals("fox", "cat", "dog"), modality="tensor", batch_size=8)
    with pytest.raises(UnsupportedCapability, match="max_batch=8"):
        capabilities.check(animals("fox", "cat", "dog"), modality="tensor", batch_size=9)
    with pytest.raises(UnsupportedCapability):
        capabilities.check(Boolean("Cat?"), modality="tensor", batch_size=1)
    with pytest.raises(UnsupportedCapability):
        capabilities.check(animals(), modality="text", batch_size=1)
    with pytest.raises(UnsupportedCapability):
        capabilities.check(animals("cat", "dog"), modality="tensor", batch_size=1)
    with pytest.raises(UnsupportedCapability):
        capabilities.check(animals("a", "b", "c"), modality="tensor", batch_size=1)
    capabilities.check(animals("a", "b", "c"), modality="tensor", batch_size=1,
                       label_ids=["dog", "fox", "cat"])
    with pytest.raises(InvalidDecisionRequest):
        capabilities.check(animals(), modality="tensor", batch_size=-1)
    with pytest.raises(InvalidDecisionRequest):
        capabilities.check("Which animal?", modality="tensor", batch_size=1)
    with pytest.raises(InvalidDecisionRequest):
        Capabilities(primitives={"poll"})


# ------------------------------------------------------------------------ FixedHeadProvider


def test_fixed_head_answers_a_choice_in_float64() -> None:
    model, X = FakeModel(), rows(5)
    provider = FixedHeadProvider(model)
    assert isinstance(provider, DecisionProvider)
    assert provider.labels == LABELS
    results = provider.decide(animals(), X)
    expected = expected_probabilities(model, X)
    with torch.no_grad():
        logits = model.net[0](X)
    assert len(results) == 5 and provider.model_calls == 1
    for row, result in enumerate(results):
        assert isinstance(result, ChoiceResult)
        assert [i for i, _ in result.distribution] == list(LABELS)
        assert [p for _, p in result.distribution] == pytest.approx(expected[row].tolist(), abs=1e-12)
        assert validate_response(animals(), result) == result
        assert result.raw.tolist() == logits[row].tolist()  # the same 5-row batch: the same bits
        assert result.provider == "nnx.fixed_head" and result.raw.base is None  # an owned copy


def test_fixed_head_reorders_to_the_question_and_follows_option_map() -> None:
    model, X = FakeModel(), rows(4)
    expected = expected_probabilities(model, X)
    reordered = FixedHeadProvider(model).decide(animals("fox", "cat", "dog"), X)
    assert [i for i, _ in reordered[0].distribution] == ["fox", "cat", "dog"]
    assert reordered[2].probability("fox") == pytest.approx(float(expected[2, 2]), abs=1e-12)

    mapped = FixedHeadProvider(model, option_map={"vulpes": "fox", "felis": "cat", "canis": "dog"})
    question = Choice("Which genus?", [("canis", "Canis"), ("vulpes", "Vulpes"), ("felis", "Felis")])
    results = mapped.decide(question, X)
    assert results[0].option_ids == ("canis", "vulpes", "felis")
    for row, result in enumerate(results):
        assert [p for _, p in result.distribution] == pytest.approx(
            [float(expected[row, c]) for c in (1, 2, 0)], abs=1e-12)


def test_fixed_head_score_needs_ordinal_and_class_order() -> None:
    model = FakeModel(labels=("low", "mid", "high"))
    score = Score("How loud?", [("low", "quiet"), ("mid", "normal"), ("high", "loud")])
    with pytest.raises(UnsupportedCapability):
        FixedHeadProvider(model).decide(score, rows(2))
    results = FixedHeadProvider(model, ordinal=True).decide(score, rows(2))
    assert all(isinstance(r, ScoreResult) for r in results)
    assert 0.0 <= results[0].expected_index <= 2.0
    shuffled = Score("How loud?", [("mid", "normal"), ("low", "quiet"), ("high", "loud")])
    with pytest.raises(UnsupportedCapability):
        FixedHeadProvider(model, ordinal=True).decide(shuffled, rows(2))


def test_refusals_happen_before_any_model_call() -> None:
    model = FakeModel()
    provider = FixedHeadProvider(model)
    refused = [
        (animals("cat", "dog"), UnsupportedCapability),               # label set smaller than the head
        (animals("cat", "dog", "fox", "owl"), UnsupportedCapability),  # larger
        (animals("cat", "dog", "owl"), UnsupportedCapability),        # different
        (Boolean("Is it a cat?"), UnsupportedCapability),             # Boolean of a categorical head
        ("Which animal?", InvalidDecisionRequest),                    # not a question
    ]
    for question, error in refused:
        with pytest.raises(error):
            provider.check(question, rows(3))
        with pytest.raises(error):
            provider.decide(question, rows(3))
    with pytest.raises(InvalidDecisionRequest):
        provider.decide(animals(), 3)
    # questions with duplicate ids or one option cannot even be built
    with pytest.raises(InvalidDecisionRequest):
        Choice("Which?", [("cat", "a cat"), ("cat", "another cat"), ("fox", "a fox")])
    with pytest.raises(InvalidDecisionRequest):
        Choice("Which?", [("cat", "a cat")])
    assert provider.model_calls == 0 and model.calls == []


def test_construction_refusals() -> None:
    with pytest.raises(UnsupportedCapability):
        FixedHeadProvider(FakeModel(kind="regression", width=1, labels=None))
    with pytest.raises(UnsupportedCapability):
        FixedHeadProvider(FakeModel(kind="multilabel", width=3))
    with pytest.raises(InvalidDecisionRequest):
        FixedHeadProvider(FakeModel(labels=None))                    # no labels anywhere
    with pytest.raises(InvalidDecisionRequest):
        FixedHeadProvider(FakeModel(), labels=["cat", "dog"])         # count != width
    with pytest.raises(InvalidDecisionRequest):
        FixedHeadProvider(FakeModel(), labels=["cat", "cat", "dog"])
    with pytest.raises(InvalidDecisionRequest):
        FixedHeadProvider(FakeModel(), option_map={"x": "owl"})
    with pytest.raises(InvalidDecisionRequest):
        FixedHeadProvider(FakeModel(), option_map={"x": "cat", "y": "cat"})
    for max_batch in (0, -1, 2.0, True):
        with pytest.raises(InvalidDecisionRequest):
            FixedHeadProvider(FakeModel(), max_batch=max_batch)
    with pytest.raises(InvalidDecisionRequest):
        FixedHeadProvider(FakeModel(kind="bernoulli", width=1, labels=None))  # question= required
    with pytest.raises(InvalidDecisionRequest):
        FixedHeadProvider(FakeModel(), question=Boolean("Cat?"))


def test_labels_override_the_head() -> None:
    provider = FixedHeadProvider(FakeModel(labels=None), labels=["a", "b", "c"])
    assert provider.capabilities().labels == ("a", "b", "c")
    assert provider.decide(animals("c", "a", "b"), rows(1))[0].option_ids == ("c", "a", "b")


@pytest.mark.parametrize("kind", ["bernoulli", "multilabel"])
def test_bernoulli_head_answers_only_its_boolean(kind: str) -> None:
    model, X = FakeModel(kind=kind, width=1, labels=("spam",)), rows(4)
    question = Boolean("Is this spam?")
    provider = FixedHeadProvider(model, question=question)
    assert provider.capabilities().primitives == {"boolean"}
    results = provider.decide(question, X)
    with torch.no_grad():
        expected = torch.sigmoid(model.net[0](X).double())[:, 0]
    assert [r.p_true for r in results] == pytest.approx(expected.tolist(), abs=1e-12)
    assert all(r.question_digest == question.digest() for r in results)
    for other in (Boolean("Is this ham?"), Choice("Which?", [("spam", "s"), ("ham", "h")])):
        with pytest.raises(UnsupportedCapability):
            provider.decide(other, X)
    assert provider.model_calls == 1


def test_empty_inputs_make_no_model_call() -> None:
    model = FakeModel()
    provider = FixedHeadProvider(model)
    assert provider.decide(animals(), torch.empty(0, 4)) == []
    assert provider.model_calls == 0 and model.calls == []


def test_max_batch_refuses_a_larger_batch_before_the_model_runs() -> None:
    model, X = FakeModel(), rows(10)
    provider = FixedHeadProvider(model, max_batch=4)
    assert provider.capabilities().max_batch == 4
    with pytest.raises(UnsupportedCapability, match="max_batch=4"):  # NNx refuses it too
        provider.check(animals(), X)
    with pytest.raises(UnsupportedCapability, match="max_batch=4"):
        provider.decide(animals(), X)
    assert provider.model_calls == 0 and model.calls == []
    results = provider.decide(animals(), X[:4])  # at the cap: one model call
    assert len(results) == 4 and model.calls == [4] and provider.model_calls == 1


def test_text_inputs_are_refused_as_a_modality() -> None:
    provider = FixedHeadProvider(FakeModel())
    with pytest.raises(UnsupportedCapability, match="tensor inputs"):
        provider.decide(animals(), ["a photo of a fox"])
    assert provider.model_calls == 0


def test_model_errors_become_provider_failures_and_modes_are_restored() -> None:
    cause = RuntimeError("CUDA fell over")
    model = FakeModel(fail=cause)
    model.net.train()
    model.net[1].eval()  # mixed per-module flags must come back exactly
    provider = FixedHeadProvider(model)
    with pytest.raises(ProviderFailure) as caught:
        provider.decide(animals(), rows(2))
    assert caught.value.__cause__ is cause
    assert provider.model_calls == 1
    assert [m.training for m in model.net.modules()] == [True, True, False]


def test_modes_are_restored_even_if_predict_proba_leaves_eval_on() -> None:
    model = FakeModel()
    model.net.train()
    leaky = model.predict_proba
    model.predict_proba = lambda X, spec=None: (model.net.eval(), leaky(X))[1]  # a model that forgets to restore
    FixedHeadProvider(model).decide(animals(), rows(2))
    assert all(m.training for m in model.net.modules())


def test_non_finite_logits_are_refused_not_repaired() -> None:
    model = FakeModel()
    with torch.no_grad():
        model.net[0].bias[0] = math.nan
    with pytest.raises(InvalidDecisionResponse, match="row 0"):
        FixedHeadProvider(model).decide(animals(), rows(2))


def test_wrong_logit_shape_is_an_invalid_response() -> None:
    model = FakeModel()
    model.predict_proba = lambda X, spec=None: PredictionResult(torch.zeros(len(X) + 1, 3), None, torch.zeros(1), [])
    with pytest.raises(InvalidDecisionResponse):
        FixedHeadProvider(model).decide(animals(), rows(2))


def test_deferred_results_behave_like_constructed_ones() -> None:
    model, X = FakeModel(), rows(3)
    results = FixedHeadProvider(model).decide(animals(), X)
    copy = pickle.loads(pickle.dumps(results[1]))
    constructed = ChoiceResult(results[1].question_digest, results[1].distribution, provider="nnx.fixed_head")
    assert copy == constructed == results[1]
    assert hash(constructed) == hash(results[1])
    assert "ChoiceResult(question_digest=" in repr(results[0])
    with pytest.raises(AttributeError):
        results[0].no_such_field
    with pytest.raises(AttributeError):
        results[0].distribution = ()  # frozen


# ------------------------------------------------------------- FixedHeadProvider over NNModel


def nn_model(kind: str = "categorical", width: int = 3, labels: Any = LABELS) -> Any:
    import nnx_api as nnx

    torch.manual_seed(0)
    task = (nnx.TaskSpec.categorical(labels=labels) if kind == "categorical"
            else nnx.TaskSpec.multilabel(labels=labels))
    loss = nnx.Losses.CROSS_ENTROPY if kind == "categorical" else nnx.Losses.BINARY_CROSS_ENTROPY
    model = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=width, hidden_dims=(5,), dropout_prob=0.25),
                        nnx.NNModelParams(task=task, loss=loss))
    return model


class OnlyPredictProba:
    """An NNModel seen only through the provider's documented contract."""

    def __init__(self, model: Any) -> None:
        self.net, self.head, self.predict_proba = model.net, model.head, model.predict_proba


def test_nnmodel_answers_match_its_predict_proba_logits_in_float64() -> None:
    model, X = nn_model(), rows(6)
    direct = FixedHeadProvider(model).decide(animals("dog", "fox", "cat"), X)
    through = FixedHeadProvider(OnlyPredictProba(model)).decide(animals("dog", "fox", "cat"), X)
    assert direct == through
    expected = torch.softmax(torch.from_numpy(model.predict_proba(X).logits).double(), -1)[:, [1, 2, 0]]
    for row, result in enumerate(direct):
        assert [p for _, p in result.distribution] == pytest.approx(expected[row].tolist(), abs=1e-12)
        assert result.raw.tolist() == through[row].raw.tolist()
    model.task_adapter = None  # predict_proba would fail now; the provider only needs the logits
    assert FixedHeadProvider(model).decide(animals("dog", "fox", "cat"), X) == direct


def test_nnmodel_bernoulli_head_and_batches() -> None:
    model, X = nn_model(kind="multilabel", width=1, labels=("spam",)), rows(7)
    question = Boolean("Is this spam?")
    provider = FixedHeadProvider(model, question=question, max_batch=7)
    results = provider.decide(question, X)
    assert provider.model_calls == 1
    # the float64 sigmoid of what predict_proba gives for the same 7 rows
    expected = torch.sigmoid(torch.from_numpy(model.predict_proba(X).logits).double())[:, 0]
    assert [r.p_true for r in results] == pytest.approx(expected.tolist(), abs=1e-12)


def test_nnmodel_with_an_overridden_predict_proba_is_asked_through_it() -> None:
    model, X = nn_model(), rows(3)
    plain = FixedHeadProvider(model).decide(animals(), X)
    own = model.predict_proba
    calls: list[int] = []

    def tempered(data: Any, spec: Any = None) -> PredictionResult:  # temperature scaling done by the model itself
        calls.append(len(data))
        result = own(data, spec)
        return result._replace(logits=result.logits / 2)

    model.predict_proba = tempered
    answered = FixedHeadProvider(model).decide(animals(), X)
    assert calls == [3] and answered != plain
    assert answered[0].raw.tolist() == pytest.approx([v / 2 for v in plain[0].raw.tolist()], abs=1e-6)

    class Tempered(type(model)):
        def predict_proba(self, data: Any, spec: Any = None) -> PredictionResult:
            calls.append(len(data))
            return tempered(data, spec)

    del model.predict_proba
    model.__class__ = Tempered
    assert FixedHeadProvider(model).decide(animals(), X) == answered and calls == [3, 3, 3]


def test_nnmodel_failures_and_modes() -> None:
    model = nn_model()
    model.net.train()
    model.net.layers[0].eval()  # mixed per-module flags must come back exactly
    flags = [m.training for m in model.net.modules()]
    provider = FixedHeadProvider(model)
    with pytest.raises(ProviderFailure):
        provider.decide(animals(), rows(2, features=5))  # wrong input width: the forward raises
    assert [m.training for m in model.net.modules()] == flags
    first = provider.decide(animals(), rows(4))
    assert [m.training for m in model.net.modules()] == flags
    assert first == provider.decide(animals(), rows(4))  # eval mode: dropout is off
    assert provider.model_calls == 3


def test_a_module_head_without_a_declared_width_is_checked_when_it_runs() -> None:
    """NNx reads the head's width from a task's count or a built-in net's ``output_dim``; a
    ``module=`` head's width shows only on the first ``decide`` (as the NNx 0.4.1 wheel does)."""
    import nnx_api as nnx

    wide = nnx.NNModel(module=torch.nn.Linear(4, 3), params=nnx.NNModelParams(loss=nnx.Losses.BINARY_CROSS_ENTROPY))
    provider = FixedHeadProvider(wide, question=Boolean("Spam?"))
    with pytest.raises(UnsupportedCapability, match="one-output head"):
        provider.decide(Boolean("Spam?"), rows(2))
    four = nnx.NNModel(module=torch.nn.Linear(4, 4), params=nnx.NNModelParams(loss=nnx.Losses.CROSS_ENTROPY))
    provider = FixedHeadProvider(four, labels=LABELS)  # three labels for four logits: found on the call
    with pytest.raises(InvalidDecisionRequest, match="does not fit its labels"):
        provider.decide(animals(), rows(2))
    three = nnx.NNModel(module=torch.nn.Linear(4, 3), params=nnx.NNModelParams(loss=nnx.Losses.CROSS_ENTROPY))
    X = rows(2)
    expected = torch.softmax(three.net(X).detach().double(), -1)
    results = FixedHeadProvider(three, labels=LABELS).decide(animals(), X)
    assert [p for r in results for _, p in r.distribution] == pytest.approx(expected.flatten().tolist(), abs=1e-6)
    with pytest.raises(InvalidDecisionRequest, match="3 labels for a head with 4"):  # a declared width: at once
        FixedHeadProvider(nn_model(width=4, labels=None), labels=LABELS)


# ----------------------------------------------------------------------------- the example


def test_example_runs(tmp_path: Path) -> None:
    completed = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "decision_fixed_head.py"),
         "--root", str(tmp_path), "--epochs", "2"],
        capture_output=True, text=True, timeout=240, cwd=ROOT,
    )
    assert completed.returncode == 0, completed.stderr
    assert "Which digit?" in completed.stdout
