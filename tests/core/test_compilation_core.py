"""``CompileRecord`` without torch (module docstring of ``nnx_core.compilation``): ``effective`` is
one of pending / compiled / eager / failed, ``capture`` follows ``graph_breaks``, the plain record
is YAML-safe and rebuilds the same (hash-equal) record, and the layout earlier releases wrote still
reads (the torch side: ``tests/adapters/test_compilation.py``)."""

from __future__ import annotations

import json

import pytest

from nnx_core.compilation import CompileRecord
from nnx_core.errors import ParamsError

RESTART = {"phase": "train", "epoch": 0, "batch": 3, "stage": "forward", "error": "Unsupported", "message": "break"}


def test_defaults_are_pending_unknown_capture_and_no_options():
    record = CompileRecord("inductor")
    assert (record.effective, record.graph_breaks, record.capture, record.restart, record.on_failure) == (
        "pending", None, None, None, "error")
    assert record.options == {"mode": None, "fullgraph": False, "dynamic": None} and record.requested is True


def test_every_state_is_accepted_and_any_other_refused_naming_the_field():
    for state in ("pending", "compiled", "eager", "failed"):
        assert CompileRecord("inductor", effective=state).effective == state
    with pytest.raises(ParamsError) as info:
        CompileRecord("inductor", effective="broken")
    assert info.value.path == "CompileRecord.effective" and "'broken'" in str(info.value)


@pytest.mark.parametrize(("breaks", "capture"), [(None, None), (0, "full"), (1, "partial"), (4, "partial")])
def test_capture_follows_the_graph_breaks(breaks, capture):
    assert CompileRecord("eager", effective="compiled", graph_breaks=breaks).capture == capture


def test_the_record_is_plain_and_rebuilds_the_same_hashable_record():
    record = CompileRecord("aot_eager", {"mode": None, "fullgraph": True, "dynamic": False}, "eager", "2.13.0",
                           "eager", None, RESTART, ("train_forward", "val_forward"))
    plain = record.record()
    assert json.loads(json.dumps(plain)) == plain == {
        "requested": True, "backend": "aot_eager", "options": {"mode": None, "fullgraph": True, "dynamic": False},
        "on_failure": "eager", "torch_version": "2.13.0", "effective": "eager", "graph_breaks": None,
        "capture": None, "restart": RESTART, "forwards": ["train_forward", "val_forward"],
    }
    again = CompileRecord.from_record(plain)
    assert again == record and hash(again) == hash(record) and record.state() == plain
    assert CompileRecord.from_state(plain) == record


def test_options_and_restart_take_no_part_in_the_hash():
    a = CompileRecord("eager", {"fullgraph": True}, restart={"message": "x"})
    b = CompileRecord("eager", {"fullgraph": False})
    assert hash(a) == hash(b) and a != b


def test_the_layout_earlier_releases_wrote_still_reads():
    earlier = {"status": "eager", "backend": "inductor", "capture": ["train_forward"], "graph_breaks": 0,
               "mode": None, "fullgraph": True, "dynamic": None, "reason": "no C++ compiler"}
    record = CompileRecord.from_record(earlier)
    assert (record.effective, record.on_failure, record.forwards, record.graph_breaks) == (
        "eager", "eager", ("train_forward",), None)
    assert record.options["fullgraph"] is True and record.restart == {"message": "no C++ compiler"}
    compiled = CompileRecord.from_record({"status": "compiled", "backend": "eager", "graph_breaks": 2})
    assert (compiled.effective, compiled.capture, compiled.on_failure) == ("compiled", "partial", "error")


def test_coerce_takes_a_record_a_mapping_or_none():
    record = CompileRecord("inductor", effective="eager", restart=RESTART, forwards=("val_forward",))
    assert CompileRecord.coerce(None) is None
    assert CompileRecord.coerce(record) is record
    assert CompileRecord.coerce(record.record()) == record
