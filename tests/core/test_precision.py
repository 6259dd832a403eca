"""``ResolvedPrecision``: the record of a requested and an effective precision (module docstring
of ``nnx_core.precision``): modes and sources are checked, a fallback is what differs, the plain
record keeps ``fallback_reason`` only when there is one and rebuilds the same record."""

from __future__ import annotations

import pytest

from nnx_core.errors import ParamsError
from nnx_core.precision import ResolvedPrecision


def test_fell_back_is_exactly_effective_differing_from_requested():
    assert ResolvedPrecision("fp16", "fp32", "cpu", "mixed_precision", "fp16 needs CUDA").fell_back
    assert not ResolvedPrecision("bf16", "bf16", "cpu", "policy").fell_back
    assert not ResolvedPrecision("fp32", "fp32", "cuda").fell_back


def test_source_defaults_to_default_and_the_reason_to_none():
    record = ResolvedPrecision("fp32", "fp32", "cpu")
    assert record.source == "default" and record.fallback_reason is None


@pytest.mark.parametrize(
    ("args", "field", "bad"),
    [
        (("fp8", "fp32", "cpu"), "requested", "'fp8'"),
        (("fp32", "half", "cpu"), "effective", "'half'"),
        (("fp32", "fp32", "cpu", "flag"), "source", "'flag'"),
    ],
)
def test_modes_and_sources_outside_their_choices_are_refused_naming_the_field(args, field, bad):
    with pytest.raises(ParamsError) as info:
        ResolvedPrecision(*args)
    assert info.value.path == f"ResolvedPrecision.{field}"
    assert bad in str(info.value)


def test_every_mode_and_source_is_accepted():
    for mode in ("fp32", "fp16", "bf16"):
        assert ResolvedPrecision(mode, mode, "cpu").effective == mode
    for source in ("default", "policy", "mixed_precision"):
        assert ResolvedPrecision("fp32", "fp32", "cpu", source).source == source


def test_state_keeps_the_reason_only_after_a_fallback_and_rebuilds_the_same_record():
    plain = ResolvedPrecision("bf16", "bf16", "cuda", "policy")
    assert plain.state() == {"requested": "bf16", "effective": "bf16", "device_type": "cuda", "source": "policy"}
    fell = ResolvedPrecision("fp16", "fp32", "cpu", "mixed_precision", "fp16 needs CUDA")
    assert fell.state() == {
        "requested": "fp16", "effective": "fp32", "device_type": "cpu", "source": "mixed_precision",
        "fallback_reason": "fp16 needs CUDA",
    }
    for record in (plain, fell):
        assert ResolvedPrecision.from_state(record.state()) == record


def test_an_older_record_without_source_or_reason_reads_as_default():
    record = ResolvedPrecision.from_state({"requested": "fp32", "effective": "fp32", "device_type": "cpu"})
    assert record == ResolvedPrecision("fp32", "fp32", "cpu", "default", None)


def test_coerce_takes_a_record_a_mapping_or_none():
    record = ResolvedPrecision("fp16", "fp32", "cpu", "policy", "fp16 needs CUDA")
    assert ResolvedPrecision.coerce(None) is None
    assert ResolvedPrecision.coerce(record) is record
    assert ResolvedPrecision.coerce(record.state()) == record
