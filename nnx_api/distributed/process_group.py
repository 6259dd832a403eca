"""The process group torchrun started: join it, leave it, and refuse it where one process trains.

``init_process_group`` joins the group the environment describes (gloo on CPU, nccl with one GPU
per local rank), on one node or several, ``shutdown`` meets every rank at a bounded teardown barrier, and
``refuse_process_group`` is how single-process entry points refuse to run inside a larger group.
Re-exported as ``nnx.distributed.init_process_group`` / ``shutdown`` / ``GroupInfo``.

``agree_given`` is a ``DDP()`` run's first collective: before anything depends on them, the ranks
compare what each was given (callbacks, writer rank, step functions, objective, precision,
history journal, run configuration) and refuse a difference on every rank, naming it.
"""

from __future__ import annotations

import datetime
import gc
import os
from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.distributed as dist

from nnx_core import agreement
from nnx_core.errors import ParamsError
from nnx_core.identity import run_id as content_address
from nnx_core.validate import check_float
from nnx_adapters.collective.torch import nccl_barrier
from nnx_api.distributed.callbacks import describe_callbacks


class GroupInfo(tuple[int, int]):
    """This process's place in the group: ``(rank, world_size)`` as NNx returns it (it unpacks,
    indexes and compares as that 2-tuple), with ``rank``, ``world_size``, ``local_rank``,
    ``backend``, ``node_rank`` (this node's place among the nodes, torchrun's ``GROUP_RANK``) and
    ``local_world_size`` (the ranks on this node, torchrun's ``LOCAL_WORLD_SIZE``) as attributes.
    ``node_rank`` defaults to 0 and ``local_world_size`` to ``world_size``: one node.

    >>> rank, world_size = GroupInfo(1, 2, 1, "gloo")
    >>> GroupInfo(1, 2, 0, "gloo", node_rank=1, local_world_size=1).node_rank
    1
    """

    local_rank: int
    backend: str
    node_rank: int
    local_world_size: int

    def __new__(cls, rank: int, world_size: int, local_rank: int, backend: str, *, node_rank: int = 0,
                local_world_size: int | None = None) -> GroupInfo:
        info = super().__new__(cls, (rank, world_size))
        info.local_rank, info.backend = local_rank, backend
        info.node_rank, info.local_world_size = node_rank, world_size if local_world_size is None else local_world_size
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
            return tuple(self) == tuple(other) and self._place() == other._place()
        return tuple.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = tuple.__hash__

    def _place(self) -> tuple[int, str, int, int]:
        return self.local_rank, self.backend, self.node_rank, self.local_world_size

    def __repr__(self) -> str:
        return (
            f"GroupInfo(rank={self[0]}, world_size={self[1]}, local_rank={self.local_rank}, backend={self.backend!r}, "
            f"node_rank={self.node_rank}, local_world_size={self.local_world_size})"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (self[0], self[1], self.local_rank, self.backend, self.node_rank, self.local_world_size))


def _rebuild(rank: int, world_size: int, local_rank: int, backend: str, node_rank: int, local_world_size: int) -> GroupInfo:
    return GroupInfo(rank, world_size, local_rank, backend, node_rank=node_rank, local_world_size=local_world_size)


def _node_place(rank: int, world: int) -> tuple[int, int, int]:
    """``(local_rank, local_world_size, node_rank)`` from torchrun's environment: ``LOCAL_RANK``,
    ``LOCAL_WORLD_SIZE`` and ``GROUP_RANK`` (the node's rank; ``rank // local_world_size`` where it
    is not set, as torchrun numbers the ranks node by node). Without them: one node."""
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    node_rank = int(os.environ.get("GROUP_RANK", rank // max(local_world, 1)))
    return local_rank, local_world, node_rank


def _info() -> GroupInfo:
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank, local_world, node_rank = _node_place(rank, world)
    return GroupInfo(rank, world, local_rank, str(dist.get_backend()), node_rank=node_rank, local_world_size=local_world)


def init_process_group(backend: str | None = None, *, timeout_seconds: float = 1800.0) -> GroupInfo:
    """Join the process group torchrun describes in the environment (``RANK``, ``WORLD_SIZE``,
    ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``) and
    return ``(rank, world_size)`` (a :class:`GroupInfo`, which also carries ``local_rank``,
    ``backend``, ``node_rank`` and ``local_world_size``).

    One node or several: torchrun's static rendezvous (``--nnodes=N --node-rank=i``) and its c10d
    rendezvous both give every rank this environment. ``backend`` None: nccl when torch has NCCL
    and this node a GPU per local rank (each rank then uses ``cuda:LOCAL_RANK``), else gloo; each
    node decides for itself, so pass ``backend`` explicitly where the nodes' GPUs differ.
    ``backend="nccl"`` on a node without a GPU for this local rank is refused (``ParamsError``)
    before any group is joined. ``timeout_seconds`` bounds every collective: a rank that
    disappears makes the others fail after it instead of blocking forever. Calling it again
    returns the existing group's info.
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
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank, local_world, _ = _node_place(rank, world)
    if not 0 <= local_rank < local_world <= world:
        raise ParamsError(
            "distributed",
            f"the environment places local rank {local_rank} among {local_world} rank(s) on this node, of {world} in all; "
            "start the script with torchrun",
        )
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

    The wait is bounded by ``timeout_seconds`` with either backend: an asynchronous barrier waited
    for with that timeout (with nccl on this rank's GPU: ``nnx_adapters.collective.torch.nccl_barrier``).
    A rank that does not arrive makes the others raise ``RuntimeError``; the group is then left for
    process exit, its barrier still queued, so a rank that arrives late completes against it and
    leaves cleanly. ``timeout_seconds`` is checked first (a finite number > 0, else
    ``ParamsError``, a ``ValueError``); without a process group it then does nothing.
    """
    check_float("shutdown.timeout_seconds", timeout_seconds, minimum=0.0, exclusive_min=True)
    if not (dist.is_available() and dist.is_initialized()):
        return
    backend = str(dist.get_backend())
    try:
        if backend == "gloo":  # not monitored_barrier: rank 0 would stop answering a rank that arrives late
            if not dist.barrier(async_op=True).wait(timeout=datetime.timedelta(seconds=timeout_seconds)):
                raise RuntimeError("the barrier timed out")
        else:
            nccl_barrier(torch.device("cuda", torch.cuda.current_device()), timeout_seconds)
    except Exception as exc:  # a missing rank: never block, never tear down under a peer
        raise RuntimeError(
            f"shutdown: not every rank reached the teardown barrier within {timeout_seconds:g}s; the process "
            f"group is left for process exit ({type(exc).__name__}: {str(exc)[:300]})"
        ) from exc
    gc.collect()  # the fits' DDP wrappers (their reducers hold the group) go while the group is still there
    dist.destroy_process_group()


def refuse_process_group(entry: str) -> None:
    """Single-process entry points refuse to run inside a group of more than one rank."""
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        raise ParamsError(
            "distributed",
            f"{entry} trains in one process, but this process is rank {dist.get_rank()} of a "
            f"{dist.get_world_size()}-rank process group; pass distributed=nnx.distributed.DDP() to {entry} to train "
            "on every rank, or run it outside torchrun",
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


# ------------------------------------------------------------------------------- what each rank was given
CONFIGURATION = "run configuration"  # the description's key for the run id (the configuration's content address)
SHOWN_DIFFERENCES = 8  # configuration keys named in a refusal at most


def describe_given(entry: Any, writer_rank: int) -> dict[str, str]:
    """What this rank was given, as the ranks compare it: a small dict of strings (a few hundred
    bytes), the same on every rank of a well-formed run (nothing rank- or device-specific)."""
    precision = entry.model.resolved_precision
    return {
        "DDP.writer_rank": str(writer_rank),
        "callbacks": describe_callbacks(entry.callbacks),
        entry.kind.step_name: _qualified(entry.step_fn),
        "eval_step_fn": _qualified(entry.eval_step_fn),
        "objective": _class_of(entry.objective),
        "precision": precision.requested if not precision.fell_back else f"{precision.requested} (runs {precision.effective})",
        "history": "none" if entry.history is None else repr(entry.history),
        CONFIGURATION: content_address(entry.config),
    }


def agree_given(collective: Any, entry: Any, writer_rank: int) -> None:
    """Every rank gathers every rank's :func:`describe_given` (one all-gather) and, when they
    differ, raises the same ``ParamsError`` naming each differing item and the ranks' values.

    Run it before any other collective of the run: a rank given other callbacks or another writer
    rank takes other collective paths later, and would leave the others waiting in theirs until
    the group's timeout. Different run ids cost a second all-gather (on every rank: they all see
    them differ), of the configurations, to name the keys that differ.
    """
    if collective.world_size == 1:
        return
    given = [dict(g) for g in agreement.gathered(collective, "setup", lambda: describe_given(entry, writer_rank))]
    problems = given_problems(given)
    parts = []
    if problems:
        parts.append(f"the ranks were given different train() arguments: {'; '.join(problems)}; pass the same ones on every rank")
    if len({g.get(CONFIGURATION) for g in given}) > 1:
        differences = config_differences(collective.all_gather(dict(entry.config)))
        shown = "; ".join(differences) or by_rank([g.get(CONFIGURATION, "") for g in given])
        parts.append(
            f"the ranks built different run configurations ({shown}); build the model, params and salt the same way "
            "on every rank"
        )
    if parts:
        raise ParamsError("distributed", "; and ".join(parts))


def given_problems(given: Sequence[Mapping[str, str]]) -> list[str]:
    """Each item (other than the run configuration) whose value differs between the ranks, with
    every rank's value: ``"writer_rank: 0 on rank 0, 1 on rank 1"``."""
    keys = list(dict.fromkeys(k for g in given for k in g if k != CONFIGURATION))
    problems = []
    for key in keys:
        values = [g.get(key, "<absent>") for g in given]
        if len(set(values)) > 1:
            problems.append(f"{key}: {by_rank(values)}")
    return problems


def config_differences(configs: Sequence[Mapping[str, Any]]) -> list[str]:
    """The configuration keys whose values differ between the ranks (a recursive diff of the
    mappings, lists of equal length item by item), with every rank's value:
    ``"train.seed: 0 on rank 0, 1 on rank 1"``; at most ``SHOWN_DIFFERENCES``, then how many more."""
    found: list[str] = []

    def walk(values: list[Any], path: str) -> None:
        if all(isinstance(v, Mapping) for v in values):
            for key in dict.fromkeys(k for v in values for k in v):
                walk([v.get(key, _ABSENT) for v in values], f"{path}.{key}" if path else str(key))
        elif all(isinstance(v, (list, tuple)) for v in values) and len({len(v) for v in values}) == 1:
            for i in range(len(values[0])):
                walk([v[i] for v in values], f"{path}[{i}]")
        elif any(v != values[0] for v in values[1:]):
            found.append(f"{path or 'the configuration'}: {by_rank([_shown(v) for v in values])}")

    walk(list(configs), "")
    more = len(found) - SHOWN_DIFFERENCES
    return found[:SHOWN_DIFFERENCES] + ([f"and {more} more"] if more > 0 else [])


def by_rank(values: Sequence[str]) -> str:
    """``"a on rank 0, b on rank 1"``; ranks with the same value together (``"a on ranks 0 and 2"``)."""
    ranks: dict[str, list[int]] = {}
    for rank, value in enumerate(values):
        ranks.setdefault(value, []).append(rank)
    return ", ".join(f"{value} on {_ranks(rs)}" for value, rs in ranks.items())


class _Absent:
    def __repr__(self) -> str:
        return "<absent>"


_ABSENT = _Absent()


def _ranks(ranks: list[int]) -> str:
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    return "ranks " + ", ".join(str(r) for r in ranks[:-1]) + f" and {ranks[-1]}"


def _shown(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _qualified(fn: Any) -> str:
    """A step function by qualified name (a callable object: its class)."""
    if fn is None:
        return "none"
    name = getattr(fn, "__qualname__", None)
    if not isinstance(name, str):
        return f"{_class_of(fn)} instance"
    return f"{getattr(fn, '__module__', None) or '?'}.{name}"


def _class_of(value: Any) -> str:
    if value is None:
        return "none"
    cls = type(value)
    return f"{cls.__module__}.{cls.__qualname__}"


__all__ = ["GroupInfo", "agree_given", "describe_given", "init_process_group", "refuse_process_group", "shutdown"]
