"""``LocalCollective``: one process as a group of one (world size 1).

Every reduction returns its input, every gather a one-element list, every barrier returns at
once: a single-process run goes through the same pipeline as a data-parallel one, and every
agreement is a no-op that costs nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nnx_adapters.collective.base import Traffic


class LocalCollective:
    """The ``Collective`` port for one process: rank 0 of 1, the writer."""

    rank = 0
    world_size = 1
    is_writer = True
    writer_rank = 0
    backend = "local"

    def __init__(self) -> None:
        self.traffic = Traffic()

    def all_reduce_sum(self, values: Sequence[float]) -> list[float]:
        """``values`` as floats (the sum over one rank)."""
        return [float(v) for v in values]

    def all_gather(self, obj: Any) -> list[Any]:
        """``[obj]``."""
        return [obj]

    def broadcast(self, obj: Any, src: int) -> Any:
        """``obj`` (the only rank is the source)."""
        return obj

    def barrier(self, timeout: float | None = None) -> None:
        """Nothing to wait for."""

    def close(self) -> None:
        """Nothing to release."""
