"""The ``Collective`` port between threads of one process: N simulated ranks, no torch.

``run_ranks(n, fn)`` runs ``fn(collective)`` on ``n`` threads meeting at a ``ThreadHub``, so the
agreement rules of ``nnx_core.agreement`` are exercised without processes or torch. Sums are
added in rank order, like every real adapter, so every rank sees the same bits.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from nnx_adapters.collective.base import Traffic


# ------------------------------------------------------------------------------- threads
class ThreadHub:
    """The meeting point of N simulated ranks: each exchange puts every rank's value in a slot."""

    def __init__(self, world_size: int, *, writer_rank: int = 0, timeout: float = 10.0) -> None:
        self.world_size = world_size
        self.writer_rank = writer_rank
        self.timeout = timeout
        self._barrier = threading.Barrier(world_size)
        self._slots: list[Any] = [None] * world_size

    def exchange(self, rank: int, value: Any, timeout: float | None = None) -> list[Any]:
        wait = self.timeout if timeout is None else timeout
        try:
            self._slots[rank] = value
            self._barrier.wait(wait)
            out = list(self._slots)
            self._barrier.wait(wait)  # nobody overwrites a slot before everyone has read it
        except threading.BrokenBarrierError as exc:
            self._barrier.abort()
            raise RuntimeError(f"rank {rank}: a rank did not arrive within {wait} s") from exc
        return out

    def collective(self, rank: int) -> ThreadCollective:
        return ThreadCollective(self, rank)


class ThreadCollective:
    """The ``Collective`` port between threads (one per simulated rank)."""

    def __init__(self, hub: ThreadHub, rank: int) -> None:
        self.hub = hub
        self._rank = rank
        self.traffic = Traffic()

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def world_size(self) -> int:
        return self.hub.world_size

    @property
    def is_writer(self) -> bool:
        return self._rank == self.hub.writer_rank

    def all_reduce_sum(self, values: Sequence[float]) -> list[float]:
        rows = self.hub.exchange(self._rank, [float(v) for v in values])
        self.traffic.add("all_reduce", 8 * len(values))
        if any(len(r) != len(rows[0]) for r in rows):
            raise RuntimeError("all_reduce_sum: the ranks gave vectors of different lengths")
        out = [0.0] * len(rows[0])
        for row in rows:  # rank order: the same sum, bit for bit, on every rank
            out = [a + b for a, b in zip(out, row, strict=True)]
        return out

    def all_gather(self, obj: Any) -> list[Any]:
        self.traffic.add("all_gather", 0)
        return self.hub.exchange(self._rank, obj)

    def broadcast(self, obj: Any, src: int) -> Any:
        self.traffic.add("broadcast", 0)
        return self.hub.exchange(self._rank, obj)[src]

    def barrier(self, timeout: float | None = None) -> None:
        self.hub.exchange(self._rank, None, timeout)


def run_ranks(world_size: int, fn: Callable[[ThreadCollective], Any], *, timeout: float = 10.0) -> list[Any]:
    """Run ``fn(collective)`` on ``world_size`` threads; each rank's result or raised exception."""
    hub = ThreadHub(world_size, timeout=timeout)
    results: list[Any] = [None] * world_size

    def body(rank: int) -> None:
        try:
            results[rank] = fn(hub.collective(rank))
        except BaseException as exc:  # reported to the caller, rank by rank
            results[rank] = exc

    threads = [threading.Thread(target=body, args=(r,), daemon=True) for r in range(world_size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout * 4)
    return results
