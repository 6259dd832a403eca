"""``ResumeStatus`` (``nnx_core.resume``): how a session started, as attributes and as the mapping
metadata.yaml holds. Oracle: the module docstring — mode is one of fresh / stateful / weights_only,
an unknown epoch is left out of the record, older records naming ``source_run`` still read, and the
status is truthy only when the session resumed."""

from __future__ import annotations

import pytest

from nnx_core.errors import ParamsError
from nnx_core.resume import MODES, ResumeStatus

STATEFUL = ResumeStatus(mode="stateful", source_run_id="ab" * 16, source_checkpoint="last", source_epoch=3,
                        restored_components=["ema"], fresh_components=("probe",))


def test_a_default_status_is_fresh_and_falsy():
    status = ResumeStatus()
    assert status.mode == "fresh" and not status
    assert status.state() == {"mode": "fresh", "source_run_id": None, "source_checkpoint": None,
                              "restored_components": [], "fresh_components": []}


def test_only_the_three_modes_are_accepted():
    assert MODES == ("fresh", "stateful", "weights_only")
    with pytest.raises(ParamsError, match="ResumeStatus.mode") as info:
        ResumeStatus(mode="auto")
    assert info.value.path == "ResumeStatus.mode"


@pytest.mark.parametrize("mode", ["stateful", "weights_only"])
def test_a_resumed_status_is_truthy(mode):
    assert ResumeStatus(mode=mode)


def test_the_record_holds_every_field_and_the_epoch_only_when_known():
    assert STATEFUL.state() == {"mode": "stateful", "source_run_id": "ab" * 16, "source_checkpoint": "last",
                                "restored_components": ["ema"], "fresh_components": ["probe"], "source_epoch": 3}
    assert STATEFUL.restored_components == ("ema",) and STATEFUL.fresh_components == ("probe",)
    assert "source_epoch" not in ResumeStatus(mode="weights_only", source_epoch=None).state()
    assert ResumeStatus(mode="stateful", source_epoch=0).state()["source_epoch"] == 0


def test_it_reads_as_the_mapping_metadata_yaml_holds():
    assert STATEFUL["source_epoch"] == 3 and STATEFUL["mode"] == "stateful"
    assert dict(STATEFUL) == STATEFUL.state()
    assert list(STATEFUL) == list(STATEFUL.state()) and len(STATEFUL) == 6
    assert len(ResumeStatus()) == 5
    with pytest.raises(KeyError):
        ResumeStatus()["source_epoch"]


def test_from_state_round_trips_and_reads_older_records():
    assert ResumeStatus.from_state(STATEFUL.state()) == STATEFUL
    assert ResumeStatus.from_state({}) == ResumeStatus()
    older = ResumeStatus.from_state({"mode": "weights_only", "source_run": "cd" * 16})
    assert older.source_run_id == "cd" * 16 and older.mode == "weights_only"
    both = ResumeStatus.from_state({"source_run_id": "new", "source_run": "old"})
    assert both.source_run_id == "new"


def test_coerce_takes_a_status_a_mapping_or_none():
    assert ResumeStatus.coerce(None) is None
    assert ResumeStatus.coerce(STATEFUL) is STATEFUL
    assert ResumeStatus.coerce(STATEFUL.state()) == STATEFUL
