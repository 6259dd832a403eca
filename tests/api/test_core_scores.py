"""``nnx_core.scores`` without torch: the label scores follow scikit-learn's ``accuracy_score`` and
``precision/recall/f1_score(zero_division=0)`` (the module's stated rule), and ``confusion_of``
counts plain labels. scikit-learn is the oracle; the matrices are built here by hand. Torch-free, but
here rather than in tests/core because the core's venv (`make core-check`) has no scikit-learn."""

from __future__ import annotations

import random

import pytest

from nnx_core.errors import ParamsError
from nnx_core.scores import AVERAGES, confusion_of, label_scores

from tests.sklearn_oracle import sklearn_scores


def _matrix(y: list[int], p: list[int], n: int) -> list[list[int]]:
    m = [[0] * n for _ in range(n)]
    for t, q in zip(y, p, strict=True):
        m[t][q] += 1
    return m




def _cases(n_classes: int, count: int, seed: int):
    rng = random.Random(seed)
    for _ in range(count):
        size = rng.randint(1, 12)
        # skewed draws so some classes are absent, or only predicted, or only true
        y = [rng.choice(range(n_classes - 1)) if rng.random() < 0.5 else rng.randrange(n_classes) for _ in range(size)]
        p = [rng.randrange(n_classes) if rng.random() < 0.7 else y[i] for i in range(size)]
        yield y, p


@pytest.mark.parametrize("average", ["macro", "weighted", "micro"])
def test_scores_equal_sklearn_over_present_labels(average: str) -> None:
    for y, p in _cases(4, 150, seed=hash(average) % 1000):
        got = label_scores(_matrix(y, p, 4), average)
        want = sklearn_scores(y, p, average)
        assert got.keys() == want.keys()
        for key in want:
            assert got[key] == pytest.approx(want[key], rel=1e-12, abs=1e-12), (y, p, average, key)


def test_binary_scores_the_positive_class_of_two() -> None:
    for y, p in _cases(2, 150, seed=7):
        got = label_scores(_matrix(y, p, 2), "binary")
        want = sklearn_scores(y, p, "binary")
        for key in want:
            assert got[key] == pytest.approx(want[key], rel=1e-12, abs=1e-12), (y, p, key)


def test_binary_by_hand_and_one_class_scores_zero() -> None:
    # rows true, columns predicted: tp(1)=3, predicted 1 = 4, support 1 = 5
    assert label_scores([[2, 1], [2, 3]], "binary") == {
        "accuracy": 5 / 8, "precision": 3 / 4, "recall": 3 / 5, "f1": 6 / 9,
    }
    # one class only: there is no positive class, so its scores are 0; accuracy still counts
    assert label_scores([[4]], "binary") == {"accuracy": 1.0, "precision": 0.0, "recall": 0.0, "f1": 0.0}


def test_binary_refuses_more_than_two_classes() -> None:
    with pytest.raises(ParamsError) as caught:
        label_scores([[1, 0, 0], [0, 1, 0], [0, 0, 1]], "binary")
    assert caught.value.path == "average"
    assert "3 classes" in str(caught.value)


def test_unknown_average_is_refused_naming_the_choices() -> None:
    with pytest.raises(ParamsError) as caught:
        label_scores([[1]], "samples")
    assert caught.value.path == "average"
    assert str(caught.value) == "average: must be one of 'macro', 'micro', 'weighted', 'binary', got 'samples'"
    assert AVERAGES == ("macro", "micro", "weighted", "binary")


@pytest.mark.parametrize("average", AVERAGES)
def test_a_matrix_counting_nothing_has_no_scores(average: str) -> None:
    assert label_scores([], average) == {}
    assert label_scores([[0, 0], [0, 0]], average) == {}


def test_the_default_average_is_macro() -> None:
    m = [[2, 1, 0], [0, 1, 3], [1, 0, 0]]
    assert label_scores(m) == label_scores(m, "macro")
    assert label_scores(m) != label_scores(m, "weighted")


def test_macro_and_weighted_by_hand_leave_out_absent_labels() -> None:
    # class 2 is neither true nor predicted: it is not averaged over
    m = [[2, 1, 0], [0, 1, 0], [0, 0, 0]]
    macro = label_scores(m, "macro")
    assert macro["precision"] == pytest.approx((1.0 + 0.5) / 2)
    assert macro["recall"] == pytest.approx((2 / 3 + 1.0) / 2)
    assert macro["f1"] == pytest.approx((4 / 5 + 2 / 3) / 2)
    weighted = label_scores(m, "weighted")
    assert weighted["recall"] == pytest.approx((3 * 2 / 3 + 1 * 1.0) / 4)
    assert weighted["precision"] == pytest.approx((3 * 1.0 + 1 * 0.5) / 4)
    # a label only predicted counts in macro (its recall is 0 by zero division) and weighs 0 in weighted
    m = [[1, 1], [0, 0]]
    assert label_scores(m, "macro")["recall"] == pytest.approx((0.5 + 0.0) / 2)
    assert label_scores(m, "weighted")["recall"] == pytest.approx(0.5)
    assert label_scores(m, "weighted")["precision"] == pytest.approx(1.0)


def test_float_counts_are_read() -> None:
    assert label_scores([[1.5, 0.5], [0.0, 2.0]], "micro")["accuracy"] == pytest.approx(3.5 / 4)


def test_docstring_example() -> None:
    assert label_scores([[2, 1], [0, 1]], "macro")["recall"] == 0.8333333333333333


# ------------------------------------------------------------------------------ confusion_of


def test_confusion_of_sorts_the_seen_labels_and_counts_rows_true_columns_predicted() -> None:
    labels, matrix = confusion_of([2, 0, 2, 1], [2, 2, 0, 1])
    assert labels == [0, 1, 2]
    assert matrix == [[0, 0, 1], [0, 1, 0], [1, 0, 1]]


def test_confusion_of_keeps_given_labels_and_their_order() -> None:
    labels, matrix = confusion_of(["b", "a"], ["a", "a"], labels=("c", "b", "a"))
    assert labels == ["c", "b", "a"]
    assert matrix == [[0, 0, 0], [0, 0, 1], [0, 0, 1]]


def test_confusion_of_reads_integral_floats_as_ints() -> None:
    labels, matrix = confusion_of([1.0, 0.0], [1, 1])
    assert labels == [0, 1] and all(type(label) is int for label in labels)
    assert matrix == [[0, 1], [0, 1]]


def test_confusion_of_accepts_iterators() -> None:
    assert confusion_of(iter([0, 1]), iter([1, 1])) == ([0, 1], [[0, 1], [0, 1]])


@pytest.mark.parametrize(
    ("targets", "predictions", "path", "words"),
    [
        ([[0, 1]], [0], "targets", "nested"),
        ([0], [(0, 1)], "predictions", "nested"),
        ([0.5], [0], "targets", "0.5"),
        ([0], [1.25], "predictions", "1.25"),
        ([0, 1], [0], "predictions", "has 1 labels but targets have 2"),
    ],
)
def test_confusion_of_refuses_what_is_not_one_label_per_sample(targets, predictions, path, words) -> None:
    with pytest.raises(ParamsError) as caught:
        confusion_of(targets, predictions)
    assert caught.value.path == path
    assert words in str(caught.value)


def test_confusion_of_refuses_labels_outside_the_given_ones() -> None:
    with pytest.raises(ParamsError) as caught:
        confusion_of([0, 3], [5, 0], labels=[0, 1])
    assert caught.value.path == "targets"
    assert "[3, 5]" in str(caught.value) and "[0, 1]" in str(caught.value)
    # labels of mixed types outside are still listed (in text order), not a TypeError
    with pytest.raises(ParamsError) as caught:
        confusion_of([0, "x"], [3, 0], labels=[0])
    assert "hold labels [3, 'x'] outside [0]" in str(caught.value)


def test_confusion_of_takes_given_labels_that_are_exactly_the_seen_ones() -> None:
    assert confusion_of([1, 0], [0, 0], labels=[1, 0]) == ([1, 0], [[0, 1], [0, 1]])


def test_confusion_of_counts_repeated_pairs() -> None:
    assert confusion_of([0, 0, 0, 1, 1], [0, 0, 1, 1, 1]) == ([0, 1], [[2, 1], [0, 2]])


def test_confusion_of_says_what_a_nested_label_must_be() -> None:
    with pytest.raises(ParamsError) as caught:
        confusion_of([[0]], [0])
    assert str(caught.value) == "targets: must be one class label per sample (a 1-d sequence), got nested values"
