"""An opt-in fast path for small all-reduces: one shared-memory segment every rank maps.

NNx adds no runtime of its own by default: every all-reduce goes through the process group
torchrun started. ``TorchCollective(shared_memory=True)`` (or ``NNX_SHM_COLLECTIVE=1``) opts in
to this reducer for all-reduces of at most ``SHM_CAPACITY`` numbers when every rank runs on this
host: two alternating buffers with a sequence lock, every rank adding in rank order (the same
bits everywhere), a waiting rank spinning then napping, and peers' liveness checked so a dead
rank raises instead of hanging. What it saves is measured in docs/performance.md (Distributed).
"""

from __future__ import annotations

import mmap
import os
import platform
import secrets
import socket
import struct
import tempfile
import time
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

from nnx_adapters.collective.base import Traffic

SHM_ENV = "NNX_SHM_COLLECTIVE"  # "1" (or true/yes/on) opts in when TorchCollective is not told
SHM_CAPACITY = 64  # numbers per fast-path all-reduce; longer vectors go through the process group
_X86 = frozenset({"x86_64", "amd64", "i386", "i486", "i586", "i686", "x86"})
_TOKEN_BYTES = 16
_HEADER_WORDS = 8  # the token (2 words), then padding to one 64-byte cache line
_SLOT_WORDS = -(-(SHM_CAPACITY + 3) // 8) * 8  # seq_begin, n, values, seq_end; whole cache lines
_SPINS = 50  # checks before the first sleep
_FIRST_NAP, _LONGEST_NAP = 25e-6, 1e-4  # seconds; the nap doubles up to the longest
_LIVENESS_EVERY = 0.1  # seconds between checks that the awaited peers still live


def shm_requested() -> bool:
    """Whether ``NNX_SHM_COLLECTIVE`` opts this process in to the fast path (off by default)."""
    return os.environ.get(SHM_ENV, "0").strip().lower() in ("1", "true", "yes", "on")


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



def setup(rank: int, world: int, device: torch.device, traffic: Traffic) -> SharedMemoryReducer | None:
    """Agree on the fast path: every rank on this host (and PID namespace), on x86, enabled
    everywhere, every peer's process visible, the segment created by rank 0 and mapped by
    every rank. Two process-group all-gathers (counted as ``setup``); any failure on any rank
    leaves every rank on the process group."""
    eligible = platform.machine().lower() in _X86
    created: tuple[str, bytes] | None = None
    if eligible and rank == 0:
        try:
            created = SharedMemoryReducer.create_file(world)
        except OSError:
            created = None
    mine = (host_identity(), os.getpid(), eligible, created)
    entries: list[Any] = [None] * world
    try:
        dist.all_gather_object(entries, mine)
    except BaseException:
        if created is not None:
            _unlink(created[0])
        raise
    traffic.add("setup", 0)
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
        timeout = group_timeout(device)
        reducer = SharedMemoryReducer.attach(path, token, rank, world, pids, timeout)
    except (OSError, ValueError, RuntimeError):
        reducer = None
    oks: list[Any] = [None] * world
    try:
        dist.all_gather_object(oks, reducer is not None)  # also the barrier before the unlink
    finally:
        if created is not None:
            _unlink(created[0])  # every rank has mapped it (or given up): nothing leaks, even on a crash
    traffic.add("setup", 0)
    if all(oks):
        return reducer
    if reducer is not None:
        reducer.close()
    return None

def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
