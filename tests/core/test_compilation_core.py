"""``CompileRecord`` without torch (module docstring of ``nnx_core.compilation``): its status is
one of pending / compiled / eager / failed, the plain record is YAML-safe and keeps ``reason``
only when there is one, and it rebuilds the same record (the torch side:
``tests/adapters/test_compilation.py``)."""

from __future__ import annotations

import pytest

from nnx_core.compilation import CompileRecord
from nnx_core.errors import ParamsError


def test_defaults_are_nothing_captured_no_breaks_and_no_options():
    record = CompileRecord("pending", "inductor")
    assert (record.capture, record.graph_breaks, record.mode, record.fullgraph, record.dynamic, record.reason) == (
        (), 0, None, False, None, None,
    )


def test_every_status_is_accepted_and_any_other_refused_naming_the_field():
    for status in ("pending", "compiled", "eager", "failed"):
        assert CompileRecord(status, "inductor").status == status
    with pytest.raises(ParamsError) as info:
        CompileRecord("broken", "inductor")
    assert info.value.path == "CompileRecord.status" and "'broken'" in str(info.value)


def test_capture_is_kept_as_a_tuple():
    record = CompileRecord("compiled", "eager", ["train_forward", "val_forward"])
    assert record.capture == ("train_forward", "val_forward")


def test_state_is_plain_and_keeps_the_reason_only_when_there_is_one():
    compiled = CompileRecord("compiled", "inductor", ("train_forward",), 2, "reduce-overhead", True, False)
    assert compiled.state() == {
        "status": "compiled", "backend": "inductor", "capture": ["train_forward"], "graph_breaks": 2,
        "mode": "reduce-overhead", "fullgraph": True, "dynamic": False,
    }
    eager = CompileRecord("eager", "inductor", reason="no C++ compiler")
    assert eager.state() == {
        "status": "eager", "backend": "inductor", "capture": [], "graph_breaks": 0, "mode": None,
        "fullgraph": False, "dynamic": None, "reason": "no C++ compiler",
    }
    for record in (compiled, eager):
        assert CompileRecord.from_state(record.state()) == record


def test_a_minimal_mapping_reads_with_the_defaults():
    record = CompileRecord.from_state({"status": "failed", "backend": "aot_eager"})
    assert record == CompileRecord("failed", "aot_eager", (), 0, None, False, None, None)


def test_from_state_normalises_the_plain_types():
    record = CompileRecord.from_state(
        {"status": "compiled", "backend": "inductor", "capture": ["train_forward"], "graph_breaks": "3",
         "fullgraph": 1, "dynamic": True, "mode": "default", "reason": "note"}
    )
    assert record.capture == ("train_forward",) and record.graph_breaks == 3 and record.fullgraph is True
    assert (record.dynamic, record.mode, record.reason) == (True, "default", "note")


def test_coerce_takes_a_record_a_mapping_or_none():
    record = CompileRecord("eager", "inductor", ("val_forward",), 1, reason="graph break limit")
    assert CompileRecord.coerce(None) is None
    assert CompileRecord.coerce(record) is record
    assert CompileRecord.coerce(record.state()) == record
