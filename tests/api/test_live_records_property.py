"""``ctx.idps`` of an eager run (``LiveRecords``), driven by a state machine against its rule
(``nnx_api.training.context_views``): every read shows the history's records, then the records of
the epoch in progress; a reader's edit never changes the history, and a read after edits that
left the list another length (every edit here, except one that finds nothing to delete and so
changes nothing) shows exactly the history and the epoch so far again.

The oracle is a plain model of the two lists the session holds (the history's ``idps`` and the
records of the epoch in progress); batches, epoch ends, a history cut back (a rollback), reads
and a reader's edits come in any order.
"""

from __future__ import annotations

import itertools
import types

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule

from nnx_adapters.testing import contract_settings
from nnx_api.training.context_views import LiveRecords


class LiveRecordsMachine(RuleBasedStateMachine):
    @initialize()
    def start(self) -> None:
        self.history = types.SimpleNamespace(idps=[])  # the session's history
        self.epoch: list[object] = []  # the records of the epoch in progress
        self.live = LiveRecords(self.history, lambda: list(self.epoch))
        self.names = itertools.count()

    def record(self) -> str:
        return f"r{next(self.names)}"

    # what the session does
    @rule()
    def batch(self) -> None:
        self.epoch.append(self.record())

    @rule()
    def epoch_end(self) -> None:
        self.history.idps.extend(self.epoch)
        self.epoch.clear()

    @rule(keep=st.integers(min_value=0, max_value=6))
    def cut_back(self, keep: int) -> None:
        del self.history.idps[keep:]

    # what a reader does
    @rule()
    def read(self) -> None:
        before = list(self.history.idps)
        seen = list(self.live)
        assert self.history.idps == before  # reading never changes the history
        assert seen == self.history.idps + self.epoch
        assert self.live == seen and len(self.live) == len(seen)

    @rule(kind=st.sampled_from(["append", "extend", "insert", "delete", "clear"]), at=st.integers(0, 8))
    def edit(self, kind: str, at: int) -> None:
        """One edit of the list (it syncs first, as every edit does); indices past the end are as
        list's own slices and ``insert`` take them, so an edit never fails on the list's length."""
        before = list(self.history.idps)
        if kind == "append":
            self.live.append(self.record())
        elif kind == "extend":
            self.live.extend([self.record(), self.record()])
        elif kind == "insert":
            self.live.insert(at, self.record())
        elif kind == "delete":
            del self.live[at : at + 1]
        else:
            self.live.clear()
        assert self.history.idps == before  # an edit changes the list only, never the history


LiveRecordsMachine.TestCase.settings = contract_settings(examples=60, steps=30, deep_examples=600, deep_steps=60)
test_live_records_follow_the_session = LiveRecordsMachine.TestCase


def test_a_history_cut_back_and_grown_to_the_same_length_is_read_anew():
    """The machine's first find: a read, the history cut back to nothing and grown again by one
    epoch of as many records; the next read shows the new records, not the ones cut."""
    history, epoch = types.SimpleNamespace(idps=["r0"]), []
    live = LiveRecords(history, lambda: list(epoch))
    assert list(live) == ["r0"]
    history.idps[:] = ["r1"]
    assert list(live) == ["r1"]

