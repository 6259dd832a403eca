"""The one converter: omit-when-default and runtime-only fields, lossless round trips, field paths."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import attrs
import pytest

from nnx_core.convert import OMIT, RUNTIME, Stateful, converter
from nnx_core.errors import ParamsError
from nnx_core.monitor_spec import MonitorSpec
from nnx_core.records import EvaluationDataPoint, IterationDataPoint, MonitorRecord
from nnx_core.validate import check_int


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Inner(Stateful):
    size: int
    extra: tuple[int, ...] = dataclasses.field(default=(), metadata=OMIT)

    def __post_init__(self) -> None:
        check_int("Inner.size", self.size, minimum=1)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Outer(Stateful):
    name: str
    inner: Inner
    shipped_later: int | None = dataclasses.field(default=None, metadata=OMIT)
    always: float = 0.5
    loader: object = dataclasses.field(default=None, metadata=RUNTIME)


def test_omit_when_default_and_runtime_fields():
    plain = Outer(name="a", inner=Inner(size=2), loader=[1, 2])
    assert plain.state() == {"name": "a", "inner": {"size": 2}, "always": 0.5}
    later = Outer(name="a", inner=Inner(size=2, extra=(3, 4)), shipped_later=7)
    assert later.state() == {"name": "a", "inner": {"size": 2, "extra": [3, 4]}, "always": 0.5, "shipped_later": 7}


def test_round_trip_through_json_is_lossless():
    obj = Outer(name="a", inner=Inner(size=2, extra=(3,)), shipped_later=0)
    assert Outer.from_state(json.loads(json.dumps(obj.state()))) == obj


def test_a_saved_state_naming_a_runtime_or_unknown_field_is_refused():
    with pytest.raises(ParamsError, match="Outer: unknown field 'loader'"):
        Outer.from_state({"name": "a", "inner": {"size": 2}, "loader": [1]})
    with pytest.raises(ParamsError, match=r"Outer\.inner: unknown field 'colour'") as info:
        Outer.from_state({"name": "a", "inner": {"size": 2, "colour": "red"}})
    assert info.value.path == "Outer.inner"


def test_errors_name_the_field_path_inside_the_state():
    with pytest.raises(ParamsError, match=r"Outer\.inner: Inner\.size: must be ≥ 1") as info:
        Outer.from_state({"name": "a", "inner": {"size": 0}})
    assert info.value.path == "Outer.inner"
    with pytest.raises(ParamsError, match=r"Outer\.inner: required field missing"):
        Outer.from_state({"name": "a"})
    with pytest.raises(ParamsError, match="must be a mapping"):
        Outer.from_state(["name", "a"])  # type: ignore[arg-type]


def test_several_errors_are_reported_together():
    with pytest.raises(ParamsError) as info:
        Outer.from_state({"inner": {"size": 2}, "bogus": 1})
    assert "Outer.name: required field missing" in str(info.value) and "'bogus'" in str(info.value)


def test_attrs_classes_use_the_same_rules():
    @attrs.frozen(kw_only=True)
    class Record(Stateful):
        x: int
        y: int | None = attrs.field(default=None, metadata=OMIT)

    converter.get_unstructure_hook(Record)  # hooks are made on first use, for attrs classes too
    assert Record(x=1).state() == {"x": 1} and Record.from_state({"x": 1, "y": 2}) == Record(x=1, y=2)


# ------------------------------------------------------------------------------ core records
EDP = EvaluationDataPoint(loss=0.5, error=0.25, accuracy=0.75, count=8, metrics={"nll": 0.4, "brier": 0.1})
SELECTION = MonitorRecord(metric="loss", split="val", mode="min", value=None, status="missing", improved=False)


def test_record_state_leaves_out_what_is_unset_in_field_order():
    # the order is idps.csv's column order: it must not change
    bare = IterationDataPoint(iter_idx=0, epoch_idx=0, batch_idx=0, lr=0.1, train_edp=EvaluationDataPoint(loss=1.0))
    assert list(bare.state().items()) == [("iter_idx", 0), ("epoch_idx", 0), ("batch_idx", 0), ("lr", 0.1),
                                          ("train_edp", {"loss": 1.0})]
    full = IterationDataPoint(iter_idx=3, epoch_idx=1, batch_idx=2, lr=0.1, train_edp=EDP, val_edp=EDP,
                              train_summary=EDP, selection=SELECTION, update_count=4)
    state = full.state()
    assert list(state) == ["iter_idx", "epoch_idx", "batch_idx", "lr", "train_edp", "val_edp", "train_summary",
                           "selection", "update_count"]
    assert list(state["val_edp"].items()) == [("loss", 0.5), ("error", 0.25), ("accuracy", 0.75), ("count", 8),
                                              ("metrics", {"brier": 0.1, "nll": 0.4})]
    assert state["selection"] == {"metric": "loss", "split": "val", "mode": "min", "value": None,
                                  "status": "missing", "improved": False, "best": None}
    assert IterationDataPoint.from_state(json.loads(json.dumps(state))) == full


def test_a_monitor_record_may_leave_out_value_and_best():
    saved = {"metric": "loss", "split": "val", "mode": "min", "status": "missing", "improved": False}
    assert MonitorRecord.from_state(saved) == SELECTION


def test_monitor_spec_is_positional_and_writes_mode_only_when_set():
    spec = MonitorSpec("f1", "train", "max", 0.01)
    assert spec == MonitorSpec(metric="f1", split="train", mode="max", min_delta=0.01)
    assert "mode" not in MonitorSpec("loss").state() and spec.state()["mode"] == "max"
    assert MonitorSpec.from_state(spec.state()) == spec
    assert dataclasses.replace(spec, split="val").split == "val"
    with pytest.raises(ParamsError, match="MonitorSpec.split"):
        dataclasses.replace(spec, split="test")


# ------------------------------------------------------------------------ hooks made afresh
# The converter makes (and caches) a class's hooks on its first use, so these tests define their
# classes inside the test: the rules are then applied by this call, not by an earlier test's.
def fresh_outer() -> type:
    """A new pair of classes, like ``Outer``/``Inner`` (made with real types: annotations here are strings)."""

    def check_part(self: Any) -> None:
        if self.size == 13:
            raise ParamsError("Part.size", "is 13 @ unlucky")
        check_int("Part.size", self.size, minimum=1)

    options = {"bases": (Stateful,), "frozen": True, "kw_only": True, "slots": True}
    part = dataclasses.make_dataclass("Part", [
        ("size", int), ("extra", tuple[int, ...], dataclasses.field(default=(), metadata=OMIT)),
    ], namespace={"__post_init__": check_part}, **options)
    return dataclasses.make_dataclass("Whole", [
        ("name", str), ("part", part),
        ("shipped_later", int | None, dataclasses.field(default=None, metadata=OMIT)),
        ("loader", object, dataclasses.field(default=None, metadata=RUNTIME)),
    ], **options)


def test_fresh_hooks_omit_runtime_fields_and_omit_defaults_only_while_default():
    whole = fresh_outer()
    obj = whole.from_state({"name": "a", "part": {"size": 2, "extra": [3]}, "shipped_later": 1})
    assert obj.state() == {"name": "a", "part": {"size": 2, "extra": [3]}, "shipped_later": 1}
    assert dataclasses.replace(obj, loader=[1], shipped_later=None).state() == {"name": "a", "part": {"size": 2, "extra": [3]}}


def test_fresh_hooks_refuse_a_runtime_or_unknown_key_and_list_the_known_fields():
    whole = fresh_outer()
    with pytest.raises(ParamsError) as info:
        whole.from_state({"name": "a", "part": {"size": 2}, "loader": [1], "colour": "red"})
    assert str(info.value) == ("Whole: unknown field 'colour', 'loader' in saved state "
                               "(known: name, part, shipped_later)")


def test_a_message_holding_the_path_separator_keeps_its_path():
    with pytest.raises(ParamsError) as info:
        fresh_outer().from_state({"name": "a", "part": {"size": 13}})
    assert info.value.path == "Whole.part" and str(info.value) == "Whole.part: Part.size: is 13 @ unlucky"


def test_a_wrong_container_names_the_type_it_wants():
    with pytest.raises(ParamsError, match=r"^Inner\.extra: invalid value for type, expected tuple$"):
        Inner.from_state({"size": 2, "extra": 5})


def test_refusals_name_the_class_as_their_path():
    with pytest.raises(ParamsError, match=r"^Outer: a saved state must be a mapping, got list \['name', 'a'\]$") as info:
        Outer.from_state(["name", "a"])  # type: ignore[arg-type]
    assert info.value.path == "Outer"
    with pytest.raises(ParamsError) as info:
        Outer.from_state({"inner": {"size": 2}, "bogus": 1})
    assert info.value.path == "Outer"
    assert str(info.value) == ("Outer: Outer.name: required field missing; Outer: unknown field 'bogus' in saved "
                               "state (known: name, inner, shipped_later, always)")
