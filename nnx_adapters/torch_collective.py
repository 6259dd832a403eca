"""The ``Collective`` port over ``torch.distributed``, and a threaded one that simulates N ranks.

``TorchCollective`` speaks to the process group torchrun started (gloo on CPU, nccl with one GPU
per rank). Numbers travel as one float64 tensor per call (on the GPU for nccl); objects through
``all_gather_object`` / ``broadcast_object_list``. It counts its calls and bytes (``traffic``)
so the per-step cost can be reported. ``agree`` is the core's rule (``nnx_core.agreement``).

Small all-reduces (at most ``SHM_CAPACITY`` numbers: the per-microbatch agreement, the epoch's
step count, commit outcomes) take a shared-memory fast path (``SharedMemoryReducer``) when every
rank runs on this host, which single-node data parallelism guarantees: a process-group all-reduce
of 48 bytes costs 0.5–1 ms of thread wake-ups on gloo, the shared-memory one a few microseconds
plus the wait for the slowest rank. ``NNX_SHM_COLLECTIVE=0`` turns it off.

``ThreadCollective`` runs the same port between threads of one process (``run_ranks``), so the
agreement rules are exercised without processes or torch.

``sufficient_statistics`` flattens an ``EpochAccumulator`` (loss sums and counts, confusion
matrices, correct counts, the built-in metrics' sums) into one float list and writes a reduced
list back: records are global because the ranks' statistics are *added*, never gathered.
"""

from __future__ import annotations

import datetime
import mmap
import os
import platform
import secrets
import socket
import struct
import tempfile
import threading
import time
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

# ------------------------------------------------------------------------------- shared memory
SHM_ENV = "NNX_SHM_COLLECTIVE"  # "0" (or false/no/off) keeps every all-reduce on the process group
SHM_CAPACITY = 64  # numbers per fast-path all-reduce; longer vectors go through the process group
_X86 = frozenset({"x86_64", "amd64", "i386", "i486", "i586", "i686", "x86"})
_TOKEN_BYTES = 16
_HEADER_WORDS = 8  # the token (2 words), then padding to one 64-byte cache line
_SLOT_WORDS = -(-(SHM_CAPACITY + 3) // 8) * 8  # seq_begin, n, values, seq_end; whole cache lines
_SPINS = 50  # checks before the first sleep
_FIRST_NAP, _LONGEST_NAP = 25e-6, 1e-4  # seconds; the nap doubles up to the longest
_LIVENESS_EVERY = 0.1  # seconds between checks that the awaited peers still live


def shm_enabled() -> bool:
    """Whether this process allows the shared-memory fast path (``NNX_SHM_COLLECTIVE`` not off)."""
    return os.environ.get(SHM_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def process_alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie, killed but not yet reaped, counts as dead)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
        return state not in (b"Z", b"X", b"x")
    except FileNotFoundError:
        return False
    except (OSError, IndexError):
        pass  # no /proc (not Linux): ask the kernel whether the pid exists
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def group_timeout(device: torch.device | None = None, default: float = 1800.0) -> float:
    """The default process group's timeout in seconds, as its backend for ``device`` (default:
    the CPU) holds it; else the backend's default timeout; else ``default`` (torch's 30 min)."""
    try:
        backend = dist.group.WORLD._get_backend(device or torch.device("cpu"))  # type: ignore[union-attr]
        return float(backend.options._timeout.total_seconds())
    except (AttributeError, RuntimeError, TypeError, ValueError):
        pass  # a torch without per-backend options: the backend's default timeout
    try:
        return float(dist.distributed_c10d._get_default_timeout(dist.get_backend()).total_seconds())
    except (AttributeError, RuntimeError, TypeError, ValueError):
        return default


def host_identity() -> tuple[str, int]:
    """This host as the ranks compare it: the hostname and the PID namespace (pids that peers
    can check with ``process_alive`` only mean the same process within one namespace)."""
    try:
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        namespace = -1
    return socket.gethostname(), namespace


def shm_directory() -> str:
    """Where the segment's file is created: ``/dev/shm`` (memory) if usable, else the temp dir."""
    shm = "/dev/shm"
    if os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK):
        return shm
    return tempfile.gettempdir()


def shm_size(world_size: int) -> int:
    """Bytes of a segment for ``world_size`` ranks: the header and two buffers of one slot per rank."""
    return 8 * (_HEADER_WORDS + 2 * world_size * _SLOT_WORDS)


class SharedMemoryReducer:
    """``all_reduce_sum`` of at most ``SHM_CAPACITY`` numbers through one mmapped file.

    Layout: a 64-byte header (a random token every rank checks), then two buffers; round ``r``
    (counted per reducer from 1, the same on every rank because every rank makes the same
    collective calls) uses buffer ``r % 2``. A buffer holds one slot per rank, each
    ``[seq_begin int64][n int64][values float64 × SHM_CAPACITY][seq_end int64]`` padded to whole
    cache lines. A rank writes only its own slot: ``seq_begin = r``, ``n`` and the values, then
    ``seq_end = r``. A reader waits until a peer's ``seq_end == r``, reads ``n`` and the values,
    then checks ``seq_begin == r`` (else it reads again): a seqlock.

    Two buffers suffice: a rank writes round ``r + 2`` into the slot of round ``r`` only after it
    read every peer's round ``r + 1``, and a peer writes round ``r + 1`` only after it finished
    reading round ``r``. So no slot is overwritten while a peer may still read it.

    Memory ordering: the stores are plain stores (aligned 8-byte words written through
    ``memoryview``, the values with one copy), separated by Python bytecode, so neither the
    compiler nor the interpreter reorders them. On x86 (TSO) stores become visible in program
    order and loads are not reordered with older loads, so a reader that sees ``seq_end == r``
    sees the values written before it, and ``seq_begin`` read after the values detects a
    concurrent rewrite. Weaker memory models (ARM, POWER) give no such guarantee without
    barriers, which Python cannot issue: ``TorchCollective`` uses this path only on x86.

    The sum: every rank adds the slots in rank order 0..world-1 in float64, so every rank gets the
    same bits. Waiting spins ``_SPINS`` checks, then sleeps from 25 µs doubling to 100 µs (a late peer is noticed within 0.1 ms); every
    100 ms it checks that the awaited peers' processes still live, and a dead peer or ``timeout``
    seconds without the round raise ``RuntimeError`` naming the missing ranks.
    """

    def __init__(
        self, segment: mmap.mmap, rank: int, world_size: int, pids: list[int], timeout: float, path: str = ""
    ) -> None:
        self.path = path  # the segment's file, for diagnostics (unlinked once every rank mapped it)
        self._mm = segment
        self._q = memoryview(segment).cast("q")
        self.rank = rank
        self.world_size = world_size
        self.pids = list(pids)
        self.timeout = float(timeout)
        self.round = 0
        self.closed = False

    @classmethod
    def create_file(cls, world_size: int) -> tuple[str, bytes]:
        """A new, zero-filled segment file for ``world_size`` ranks; its path and token."""
        fd, path = tempfile.mkstemp(prefix="nnx-collective-", suffix=".shm", dir=shm_directory())
        try:
            token = secrets.token_bytes(_TOKEN_BYTES)
            os.ftruncate(fd, shm_size(world_size))
            os.pwrite(fd, token, 0)
        except BaseException:
            os.close(fd)
            os.unlink(path)
            raise
        os.close(fd)
        return path, token

    @classmethod
    def attach(cls, path: str, token: bytes, rank: int, world_size: int, pids: list[int], timeout: float) -> SharedMemoryReducer:
        """Map the segment file ``path`` (created by :meth:`create_file`) and check its token."""
        size = shm_size(world_size)
        fd = os.open(path, os.O_RDWR)
        try:
            if os.fstat(fd).st_size != size:
                raise RuntimeError(f"shared-memory segment {path} has {os.fstat(fd).st_size} bytes, expected {size}")
            segment = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        if segment[:_TOKEN_BYTES] != token:
            segment.close()
            raise RuntimeError(f"shared-memory segment {path} is not this group's (token mismatch)")
        return cls(segment, rank, world_size, pids, timeout, path)

    def all_reduce_sum(self, values: Sequence[float]) -> list[float]:
        """Σ over the ranks of at most ``SHM_CAPACITY`` floats, added in rank order (float64)."""
        row = [float(v) for v in values]
        if len(row) > SHM_CAPACITY:
            raise ValueError(f"{len(row)} values exceed the shared-memory capacity of {SHM_CAPACITY}")
        rows = self._exchange(row, len(row))
        total = rows[0]
        for got in rows[1:]:
            total = [a + b for a, b in zip(total, got, strict=True)]
        return list(total)

    def check_length(self, n: int) -> None:
        """One round carrying only ``n``, before a vector too long for the segment goes through the
        process group: a rank that is about to reduce a vector of another length (through either
        path) fails at once with ``RuntimeError`` instead of waiting in another collective."""
        self._exchange([], n)

    def _exchange(self, row: list[float], n: int) -> list[Sequence[float]]:
        """Publish ``n`` and ``row`` for the next round; every rank's row, in rank order."""
        if self.closed:
            raise RuntimeError("the shared-memory segment is closed")
        self.round += 1
        r = self.round
        q = self._q
        base = _HEADER_WORDS + (r % 2) * self.world_size * _SLOT_WORDS
        mine = base + self.rank * _SLOT_WORDS
        q[mine] = r  # seq_begin
        q[mine + 1] = n
        if row:
            struct.pack_into(f"{n}d", self._mm, 8 * (mine + 2), *row)
        q[mine + 2 + SHM_CAPACITY] = r  # seq_end: the slot is published
        return [row if peer == self.rank else self._read(base + peer * _SLOT_WORDS, peer, r, n)
                for peer in range(self.world_size)]

    def _read(self, slot: int, peer: int, r: int, n: int) -> tuple[float, ...]:
        q, end = self._q, slot + 2 + SHM_CAPACITY
        while True:
            if q[end] != r:
                self._wait(end, r)
            m = q[slot + 1]
            got = struct.unpack_from(f"{m}d", self._mm, 8 * (slot + 2)) if 0 <= m <= SHM_CAPACITY else ()
            if q[slot] == r and q[end] == r:
                break
        if m != n:
            raise RuntimeError(f"all_reduce_sum: rank {peer} gave {m} values, rank {self.rank} gave {n}")
        return got

    def _wait(self, word: int, r: int) -> None:
        q = self._q
        for _ in range(_SPINS):
            if q[word] == r:
                return
        start = time.monotonic()
        check = start + _LIVENESS_EVERY
        nap = _FIRST_NAP
        while q[word] != r:
            time.sleep(nap)
            nap = min(2 * nap, _LONGEST_NAP)
            now = time.monotonic()
            if now >= check:
                check = now + _LIVENESS_EVERY
                dead = [p for p in self._missing(r) if not process_alive(self.pids[p])]
                if dead:
                    who = ", ".join(f"rank {p} (pid {self.pids[p]})" for p in dead)
                    raise RuntimeError(
                        f"all_reduce_sum (shared memory), round {r}: {who} died; rank {self.rank} cannot complete the collective"
                    )
            if now - start >= self.timeout:
                missing = ", ".join(str(p) for p in self._missing(r))
                raise RuntimeError(
                    f"all_reduce_sum (shared memory), round {r}: rank(s) {missing} did not arrive within "
                    f"{self.timeout:g} s (rank {self.rank} waited)"
                )

    def _missing(self, r: int) -> list[int]:
        """The ranks whose slot does not yet hold round ``r`` (those that have not arrived)."""
        base = _HEADER_WORDS + (r % 2) * self.world_size * _SLOT_WORDS
        q = self._q
        return [
            p for p in range(self.world_size)
            if p != self.rank and q[base + p * _SLOT_WORDS + 2 + SHM_CAPACITY] != r
        ]

    def close(self) -> None:
        """Unmap the segment (the file was unlinked at setup); later calls raise. Idempotent."""
        if self.closed:
            return
        self.closed = True
        self._q.release()
        self._mm.close()


class TorchCollective:
    """The ``Collective`` port over the default ``torch.distributed`` process group.

    Construction is collective (every rank constructs it at the same point): it sets up the
    shared-memory fast path for small all-reduces (``fast_path`` tells whether it is on) — see
    ``SharedMemoryReducer`` — and ``close()`` releases it.
    """

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
        self.fast_path_calls = 0  # all-reduces that went through shared memory
        self._shm: SharedMemoryReducer | None = self._setup_shared_memory() if self._world > 1 else None

    @property
    def fast_path(self) -> bool:
        """Whether small all-reduces go through shared memory (the same answer on every rank)."""
        return self._shm is not None

    def _setup_shared_memory(self) -> SharedMemoryReducer | None:
        """Agree on the fast path: every rank on this host (and PID namespace), on x86, enabled
        everywhere, every peer's process visible, the segment created by rank 0 and mapped by
        every rank. Two process-group all-gathers (counted as ``setup``); any failure on any rank
        leaves every rank on the process group."""
        eligible = shm_enabled() and platform.machine().lower() in _X86
        created: tuple[str, bytes] | None = None
        if eligible and self._rank == 0:
            try:
                created = SharedMemoryReducer.create_file(self._world)
            except OSError:
                created = None
        mine = (host_identity(), os.getpid(), eligible, created)
        entries: list[Any] = [None] * self._world
        try:
            dist.all_gather_object(entries, mine)
        except BaseException:
            if created is not None:
                _unlink(created[0])
            raise
        self.traffic.add("setup", 0)
        use = all(e[2] for e in entries) and len({e[0] for e in entries}) == 1 and entries[0][3] is not None
        if not use:
            if created is not None:
                _unlink(created[0])
            return None
        path, token = entries[0][3]
        pids = [int(e[1]) for e in entries]
        reducer: SharedMemoryReducer | None = None
        try:
            if not all(process_alive(pid) for pid in pids):
                raise RuntimeError("a peer's process is not visible from this rank")
            timeout = group_timeout(self.device)
            reducer = SharedMemoryReducer.attach(path, token, self._rank, self._world, pids, timeout)
        except (OSError, ValueError, RuntimeError):
            reducer = None
        oks: list[Any] = [None] * self._world
        try:
            dist.all_gather_object(oks, reducer is not None)  # also the barrier before the unlink
        finally:
            if created is not None:
                _unlink(created[0])  # every rank has mapped it (or given up): nothing leaks, even on a crash
        self.traffic.add("setup", 0)
        if all(oks):
            return reducer
        if reducer is not None:
            reducer.close()
        return None

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
        """
        values = list(values)
        if self._shm is not None:
            if len(values) <= SHM_CAPACITY:
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


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


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
    "SHM_CAPACITY",
    "SHM_ENV",
    "SharedMemoryReducer",
    "SufficientStatistics",
    "ThreadCollective",
    "ThreadHub",
    "TorchCollective",
    "Traffic",
    "UnmergeableMetricError",
    "run_ranks",
    "statistic_slots",
]
