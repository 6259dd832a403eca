"""Eager history (``nnx_core.eager_history``): ``idps.csv`` rendered from records and parsed back, and the
coverage/continuity checks of a committed history. Oracles: the module docstrings and REFERENCE's
``idps.csv`` (flattened dotted columns, empty cells for unset fields, one line per record)."""

from __future__ import annotations

import pytest

from nnx_core.eager_history import EagerHistory, continuity_problems, coverage_problems, epoch_rows, parse_history
from nnx_core.errors import CorruptRunError
from nnx_core.records import EvaluationDataPoint, IterationDataPoint, MonitorRecord


def idp(i: int, epoch: int, batch: int, **kw) -> IterationDataPoint:
    return IterationDataPoint(iter_idx=i, epoch_idx=epoch, batch_idx=batch, lr=0.5,
                              train_edp=EvaluationDataPoint(loss=1.0 + i), **kw)


def decision(improved: bool) -> MonitorRecord:
    return MonitorRecord(metric="loss", split="val", mode="min", value=0.25, status="ok", improved=improved)


EPOCH0 = [idp(0, 0, 0), idp(1, 0, 1, val_edp=EvaluationDataPoint(error=0.5, count=4), selection=decision(True),
                                  update_count=2)]
EPOCH1 = [idp(2, 1, 0), idp(3, 1, 1, val_edp=EvaluationDataPoint(error=0.75, count=4), selection=decision(False),
                                  train_summary=EvaluationDataPoint(loss=2.0, extra={"auc": 0.5}))]


def test_a_history_reads_back_as_the_records_it_was_rendered_from():
    history = EagerHistory(EPOCH0)
    assert history.idps == EPOCH0
    assert parse_history(history.render()) == EPOCH0
    assert type(parse_history(history.render())[1].val_edp.count) is int  # an int column, not 4.0
    history.extend(EPOCH1)  # epoch 1 adds train_summary columns: every row is rendered again
    assert parse_history(history.render()) == EPOCH0 + EPOCH1
    history.extend([idp(4, 2, 0)])  # no new column: only the new row is rendered
    assert parse_history(history.render()) == [*EPOCH0, *EPOCH1, idp(4, 2, 0)]


def test_the_csv_has_one_header_line_with_each_column_once_and_one_line_per_record():
    history = EagerHistory(EPOCH0)
    history.extend(EPOCH1)
    history.extend([idp(4, 2, 0)])
    text = history.render().decode("utf-8")
    lines = text.split("\n")
    assert "\r" not in text and lines[-1] == "" and len(lines) == 1 + 5 + 1
    header = lines[0].split(",")
    assert len(header) == len(set(header)) and header[:5] == ["iter_idx", "epoch_idx", "batch_idx", "lr", "train_edp.loss"]
    assert {"val_edp.count", "selection.improved", "train_summary.extra.auc", "update_count"} <= set(header)
    assert lines[2].split(",")[header.index("selection.improved")] == "true"
    assert lines[4].split(",")[header.index("selection.improved")] == "false"
    assert lines[1].split(",")[header.index("val_edp.error")] == ""  # validation on an epoch's last row only


def test_truncating_to_an_epoch_drops_the_later_records_and_the_file_follows():
    history = EagerHistory(EPOCH0 + EPOCH1)
    history.render()
    history.truncate_to_epoch(0)
    assert history.idps == EPOCH0 and parse_history(history.render()) == EPOCH0
    history.extend(EPOCH1[:1])
    assert parse_history(history.render()) == EPOCH0 + EPOCH1[:1]
    history.truncate_to_epoch(None)
    assert history.idps == [] and parse_history(history.render()) == []


def test_an_empty_file_is_no_records():
    assert parse_history(b"") == []


def test_an_unreadable_history_is_refused_at_its_line():
    good = EagerHistory(EPOCH0).render().decode("utf-8").split("\n")
    with pytest.raises(CorruptRunError, match="^idps.csv is unreadable: "):
        parse_history(b"\xff\xfe")
    with pytest.raises(CorruptRunError, match="^idps.csv line 2 has 1 cells, the header has "):
        parse_history("\n".join([good[0], "0", good[2]]).encode())
    bad = good[1].replace("0,0,0", "x,0,0", 1)
    with pytest.raises(CorruptRunError, match="^idps.csv line 3 is not a valid record: "):
        parse_history("\n".join([good[0], good[2], bad]).encode())


def test_epoch_rows_are_each_epochs_last_record():
    assert epoch_rows(EPOCH0 + EPOCH1) == {0: EPOCH0[1], 1: EPOCH1[1]}


def test_coverage_needs_lasts_epoch_and_every_epoch_from_the_first_up_to_it():
    assert coverage_problems([0, 1, 2], 2, "idps.csv") == []
    assert coverage_problems([0, 1], 2, "idps.csv") == ["idps.csv has no records for LAST's epoch 2"]
    assert coverage_problems([], 0, "the journal", "rows") == ["the journal has no rows for LAST's epoch 0"]
    assert coverage_problems([3, 5, 7], 7, "idps.csv") == ["idps.csv misses committed epoch(s) [4, 6]"]
    assert coverage_problems([2, 3], 3, "idps.csv") == []  # a continuation's history starts later


def test_continuity_reports_each_kind_of_problem_once_at_its_first_record():
    assert continuity_problems(EPOCH0 + EPOCH1, "idps.csv") == []
    jumps = [idp(0, 0, 0), idp(2, 0, 1), idp(5, 0, 2)]
    assert continuity_problems(jumps, "h") == ["h's iter_idx jumps to 2 at record 1 (expected 1)"]
    back = [idp(0, 2, 0), idp(1, 1, 0), idp(2, 0, 0)]
    assert continuity_problems(back, "h") == ["h goes back from epoch 2 to 1 at iter_idx 1"]
    batches = [idp(0, 0, 1), idp(1, 0, 3), idp(2, 1, 1)]
    assert continuity_problems(batches, "h") == ["h's epoch 0 has batch_idx 1 at iter_idx 0 (expected 0)"]


def test_a_records_kind_and_status_come_back_as_text_and_a_metric_of_that_name_as_a_number():
    edp = EvaluationDataPoint(loss=0.5, count=4, kind="regression", status="ok", metrics={"kind": 2.0})
    idp = IterationDataPoint(lr=0.1, iter_idx=0, epoch_idx=0, batch_idx=0, train_edp=edp)
    (back,) = parse_history(EagerHistory([idp]).render())
    assert back.train_edp.kind == "regression" and back.train_edp.status == "ok"
    assert back.train_edp.metrics["kind"] == 2.0 and back == idp


def test_inside_parsed_once_the_same_bytes_are_parsed_once(monkeypatch):
    """A resume reads the history in admission and again in NNRun.load: inside ``parsed_once``
    the second read returns the same records without parsing; outside it, every call parses."""
    from nnx_core import eager_history

    calls: list[int] = []
    real = eager_history._parse
    monkeypatch.setattr(eager_history, "_parse", lambda data: calls.append(len(data)) or real(data))
    data = EagerHistory(EPOCH0 + EPOCH1).render()
    with eager_history.parsed_once():
        first, second = parse_history(data), parse_history(bytes(data))  # equal bytes, another object
        first.append(idp(9, 9, 9))  # each caller gets its own list
        assert second == EPOCH0 + EPOCH1 and parse_history(data) == EPOCH0 + EPOCH1
        assert len(calls) == 1
        parse_history(EagerHistory(EPOCH0).render())  # other bytes: parsed
        assert len(calls) == 2
    parse_history(data)
    parse_history(data)
    assert len(calls) == 4  # nothing kept after the block
