"""The ``Collective`` port over ``torch.distributed``, and a threaded one that simulates N ranks.

``TorchCollective`` speaks to the process group torchrun started (gloo on CPU, nccl with one GPU
per rank). Numbers travel as one float64 tensor per call (on the GPU for nccl); objects through
``all_gather_object`` / ``broadcast_object_list``. It counts its calls and bytes (``traffic``)
so the per-step cost can be reported. ``agree`` is the core's rule (``nnx_core.agreement``).

``ThreadCollective`` runs the same port between threads of one process (``run_ranks``), so the
agreement rules are exercised without processes or torch.

``sufficient_statistics`` flattens an ``EpochAccumulator`` (loss sums and counts, confusion
matrices, correct counts, the built-in metrics' sums) into one float list and writes a reduced
list back: records are global because the ranks' statistics are *added*, never gathered.
"""

from __future__ import annotations

import datetime
import threading
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import torch
import torch.distributed as dist

from nnx_adapters.torch_metrics import (
    AccuracyMetric,
    BrierMetric,
    Confusion,
    EpochAccumulator,
    F1Metric,
    LabelCounts,
    MAEMetric,
    NLLMetric,
    _Sum,
)
from nnx_core import agreement


@attrs.define
class Traffic:
    """Collective calls and payload bytes, by kind (what the bench reports per step)."""

    calls: dict[str, int] = attrs.field(factory=dict)
    bytes: dict[str, int] = attrs.field(factory=dict)

    def add(self, kind: str, nbytes: int) -> None:
        self.calls[kind] = self.calls.get(kind, 0) + 1
        self.bytes[kind] = self.bytes.get(kind, 0) + int(nbytes)

    def reset(self) -> None:
        self.calls.clear()
        self.bytes.clear()


class TorchCollective:
    """The ``Collective`` port over the default ``torch.distributed`` process group."""

    def __init__(self, writer_rank: int = 0, device: torch.device | None = None) -> None:
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
        """Element-wise Σ over the ranks (float64; identical bits on every rank)."""
        tensor = torch.tensor(list(values), dtype=torch.float64, device=self.device)
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

    def agree(self, ok: bool, reason: str = "") -> tuple[bool, str]:
        return agreement.agree(self, ok, reason)

    def barrier(self, timeout: float | None = None) -> None:
        """Wait for every rank; a rank missing after ``timeout`` seconds raises RuntimeError.

        Gloo bounds the wait itself (``monitored_barrier``); NCCL is bounded by the group's timeout.
        """
        if self.backend == "gloo":
            delta = None if timeout is None else datetime.timedelta(seconds=timeout)
            dist.monitored_barrier(timeout=delta, wait_all_ranks=True)
        else:
            dist.barrier(device_ids=[self.device.index] if self.device.type == "cuda" else None)
        self.traffic.add("barrier", 0)


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

    def agree(self, ok: bool, reason: str = "") -> tuple[bool, str]:
        return agreement.agree(self, ok, reason)

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


# ------------------------------------------------------------------------------- statistics
class _Slot:
    """One mergeable number or tensor held by an accumulator attribute."""

    __slots__ = ("owner", "attr", "numel", "shape")

    def __init__(self, owner: Any, attr: str, numel: int, shape: tuple[int, ...]) -> None:
        self.owner, self.attr, self.numel, self.shape = owner, attr, numel, shape

    def read(self) -> list[float]:
        value = getattr(self.owner, self.attr)
        if value is None:
            return [0.0] * self.numel
        if isinstance(value, torch.Tensor):
            flat = value.detach().reshape(-1).to(torch.float64).cpu().tolist()
            if len(flat) == self.numel:
                return flat
            if len(flat) == 1:
                return flat * self.numel
            raise ValueError(f"{type(self.owner).__name__}.{self.attr} has {len(flat)} values, expected {self.numel}")
        return [float(value)] * self.numel  # a number not yet materialised (0 before the first batch)

    def write(self, values: Sequence[float], device: torch.device) -> None:
        tensor = torch.tensor(list(values), dtype=torch.float64, device=device)
        setattr(self.owner, self.attr, tensor.reshape(self.shape) if self.shape else tensor.reshape(()))


class UnmergeableMetricError(TypeError):
    """A registered metric accumulator whose state NNx cannot add across ranks."""


def _metric_slots(acc: Any, width: int) -> list[_Slot]:
    if isinstance(acc, (AccuracyMetric,)):
        return _sum_slots(acc.hits)
    if isinstance(acc, (NLLMetric, BrierMetric, MAEMetric)):  # MSEMetric is a MAEMetric
        return _sum_slots(acc.sum)
    if isinstance(acc, F1Metric):
        return [
            *_confusion_slots(acc.confusion, width),
            *_label_slots(acc.labels, width),
            _Slot(acc, "indicator", 1, ()),
        ]
    custom = getattr(acc, "sufficient_statistics", None)
    if callable(custom):
        return [_Slot(owner, attr, numel, tuple(shape)) for owner, attr, numel, shape in custom()]
    raise UnmergeableMetricError(
        f"metric accumulator {type(acc).__name__} cannot be added across ranks; give it a method "
        "sufficient_statistics() -> [(owner, attribute, numel, shape), ...] naming its sums"
    )


def _sum_slots(s: _Sum) -> list[_Slot]:
    return [_Slot(s, "total", 1, ()), _Slot(s, "count", 1, ())]


def _confusion_slots(c: Confusion, width: int) -> list[_Slot]:
    n = c.n or width
    c.n = n
    return [_Slot(c, "matrix", n * n, (n * n,))]


def _label_slots(labels: LabelCounts, width: int) -> list[_Slot]:
    return [_Slot(labels, name, width, (width,)) for name in ("tp", "fp", "fn")]


def statistic_slots(acc: EpochAccumulator, width: int) -> list[_Slot]:
    """Every mergeable number of an accumulator, in a fixed order (the same on every rank)."""
    slots = [*_sum_slots(acc.loss)]
    if acc.confusion is not None:
        slots += _confusion_slots(acc.confusion, width)
    slots += [_Slot(acc, "correct", 1, ()), _Slot(acc, "rows", 1, ())]
    for _, _, metric in acc.metrics:
        slots += _metric_slots(metric, width)
    return slots


class SufficientStatistics:
    """Read accumulators' sums as one float list; write the reduced list back into them."""

    def __init__(self, accumulators: Sequence[EpochAccumulator], width: int, device: torch.device) -> None:
        self.slots = [slot for acc in accumulators for slot in statistic_slots(acc, width)]
        self.device = device

    def values(self) -> list[float]:
        out: list[float] = []
        for slot in self.slots:
            out += slot.read()
        return out

    def load(self, values: Sequence[float]) -> None:
        i = 0
        for slot in self.slots:
            chunk = values[i : i + slot.numel]
            i += slot.numel
            if slot.attr == "indicator":
                slot.owner.indicator = bool(chunk[0])
            else:
                slot.write(chunk, self.device)


__all__ = [
    "SufficientStatistics",
    "ThreadCollective",
    "ThreadHub",
    "TorchCollective",
    "Traffic",
    "UnmergeableMetricError",
    "run_ranks",
    "statistic_slots",
]
