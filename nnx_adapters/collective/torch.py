"""The ``Collective`` port over ``torch.distributed`` (gloo on CPU, nccl with one GPU per rank).

``TorchCollective`` speaks to the process group torchrun started. Numbers travel as one float64
tensor per call (on the GPU for nccl); objects through ``all_gather_object`` /
``broadcast_object_list``. It counts its calls and bytes (``traffic``) so the per-step cost can
be reported (docs/distributed.md). ``nccl_barrier`` is the NCCL barrier whose host wait has a
bound (``barrier(timeout)`` here, ``nnx.distributed.shutdown``).
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Sequence
from typing import Any, Protocol

import torch
import torch.distributed as dist

from nnx_adapters.collective import shm
from nnx_adapters.collective.base import Traffic


class Rider(Protocol):
    """Numbers that ride along with every all-reduce of a ``TorchCollective`` (``rider``)."""

    def local(self) -> list[float]: ...
    def note(self, sums: Sequence[float]) -> None: ...


POLL_SECONDS = 0.005  # how often a bounded NCCL barrier looks at its work when torch's wait() did not block


def nccl_barrier(device: torch.device, timeout: float | None) -> None:
    """An NCCL barrier on ``device`` (a CUDA device) that waits at most ``timeout`` seconds on the host.

    NCCL runs a barrier as a kernel on the GPU; without a bound, a rank that never arrives keeps the
    others waiting until the group's watchdog (its timeout) tears the process down. The barrier is
    started with ``async_op=True`` and its work waited for with ``Work.wait(timeout)``: in torch
    2.13 that blocks the host until the barrier completes or the timeout passes (then it aborts the
    communicator and raises). Older torch only orders the streams there, so the host then polls
    ``Work.is_completed()`` (a query of the work's CUDA event) until the same deadline. A rank
    missing at the deadline raises ``RuntimeError``. ``timeout`` None: the blocking barrier,
    bounded by the group's timeout only.
    """
    device_ids = [device.index] if device.index is not None else None
    if timeout is None:
        dist.barrier(device_ids=device_ids)
        return
    deadline = time.monotonic() + timeout
    work = dist.barrier(async_op=True, device_ids=device_ids)
    work.wait(timeout=datetime.timedelta(seconds=timeout))
    while not work.is_completed():
        if time.monotonic() >= deadline:
            raise RuntimeError(f"nccl barrier: not every rank arrived within {timeout:g} s")
        time.sleep(POLL_SECONDS)


class TorchCollective:
    """The ``Collective`` port over the default ``torch.distributed`` process group.

    Construction is collective (every rank constructs it at the same point). Every call goes
    through the process group, unless ``shared_memory=True`` (default: ``NNX_SHM_COLLECTIVE=1``)
    opts in to the shared-memory fast path for small all-reduces (``nnx_adapters.collective.shm``;
    ``fast_path`` tells whether it is on, on every rank alike); ``close()`` releases it. Give
    ``shared_memory`` alike on every rank: setting it up is itself a collective.
    """

    def __init__(
        self, writer_rank: int = 0, device: torch.device | None = None, *, shared_memory: bool | None = None
    ) -> None:
        if not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError("no torch.distributed process group; call nnx.distributed.init_process_group() first")
        self._rank = dist.get_rank()
        self._world = dist.get_world_size()
        self.backend = str(dist.get_backend())
        if not 0 <= writer_rank < self._world:
            raise ValueError(f"writer_rank {writer_rank} is not a rank of this {self._world}-rank group")
        self.writer_rank = writer_rank
        if device is None:
            device = torch.device("cuda", torch.cuda.current_device()) if self.backend == "nccl" else torch.device("cpu")
        self.device = device
        self.traffic = Traffic()
        # numbers that travel with every all-reduce (set alike on every rank): ``local()`` is added
        # to each call's values, ``note(sums)`` gets their sums (nnx_api.training.partial.CommitPoints)
        self.rider: Rider | None = None
        self.fast_path_calls = 0  # all-reduces that went through shared memory
        if shared_memory is None:
            shared_memory = shm.shm_requested()
        self._shm: shm.SharedMemoryReducer | None = (
            shm.setup(self._rank, self._world, device, self.traffic) if shared_memory and self._world > 1 else None
        )

    @property
    def fast_path(self) -> bool:
        """Whether small all-reduces go through shared memory (the same answer on every rank)."""
        return self._shm is not None

    def close(self) -> None:
        """Release the shared-memory segment; later small all-reduces use the process group.

        Call it on every rank at the same point (where the collective's lifetime ends), or never
        use the collective again: a rank with the fast path closed does not meet one with it open.
        """
        if self._shm is not None:
            self._shm.close()
            self._shm = None

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def world_size(self) -> int:
        return self._world

    @property
    def is_writer(self) -> bool:
        return self._rank == self.writer_rank

    def all_reduce_sum(self, values: Sequence[float]) -> list[float]:
        """Element-wise Σ over the ranks (float64; identical bits on every rank).

        At most ``SHM_CAPACITY`` values go through shared memory when ``fast_path`` is on (added
        in rank order); longer vectors, or every vector without the fast path, through the group.
        With the fast path, ranks giving vectors of different lengths raise ``RuntimeError`` at once.
        A ``rider``'s numbers travel at the end of the same vector (its ``note`` gets their sums).
        """
        values, rider = list(values), self.rider
        riding = rider.local() if rider is not None else []
        out = self._sum(values + riding)
        if rider is not None:
            rider.note(out[len(values):])
            del out[len(values):]
        return out

    def _sum(self, values: list[float]) -> list[float]:
        if self._shm is not None:
            if len(values) <= shm.SHM_CAPACITY:
                out = self._shm.all_reduce_sum(values)
                self.fast_path_calls += 1
                self.traffic.add("all_reduce", 8 * len(values))
                return out
            self._shm.check_length(len(values))  # every rank agrees on the length before gloo
        tensor = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(tensor)
        self.traffic.add("all_reduce", tensor.numel() * 8)
        return tensor.tolist()

    def all_gather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj`` (pickled), in rank order."""
        out: list[Any] = [None] * self._world
        dist.all_gather_object(out, obj)
        self.traffic.add("all_gather", 0)
        return out

    def broadcast(self, obj: Any, src: int) -> Any:
        """``src``'s ``obj`` on every rank (pickled)."""
        box = [obj]
        dist.broadcast_object_list(box, src=src, device=self.device if self.backend == "nccl" else None)
        self.traffic.add("broadcast", 0)
        return box[0]

    def barrier(self, timeout: float | None = None) -> None:
        """Wait for every rank; a rank missing after ``timeout`` seconds raises RuntimeError.

        Gloo bounds the wait itself (``monitored_barrier``); NCCL through ``nccl_barrier`` (without
        ``timeout``, by the group's timeout).
        """
        if self.backend == "gloo":
            delta = None if timeout is None else datetime.timedelta(seconds=timeout)
            dist.monitored_barrier(timeout=delta, wait_all_ranks=True)
        elif self.device.type == "cuda":
            nccl_barrier(self.device, timeout)
        else:
            dist.barrier()
        self.traffic.add("barrier", 0)
