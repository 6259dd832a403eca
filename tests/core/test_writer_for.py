"""Where a data-parallel run continues when each node has its own runs root (``writer_for``), and
how an attempt record counts restarts (``AttemptRecord.follow``).

The oracle for ``writer_for`` is the rule as the multi-node issue states it, written out here
independently: never start over while a root holds a committed LAST; the newest committed epoch
wins, and in it the most committed updates; different copies of that commit are refused; otherwise the configured writer keeps writing
when it holds the newest copy.
"""

from __future__ import annotations

import os

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nnx_core import admission as adm
from nnx_core.agreement import Holding, writer_for
from nnx_core.errors import DivergedCopiesError, ResumeMismatchError

EXAMPLES = 500 if os.environ.get("NNX_DEEP") == "1" else 60
EMPTY = Holding("node-a:/runs")


def held(epoch: int, digest: str = "d1", place: str = "node-b:/runs", updates: int = 0) -> Holding:
    return Holding(place, epoch, digest, updates=updates)


def test_nobody_holds_the_run_the_configured_writer_starts_it():
    assert writer_for([EMPTY, EMPTY, EMPTY], preferred=2) == 2


def test_the_writer_moves_to_the_only_root_holding_the_run():
    assert writer_for([EMPTY, held(3)], preferred=0) == 1
    assert writer_for([EMPTY, held(3), held(3)], preferred=0) == 1  # the lowest holder


def test_shared_storage_keeps_the_configured_writer():
    same = held(5, place="shared:/runs")
    assert writer_for([same, same, same], preferred=1) == 1


def test_the_newest_committed_epoch_wins_over_an_older_copy():
    assert writer_for([held(2, "old", "a:/r"), held(4, "new", "b:/r")], preferred=0) == 1
    assert writer_for([held(4, "new", "a:/r"), held(2, "old", "b:/r")], preferred=1) == 0


def test_inside_one_epoch_the_copy_with_more_committed_updates_wins():
    """A commit inside an epoch (``commit_every``) and a later one, or the epoch's end, name the
    same epoch: the one with more committed updates is the newer."""
    inside, further, end = (Holding(p, 3, d, updates=u) for p, d, u in (("a:/r", "x", 40), ("b:/r", "y", 44), ("c:/r", "z", 48)))
    assert writer_for([inside, further], preferred=0) == 1
    assert writer_for([end, further, inside], preferred=2) == 0
    assert writer_for([Holding("a:/r", 4, "w", updates=41), end], preferred=1) == 0  # a later epoch first


def test_different_copies_of_one_epoch_are_refused_naming_both_places():
    with pytest.raises(DivergedCopiesError) as caught:
        writer_for([held(3, "x", "node-a:/runs"), EMPTY, held(3, "y", "node-b:/runs")], preferred=0)
    message = str(caught.value)
    assert "node-a:/runs (rank 0)" in message and "node-b:/runs (rank 2)" in message and "epoch 3" in message
    assert isinstance(caught.value, ResumeMismatchError) and isinstance(caught.value, ValueError)


def test_an_unreadable_last_is_never_passed_over():
    broken = Holding("b:/r", unreadable=True)
    assert writer_for([held(9), broken], preferred=0) == 1  # its writer refuses it, as one process does
    assert writer_for([broken, broken], preferred=1) == 1


holdings_strategy = st.lists(
    st.one_of(
        st.just(EMPTY),
        st.builds(held, st.integers(0, 4), st.sampled_from(["d1", "d2"]), st.sampled_from(["a:/r", "b:/r"]),
                  st.integers(0, 2)),
    ),
    min_size=1, max_size=6,
)


@settings(max_examples=EXAMPLES, deadline=None)
@given(holdings_strategy, st.data())
def test_the_writer_always_holds_the_newest_copy(holdings, data):
    preferred = data.draw(st.integers(0, len(holdings) - 1))
    commits = [(h.epoch, h.updates) for h in holdings if h.epoch is not None]  # the latest epoch, then updates
    if not commits:
        assert writer_for(holdings, preferred) == preferred
        return
    newest = [r for r, h in enumerate(holdings) if h.epoch is not None and (h.epoch, h.updates) == max(commits)]
    if len({holdings[r].digest for r in newest}) > 1:
        with pytest.raises(DivergedCopiesError):
            writer_for(holdings, preferred)
        return
    writer = writer_for(holdings, preferred)
    assert writer in newest
    assert writer == (preferred if preferred in newest else min(newest))


def record(**kw):
    return adm.AttemptRecord(attempt_id=kw.pop("attempt_id", "new"), run_id="r" * 64, started_at="t1", **kw)


def test_a_continuation_counts_on_and_lists_the_earlier_attempts():
    first = record(attempt_id="a1")
    first.status, first.last_committed_epoch = adm.COMPLETED, 1
    second = record(attempt_id="a2")
    second.follow(_doc(first))
    assert second.number == 2
    assert [(e["attempt_id"], e["number"], e["status"], e["last_committed_epoch"]) for e in second.earlier] == [
        ("a1", 1, "completed", 1)
    ]
    third = record(attempt_id="a3")
    third.follow(_doc(second))  # a2 was still "running": killed, so kept as interrupted
    assert third.number == 3
    assert [(e["attempt_id"], e["number"], e["status"]) for e in third.earlier] == [
        ("a1", 1, "completed"), ("a2", 2, "interrupted")
    ]


def test_a_record_written_before_attempts_were_counted_is_attempt_one():
    old = {"attempt_id": "a0", "run_id": "r" * 64, "status": "failed", "started_at": "t0"}
    follower = record()
    follower.follow(old)
    assert follower.number == 2 and follower.earlier[0]["number"] == 1 and follower.earlier[0]["status"] == "failed"
    unread = record()
    unread.follow(None)
    assert unread.number == 1 and unread.earlier == []


def test_the_list_of_earlier_attempts_is_bounded_but_the_count_goes_on():
    previous = {"attempt_id": "p", "status": "completed", "number": 500,
                "earlier": [{"attempt_id": str(i), "number": i} for i in range(1, 500)]}
    follower = record()
    follower.follow(previous)
    assert follower.number == 501 and len(follower.earlier) == adm.EARLIER_KEPT
    assert follower.earlier[-1]["attempt_id"] == "p"


def _doc(attempt: adm.AttemptRecord) -> dict:
    return attrs.asdict(attempt)
