"""Domain checks (``nnx_core.validate``). Oracle: the module docstring — integer counts must be
real integers (``bool`` and ``2.0`` refused), reals finite and within their documented range
(bounds optionally exclusive), each failure a ``ParamsError`` naming the field."""

from __future__ import annotations

import fractions

import attrs
import pytest

from nnx_core.errors import ParamsError
from nnx_core.validate import check_choice, check_float, check_int, check_str, optional, validator


def refused(check, *args, match: str, **kwargs) -> None:
    with pytest.raises(ParamsError, match=match) as info:
        check("F.x", *args, **kwargs)
    assert info.value.path == "F.x"


class NumpyLikeInt(int):
    """An integral that is not exactly ``int`` (as numpy's integers are)."""


def test_check_int_accepts_integers_at_or_above_the_minimum_and_returns_plain_ints():
    assert check_int("F.x", 3) == 3
    assert check_int("F.x", 1, minimum=1) == 1
    assert check_int("F.x", -5) == -5  # no minimum: any integer
    value = check_int("F.x", NumpyLikeInt(4), minimum=0)
    assert value == 4 and type(value) is int


@pytest.mark.parametrize("bad", [True, False, 2.0, "2", None])
def test_check_int_refuses_bools_floats_and_other_types(bad):
    refused(check_int, bad, match=f"must be an integer, got {type(bad).__name__} ")


def test_check_int_refuses_below_the_minimum():
    refused(check_int, 0, minimum=1, match="must be ≥ 1, got 0$")


def test_check_float_accepts_finite_reals_in_range_and_returns_floats():
    assert check_float("F.x", 1) == 1.0 and type(check_float("F.x", 1)) is float
    assert check_float("F.x", fractions.Fraction(1, 2)) == 0.5
    assert check_float("F.x", 0.0, minimum=0.0, maximum=1.0) == 0.0
    assert check_float("F.x", 1.0, minimum=0.0, maximum=1.0) == 1.0
    assert check_float("F.x", 0.5, minimum=0.0, maximum=1.0, exclusive_min=True, exclusive_max=True) == 0.5
    assert check_float("F.x", -1e300) == -1e300  # no bounds


@pytest.mark.parametrize("bad", [True, "0.5", None])
def test_check_float_refuses_non_numbers(bad):
    refused(check_float, bad, match=f"must be a number, got {type(bad).__name__} ")


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_check_float_refuses_non_finite_values(bad):
    refused(check_float, bad, match="must be finite")


def test_check_float_bounds_and_their_exclusive_forms():
    refused(check_float, -0.1, minimum=0.0, match="must be ≥ 0.0, got -0.1$")
    refused(check_float, 1.1, maximum=1.0, match="must be ≤ 1.0, got 1.1$")
    refused(check_float, 0.0, minimum=0.0, exclusive_min=True, match="must be > 0.0, got 0.0$")
    refused(check_float, 1.0, maximum=1.0, exclusive_max=True, match="must be < 1.0, got 1.0$")
    refused(check_float, -1.0, minimum=0.0, exclusive_min=True, match="must be > 0.0, got -1.0$")
    refused(check_float, 2.0, maximum=1.0, exclusive_max=True, match="must be < 1.0, got 2.0$")
    # an exclusive flag without its bound constrains nothing
    assert check_float("F.x", 0.0, exclusive_min=True, exclusive_max=True) == 0.0


def test_check_choice_and_check_str():
    assert check_choice("F.x", "b", ("a", "b")) == "b"
    refused(check_choice, "c", ("a", "b"), match=r"must be one of 'a', 'b'; got 'c'$")
    assert check_str("F.x", " name ") == " name "
    for bad in ("", "   ", None, 3):
        refused(check_str, bad, match=f"must be a non-blank string, got {bad!r}$")


def test_attrs_validators_name_the_class_and_field():
    # the class is made inside the test: attrs builds its validators when the class is defined
    @attrs.frozen
    class Spec:
        size: int = attrs.field(validator=validator(check_int, minimum=1))
        rate: float | None = attrs.field(default=None, validator=optional(check_float, minimum=0.0))

    assert Spec(size=1).rate is None and Spec(size=2, rate=0.0).rate == 0.0
    with pytest.raises(ParamsError, match="Spec.size: must be ≥ 1, got 0$") as info:
        Spec(size=0)
    assert info.value.path == "Spec.size"
    with pytest.raises(ParamsError, match="Spec.rate: must be ≥ 0.0, got -1.0$") as info:
        Spec(size=1, rate=-1.0)
    assert info.value.path == "Spec.rate"
    with pytest.raises(ParamsError, match="Spec.rate: must be a number"):
        Spec(size=1, rate="x")
