"""The shared-memory reducer's waiting rules, on a clock the test drives (no real waiting).

A rank waiting for a peer raises ``RuntimeError`` once ``timeout`` seconds of *its clock* have
passed without the peer (and not before), and raises at its next liveness check when the peer's
process is gone. The clock and the naps are a fake: the checks hold on any machine, however
loaded. The same rules on real processes: ``tests/integration/test_shm_collective.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from nnx_adapters.collective import shm
from nnx_adapters.collective.shm import SharedMemoryReducer


class FakeTime:
    """``time.monotonic`` that only moves when the reducer naps, by the nap's length."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.naps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.naps.append(seconds)
        self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeTime:
    fake = FakeTime()
    monkeypatch.setattr(shm, "time", fake)
    return fake


def lonely_rank(pids: list[int], timeout: float) -> SharedMemoryReducer:
    """Rank 0 of a two-rank segment whose rank 1 never arrives."""
    path, token = SharedMemoryReducer.create_file(2)
    try:
        return SharedMemoryReducer.attach(path, token, 0, 2, pids, timeout)
    finally:
        os.unlink(path)


def test_an_absent_live_peer_is_waited_for_exactly_the_timeout(clock: FakeTime) -> None:
    reducer = lonely_rank([os.getpid(), os.getpid()], timeout=3.0)  # the "peer" is this live process
    start = clock.now
    with pytest.raises(RuntimeError, match=r"rank\(s\) 1 did not arrive within 3 s"):
        reducer.all_reduce_sum([1.0, 2.0])
    waited = clock.now - start
    assert 3.0 <= waited < 3.0 + max(clock.naps)  # it gave up at the first check past the deadline
    assert max(clock.naps) <= shm._LONGEST_NAP
    reducer.close()


def test_a_dead_peer_is_noticed_at_the_next_liveness_check(clock: FakeTime) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait(timeout=60)  # reaped: its pid names no process now
    reducer = lonely_rank([os.getpid(), dead.pid], timeout=1e6)
    start = clock.now
    with pytest.raises(RuntimeError, match=rf"rank 1 \(pid {dead.pid}\) died"):
        reducer.all_reduce_sum([1.0])
    assert clock.now - start < 2 * shm._LIVENESS_EVERY  # the first liveness check, not the timeout
    reducer.close()
