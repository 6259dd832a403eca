"""The process group torchrun started: join it, leave it, and refuse it where one process trains.

``init_process_group`` joins the group the environment describes (gloo on CPU, nccl with one GPU
per local rank), ``shutdown`` meets every rank at a bounded teardown barrier, and
``refuse_process_group`` is how single-process entry points refuse to run inside a larger group.
Re-exported as ``nnx.distributed.init_process_group`` / ``shutdown`` / ``GroupInfo``.
"""

from __future__ import annotations

import datetime
import os
from typing import Any

import torch
import torch.distributed as dist

from nnx_core.errors import ParamsError
from nnx_core.validate import check_float
from nnx_adapters.collective.torch import nccl_barrier


class GroupInfo(tuple[int, int]):
    """This process's place in the group: ``(rank, world_size)`` as NNx returns it (it unpacks,
    indexes and compares as that 2-tuple), with ``rank``, ``world_size``, ``local_rank`` and
    ``backend`` as attributes.

    >>> rank, world_size = GroupInfo(1, 2, 1, "gloo")
    """

    local_rank: int
    backend: str

    def __new__(cls, rank: int, world_size: int, local_rank: int, backend: str) -> GroupInfo:
        info = super().__new__(cls, (rank, world_size))
        info.local_rank, info.backend = local_rank, backend
        return info

    @property
    def rank(self) -> int:
        """This process's rank."""
        return self[0]

    @property
    def world_size(self) -> int:
        """How many ranks the group has."""
        return self[1]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, GroupInfo):  # two infos: every field; a plain tuple: (rank, world_size)
            return tuple(self) == tuple(other) and (self.local_rank, self.backend) == (other.local_rank, other.backend)
        return tuple.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = tuple.__hash__

    def __repr__(self) -> str:
        return f"GroupInfo(rank={self[0]}, world_size={self[1]}, local_rank={self.local_rank}, backend={self.backend!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (GroupInfo, (self[0], self[1], self.local_rank, self.backend))


def _info() -> GroupInfo:
    local = int(os.environ.get("LOCAL_RANK", dist.get_rank()))
    return GroupInfo(dist.get_rank(), dist.get_world_size(), local, str(dist.get_backend()))


def init_process_group(backend: str | None = None, *, timeout_seconds: float = 1800.0) -> GroupInfo:
    """Join the process group torchrun describes in the environment (``RANK``, ``WORLD_SIZE``,
    ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``) and return ``(rank, world_size)`` (a
    :class:`GroupInfo`, which also carries ``local_rank`` and ``backend``).

    ``backend`` None: nccl when torch has NCCL and this node a GPU per local rank (each rank then
    uses ``cuda:LOCAL_RANK``), else gloo. ``backend="nccl"`` on a node without a GPU for this local
    rank is refused (``ParamsError``) before any group is joined. ``timeout_seconds`` bounds every
    collective: a rank that disappears makes the others fail after it instead of blocking forever.
    Calling it again returns the existing group's info.
    """
    if dist.is_available() and dist.is_initialized():
        return _info()
    check_float("init_process_group.timeout_seconds", timeout_seconds, minimum=0.0, exclusive_min=True)
    missing = [k for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if k not in os.environ]
    if missing:
        raise RuntimeError(
            f"init_process_group: {', '.join(missing)} not set; start the script with torchrun, e.g. "
            "`torchrun --standalone --nproc_per_node=2 train.py`"
        )
    world = int(os.environ["WORLD_SIZE"])
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    if local_world != world:
        raise ParamsError("distributed", f"multi-node runs are out of scope ({world} ranks, {local_world} on this node)")
    local_rank = int(os.environ.get("LOCAL_RANK", os.environ["RANK"]))
    if backend is None:
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        backend = "nccl" if dist.is_nccl_available() and gpus >= local_world else "gloo"
    if backend not in ("gloo", "nccl"):
        raise ParamsError("init_process_group.backend", f"must be 'gloo' or 'nccl', got {backend!r}")
    if backend == "nccl":
        _check_nccl(local_rank)
        torch.cuda.set_device(local_rank)
    dist.init_process_group(backend=backend, timeout=datetime.timedelta(seconds=timeout_seconds))
    return _info()


def _check_nccl(local_rank: int) -> None:
    """Refuse nccl where it cannot run: no NCCL in this torch build, or no GPU for this local rank."""
    if not dist.is_nccl_available():
        raise ParamsError("init_process_group.backend", "this torch build has no NCCL; use backend='gloo' (CPU)")
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if local_rank >= gpus:
        raise ParamsError(
            "init_process_group.backend",
            f"nccl needs one GPU per local rank, but local rank {local_rank} has none ({gpus} GPU(s) on this node); "
            "start at most that many ranks, or use backend='gloo' on the CPU",
        )


def shutdown(timeout_seconds: float = 60.0) -> None:
    """Meet every rank at a teardown barrier, then destroy the group (the recipe's last line).

    The wait is bounded by ``timeout_seconds`` with either backend: ``monitored_barrier`` with
    gloo, an asynchronous barrier on this rank's GPU waited for with that timeout with nccl
    (``nnx_adapters.collective.torch.nccl_barrier``). A rank that does not arrive makes the others
    raise ``RuntimeError``; the group is then left for process exit. Without a process group it
    does nothing.
    """
    if not (dist.is_available() and dist.is_initialized()):
        return
    backend = str(dist.get_backend())
    try:
        if backend == "gloo":
            dist.monitored_barrier(timeout=datetime.timedelta(seconds=timeout_seconds), wait_all_ranks=True)
        else:
            nccl_barrier(torch.device("cuda", torch.cuda.current_device()), timeout_seconds)
    except Exception as exc:  # a missing rank: never block, never tear down under a peer
        raise RuntimeError(
            f"shutdown: not every rank reached the teardown barrier within {timeout_seconds:g} s; the process "
            f"group is left for process exit ({type(exc).__name__}: {str(exc)[:300]})"
        ) from exc
    dist.destroy_process_group()


def refuse_process_group(entry: str) -> None:
    """Single-process entry points refuse to run inside a group of more than one rank."""
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        raise ParamsError(
            "distributed",
            f"{entry} trains in one process, but this process is rank {dist.get_rank()} of a "
            f"{dist.get_world_size()}-rank process group; use model.train(params, distributed=nnx.distributed.DDP()) "
            "(NNModel only), or run it outside torchrun",
        )


def _group_place(rank: int | None, world_size: int | None) -> tuple[int, int]:
    if rank is not None or world_size is not None:
        if rank is None or world_size is None:
            raise ParamsError("distributed", "give both rank= and world_size=, or neither (read from the group)")
        if not (isinstance(world_size, int) and world_size >= 1 and isinstance(rank, int) and 0 <= rank < world_size):
            raise ParamsError("distributed", f"rank {rank!r} is not in range for world size {world_size!r}")
        return rank, world_size
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


__all__ = ["GroupInfo", "init_process_group", "refuse_process_group", "shutdown"]
