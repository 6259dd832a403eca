"""Single-node data parallelism on torchrun (seed §3): ``nnx.distributed``.

    torchrun --standalone --nproc_per_node=2 train.py

    nnx.distributed.init_process_group()                      # gloo on CPU, nccl with one GPU per rank
    params = nnx.NNTrainParams(..., train_loader=nnx.distributed.train_loader(train_set, 32, seed=0),
                               val_loader=nnx.distributed.validation_loader(val_set, 256))
    run = model.train(params, distributed=nnx.distributed.DDP())   # the same NNRun on every rank
    nnx.distributed.shutdown()

NNx adds no runtime of its own: the process group is the one torchrun started. What NNx adds is
that every committed update equals one process training on the union of the ranks' batches,
every rank makes the same decisions, one writer commits, and no failure it can see hangs.

One update, per microbatch (``DistributedSession._default_update``):

    forward + backward through DDP       no_sync until the window's last microbatch
       │  loss numerator only; [loss Σ, count, correct, rows, non-finite, failed] → one all-reduce
       │  before backward: a failure or non-finite loss on any rank stops every rank here
    window end: W = Σ of the reduced counts (already global: no extra collective)
       │  W == 0 → the update is skipped on every rank
    grad = DDP average × world / W  →  clip  →  optimizer.step()   (identical on every rank)

The agreement rules live in ``nnx_core.agreement``; the port adapter in
``nnx_adapters.collective.torch``. Traffic per step and per epoch: docs/distributed.md.
"""

from __future__ import annotations

import contextlib
import datetime
import inspect
import os
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import attrs
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from nnx_adapters.pytorch import state as torch_state
from nnx_adapters.storage.fs import FileStorage
from nnx_adapters.collective.torch import TorchCollective
from nnx_adapters.pytorch.statistics import SufficientStatistics, UnmergeableMetricError, statistic_slots
from nnx_adapters.pytorch.metrics import EpochAccumulator
from nnx_api.callbacks import Callback, LegacyCallback, normalize_callbacks
from nnx_api.runs.run import NNRun, dump_yaml, runs_root
from nnx_api.training.session import (
    TrainingSession,
    new_attempt,
    now,
    progress_enabled,
    restored_modes,
    split_batch,
    to_device,
)
from nnx_core import agreement
from nnx_core.agreement import (
    Failure,
    MicrobatchNumbers,
    failure_of,
    first_failure,
    raise_failure,
    raise_if_failed,
)
from nnx_core.commit import LAST, RunFiles
from nnx_core.errors import (
    ParamsError,
    TrainingInputError,
)
from nnx_core.history import EagerHistory
from nnx_core.lifecycle import CleanupWarning, overrides, run_lifecycle
from nnx_core.records import EvaluationDataPoint, IterationDataPoint
from nnx_core.schedules import check_run_budget
from nnx_core.window import commit_update

# no buffer broadcast before every forward ("forward_sync_buffers" in newer torch, "broadcast_buffers" before)
_BUFFER_SYNC = (
    "forward_sync_buffers"
    if "forward_sync_buffers" in inspect.signature(DistributedDataParallel.__init__).parameters
    else "broadcast_buffers"
)
DDP_KIND = "nnmodel-ddp"  # the payload kind of a distributed checkpoint (a single-process stateful resume refuses it)
POLICIES = ("pad", "drop")


# ------------------------------------------------------------------------------- process group
@attrs.frozen
class GroupInfo:
    """This process's place in the group: rank, world size, local rank and backend."""

    rank: int
    world_size: int
    local_rank: int
    backend: str


def _info() -> GroupInfo:
    local = int(os.environ.get("LOCAL_RANK", dist.get_rank()))
    return GroupInfo(dist.get_rank(), dist.get_world_size(), local, str(dist.get_backend()))


def init_process_group(backend: str | None = None, *, timeout_seconds: float = 1800.0) -> GroupInfo:
    """Join the process group torchrun describes in the environment (``RANK``, ``WORLD_SIZE``,
    ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``).

    ``backend`` None: nccl when this node has a GPU per local rank (each rank then uses
    ``cuda:LOCAL_RANK``), else gloo. ``timeout_seconds`` bounds every collective: a rank that
    disappears makes the others fail after it instead of blocking forever. Calling it again
    returns the existing group's info.
    """
    if dist.is_available() and dist.is_initialized():
        return _info()
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
        backend = "nccl" if torch.cuda.is_available() and torch.cuda.device_count() >= local_world else "gloo"
    if backend not in ("gloo", "nccl"):
        raise ParamsError("init_process_group.backend", f"must be 'gloo' or 'nccl', got {backend!r}")
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
    dist.init_process_group(backend=backend, timeout=datetime.timedelta(seconds=timeout_seconds))
    return _info()


def shutdown(timeout_seconds: float = 60.0) -> None:
    """Meet every rank at a teardown barrier, then destroy the group (the recipe's last line).

    The wait is bounded by ``timeout_seconds`` with gloo (``monitored_barrier``) and by the group's
    own timeout with nccl. A rank that does not arrive makes the others raise ``RuntimeError``; the
    group is then left for process exit. Without a process group it does nothing.
    """
    if not (dist.is_available() and dist.is_initialized()):
        return
    backend = str(dist.get_backend())
    try:
        if backend == "gloo":
            dist.monitored_barrier(timeout=datetime.timedelta(seconds=timeout_seconds), wait_all_ranks=True)
        else:
            dist.barrier(device_ids=[torch.cuda.current_device()])
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


# ------------------------------------------------------------------------------- loaders
def partition_indices(n_rows: int, world_size: int, rank: int, *, epoch: int, seed: int, policy: str) -> list[int]:
    """Rank ``rank``'s rows of epoch ``epoch``: the permutation seeded by ``seed + epoch``, its tail
    padded ("pad": leading rows repeated) or dropped ("drop") to a multiple of the world size, then
    dealt round-robin (rank r takes positions r, r + world, ...)."""
    generator = torch.Generator().manual_seed(int(seed) + int(epoch))
    order = torch.randperm(n_rows, generator=generator).tolist()
    if policy == "pad":
        total = -(-n_rows // world_size) * world_size
        while len(order) < total:
            order += order[: total - len(order)]
    else:
        order = order[: (n_rows // world_size) * world_size]
    return order[rank::world_size]


def _collate(dataset: Any, index: Sequence[int]) -> Any:
    tensors = getattr(dataset, "tensors", None)
    if isinstance(tensors, tuple) and all(isinstance(t, torch.Tensor) for t in tensors):  # TensorDataset: one gather
        rows = torch.as_tensor(index, dtype=torch.long)
        return tuple(t[rows] for t in tensors)
    from torch.utils.data import default_collate

    return default_collate([dataset[i] for i in index])


def _check_dataset(dataset: Any, batch_size: Any, where: str) -> int:
    if not hasattr(dataset, "__getitem__") or not hasattr(dataset, "__len__"):
        raise ParamsError(f"{where}.dataset", f"must be a map-style dataset (len + indexing), got {type(dataset).__name__}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ParamsError(f"{where}.batch_size", f"must be an int ≥ 1, got {batch_size!r}")
    return len(dataset)


class ShardedTrainLoader:
    """One rank's share of every epoch (``train_loader``); ``set_epoch`` picks the permutation."""

    def __init__(self, dataset: Any, batch_size: int, policy: str, seed: int, rank: int, world_size: int) -> None:
        self.rows = _check_dataset(dataset, batch_size, "train_loader")
        if policy not in POLICIES:
            raise ParamsError("train_loader.policy", f"must be 'pad' or 'drop', got {policy!r}")
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ParamsError("train_loader.seed", f"must be an int ≥ 0, got {seed!r}")
        self.dataset, self.batch_size, self.policy, self.seed = dataset, batch_size, policy, seed
        self.rank, self.world_size = rank, world_size
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Deal the permutation of ``epoch`` (NNx calls this before every epoch)."""
        self.epoch = int(epoch)

    @property
    def rows_per_rank(self) -> int:
        if self.policy == "pad":
            return -(-self.rows // self.world_size)
        return self.rows // self.world_size

    def __len__(self) -> int:
        return -(-self.rows_per_rank // self.batch_size)

    def indices(self, epoch: int | None = None) -> list[int]:
        """This rank's rows of ``epoch`` (default: the current one), in batch order."""
        e = self.epoch if epoch is None else epoch
        return partition_indices(self.rows, self.world_size, self.rank, epoch=e, seed=self.seed, policy=self.policy)

    def __iter__(self) -> Iterator[Any]:
        index = self.indices()
        for start in range(0, len(index), self.batch_size):
            yield _collate(self.dataset, index[start : start + self.batch_size])

    def partition(self) -> dict[str, Any]:
        """What a checkpoint records of this deal (a stateful resume needs the same)."""
        return {
            "kind": "nnx.train_loader", "rows": self.rows, "batch_size": self.batch_size, "policy": self.policy,
            "seed": self.seed, "world_size": self.world_size, "rank": self.rank, "steps": len(self),
        }


class ShardedValidationLoader:
    """Rows ``rank::world`` in order, unpadded (``validation_loader``): every row scored once."""

    def __init__(self, dataset: Any, batch_size: int, rank: int, world_size: int) -> None:
        self.rows = _check_dataset(dataset, batch_size, "validation_loader")
        self.dataset, self.batch_size, self.rank, self.world_size = dataset, batch_size, rank, world_size

    def indices(self) -> list[int]:
        """This rank's rows: ``rank::world_size``, unpadded."""
        return list(range(self.rank, self.rows, self.world_size))

    def __len__(self) -> int:
        return -(-len(self.indices()) // self.batch_size)

    def __iter__(self) -> Iterator[Any]:
        index = self.indices()
        for start in range(0, len(index), self.batch_size):
            yield _collate(self.dataset, index[start : start + self.batch_size])


def train_loader(
    dataset: Any, batch_size: int, policy: str = "pad", seed: int = 0, *, rank: int | None = None,
    world_size: int | None = None,
) -> ShardedTrainLoader:
    """This rank's training batches: each epoch's permutation (seeded by ``seed + epoch``) padded or
    dropped to a multiple of the world size and dealt to the ranks, so every rank takes the same
    number of steps. ``rank`` / ``world_size`` default to the process group's (0 / 1 without one)."""
    r, w = _group_place(rank, world_size)
    return ShardedTrainLoader(dataset, batch_size, policy, seed, r, w)


def validation_loader(
    dataset: Any, batch_size: int, *, rank: int | None = None, world_size: int | None = None
) -> ShardedValidationLoader:
    """This rank's validation rows ``rank::world``, unpadded: every row is scored exactly once and a
    rank may have none. The validation loop runs no collective; its sums are added once per epoch."""
    r, w = _group_place(rank, world_size)
    return ShardedValidationLoader(dataset, batch_size, r, w)


# ------------------------------------------------------------------------------- callbacks
class WriterOnly(Callback):
    """``writer_only(factory)``: the callback ``factory()`` builds, on the writer rank only.

    In a distributed run only the writer calls the factory (a TensorBoard or W&B callback writes
    when it is built). In a single-process run it is built at train begin and forwards every hook.
    """

    distributed = "writer"

    def __init__(self, factory: Callable[[], Any]) -> None:
        if not callable(factory):
            raise ParamsError("writer_only", f"needs a zero-argument factory, got {type(factory).__name__}")
        self.factory = factory
        self.inner: Callback | None = None

    def build(self) -> Callback:
        """Call the factory (on the writer rank only) and check it returned a Callback."""
        built = self.factory()
        if isinstance(built, Callback):
            return built
        if callable(built):
            return LegacyCallback(built)
        raise ParamsError("writer_only", f"the factory must return a Callback, got {type(built).__name__}")

    def on_train_begin(self, ctx: Any) -> None:
        if self.inner is None:
            self.inner = self.build()
        self.inner.on_train_begin(ctx)

    def on_epoch_begin(self, ctx: Any) -> None:
        if self.inner is not None:
            self.inner.on_epoch_begin(ctx)

    def on_optimizer_update(self, ctx: Any, event: Any) -> None:
        if self.inner is not None:
            self.inner.on_optimizer_update(ctx, event)

    def on_epoch_end(self, ctx: Any) -> None:
        if self.inner is not None:
            self.inner.on_epoch_end(ctx)

    def on_train_end(self, ctx: Any) -> None:
        if self.inner is not None:
            self.inner.on_train_end(ctx)


def writer_only(factory: Callable[[], Any]) -> WriterOnly:
    """A callback built by ``factory()`` on the writer rank alone, e.g.
    ``writer_only(lambda: nnx.TensorBoardCallback())``."""
    return WriterOnly(factory)


def _is_tracker(cb: Any) -> bool:
    return type(cb).__module__ == "nnx_api.callbacks.trackers" and type(cb).__name__ in ("TensorBoardCallback", "WandbCallback")


def _resolve_callbacks(callbacks: Sequence[Any] | None, is_writer: bool) -> tuple[list[Callback], list[Callback]]:
    """(every declared callback, the ones that run on this rank — writer_only ones built here)."""
    cbs = normalize_callbacks(callbacks)
    declarations = [
        agreement.CallbackDeclaration(
            name=type(cb).__name__,
            distributed=getattr(cb, "distributed", None),
            stateful=hasattr(cb, "component_spec"),
            borrowed_tracker=_is_tracker(cb),
        )
        for cb in cbs
    ]
    problems = agreement.callback_problems(declarations)
    if problems:
        raise ParamsError("callbacks", "; ".join(problems))
    here: list[Callback] = []
    for cb in cbs:
        if not agreement.runs_here(cb.distributed, is_writer):  # type: ignore[arg-type]
            continue
        here.append(cb.build() if isinstance(cb, WriterOnly) else cb)
    return cbs, here


class _HookGuard:
    """Epoch-level callback hooks record their failure instead of raising on one rank alone.

    Every rank then reaches the next agreement point (the epoch's start, its commit, the final
    refresh, the finish), where the first failing rank's error is raised on every rank. Later
    hooks of a failed rank are skipped, except ``on_train_end`` (cleanup is always attempted) —
    and, as in one process, ``on_train_end`` only for the callbacks whose ``on_train_begin``
    completed: not the one whose begin failed, nor any after it (their begin never ran).
    """

    HOOKS = ("on_train_begin", "on_epoch_begin", "on_epoch_end", "on_train_end")

    def __init__(self, callbacks: Sequence[Callback]) -> None:
        self.callbacks = list(callbacks)
        self.failure: BaseException | None = None
        self.cleanup_errors: list[BaseException] = []
        self.unbegun_from: int | None = None  # the first callback whose on_train_begin did not complete
        self._patched: list[tuple[Any, str]] = []

    def __enter__(self) -> _HookGuard:
        for index, cb in enumerate(self.callbacks):
            if not hasattr(cb, "__dict__"):
                continue
            for hook in self.HOOKS:
                if overrides(cb, hook, Callback):
                    setattr(cb, hook, self._wrap(getattr(cb, hook), hook, index))
                    self._patched.append((cb, hook))
        return self

    def __exit__(self, *exc: object) -> None:
        for cb, hook in self._patched:
            cb.__dict__.pop(hook, None)
        self._patched.clear()

    def _wrap(self, original: Callable[[Any], None], hook: str, index: int) -> Callable[[Any], None]:
        def guarded(ctx: Any) -> None:
            if hook == "on_train_end" and self.unbegun_from is not None and index >= self.unbegun_from:
                return  # never begun: not finalized
            if self.failure is not None and hook != "on_train_end":
                return
            try:
                original(ctx)
            except Exception as exc:
                if hook == "on_train_begin":
                    self.unbegun_from = index
                if hook == "on_train_end":
                    self.cleanup_errors.append(exc)
                if self.failure is None:
                    self.failure = exc

        return guarded

    def take(self) -> BaseException | None:
        failure, self.failure = self.failure, None
        return failure


# ------------------------------------------------------------------------------- refusals
@attrs.frozen
class DDP:
    """``model.train(params, distributed=DDP())``: data parallel over the torchrun group.

    ``writer_rank`` is the one rank that holds the run lease and writes the run's files.
    """

    writer_rank: int = attrs.field(default=0)

    def __attrs_post_init__(self) -> None:
        if isinstance(self.writer_rank, bool) or not isinstance(self.writer_rank, int) or self.writer_rank < 0:
            raise ParamsError("DDP.writer_rank", f"must be an int ≥ 0, got {self.writer_rank!r}")


def _scope_problems(model: Any, params: Any, collective: TorchCollective, **features: Any) -> list[str]:
    """The seed's out-of-scope list, refused before anything is written (same answer on every rank)."""
    problems = []
    named = {
        "train_step_fn": "custom train steps", "eval_step_fn": "custom validation steps", "objective": "objectives",
        "history": "history journals",
    }
    for key, what in named.items():
        if features.get(key) is not None:
            problems.append(f"{what} ({key}=) are out of scope for distributed runs; use the default step")
    policy = model.params.precision
    if policy is not None and policy.mode != "fp32":
        problems.append(f"mixed precision ({policy.mode}) is out of scope for distributed runs; use fp32")
    norms = sorted({type(m).__name__ for m in model.net.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)})
    if norms:
        problems.append(
            f"batch normalization ({', '.join(norms)}) is refused: its running statistics would differ per rank; "
            "use LayerNorm or GroupNorm"
        )
    try:
        len(params.train_loader)
    except TypeError:
        problems.append("the train loader needs len() (every rank must take the same number of steps); use nnx.distributed.train_loader")
    if params.val_loader is not None and not isinstance(params.val_loader, ShardedValidationLoader):
        problems.append(
            "validation needs nnx.distributed.validation_loader(dataset, batch_size) (each row scored exactly once), "
            f"got {type(params.val_loader).__name__}"
        )
    for loader in (params.train_loader, params.val_loader):
        if isinstance(loader, (ShardedTrainLoader, ShardedValidationLoader)) and loader.world_size != collective.world_size:
            problems.append(f"a loader was built for {loader.world_size} ranks, the group has {collective.world_size}")
    device = model.device.type
    if collective.backend == "nccl" and device != "cuda":
        problems.append("the nccl backend needs the model on CUDA (NNModelParams(device=Devices.CUDA))")
    if collective.backend == "gloo" and device != "cpu":
        problems.append(f"the gloo group trains a CPU model, not {device}; use init_process_group(backend='nccl') on GPUs")
    return problems


def _check_metrics_mergeable(model: Any, params: Any) -> None:
    probe = EpochAccumulator(model.task_adapter, model.head.width, tuple(params.metrics), full_scores=True)
    try:
        statistic_slots(probe, model.head.width)
    except UnmergeableMetricError as exc:
        raise ParamsError("NNTrainParams.metrics", str(exc)) from exc


def _partition_of(loader: Any) -> dict[str, Any]:
    if isinstance(loader, ShardedTrainLoader):
        return loader.partition()
    return {"kind": "custom", "loader": type(loader).__name__, "steps": len(loader)}


# ------------------------------------------------------------------------------- the session
class DistributedSession(TrainingSession):
    """A training session on one rank of the group; every rank runs one, the writer writes.

    Overrides the default step (DDP, agreement before backward), validation (sharded, sums added
    once), the commit and the final refresh (the writer writes, every rank agrees on the outcome),
    the payload (every rank's RNG streams, world size, partition) and restore (this rank's streams).
    """

    def __init__(self, *, collective: TorchCollective, partitions: Sequence[Mapping[str, Any]], guard: _HookGuard, **base: Any) -> None:
        super().__init__(**base)
        self.collective = collective
        self.world = collective.world_size
        self.partitions = [dict(p) for p in partitions]
        self.guard = guard
        self._rank_rngs: list[Any] | None = None
        options: dict[str, Any] = {_BUFFER_SYNC: False}  # batch norm is refused; other buffers sync once at init
        if self.device.type == "cuda":
            options["device_ids"] = [self.device.index if self.device.index is not None else torch.cuda.current_device()]
        self.ddp: DistributedDataParallel | None = DistributedDataParallel(self.model.net, **options)  # never model.net

    def release(self) -> None:
        """Drop the DDP wrapper (model.net stays the plain module)."""
        self.ddp = None

    def _loaders(self) -> list[Any]:
        return [ld for ld in (self.params.train_loader, self.params.val_loader) if ld is not None]

    # ------------------------------------------------------------- batches
    def train_epoch(self, epoch: int) -> None:
        loader = self.params.train_loader
        if hasattr(loader, "set_epoch"):
            loader.set_epoch(epoch)
        agreement.agree_same(
            self.collective, len(loader), f"epoch {epoch}: the number of train batches", self.guard.take(),
            where=f"epoch {epoch} callbacks",
        )
        super().train_epoch(epoch)

    def _default_step(self, batch: Any, epoch: int, batch_idx: int, is_last: bool) -> None:
        numbers = self._ddp_update(batch, epoch, batch_idx, is_last)
        stats = self.stats
        stats.losses.append(torch.tensor(numbers.loss, dtype=torch.float64))
        stats.counts.append(int(numbers.count))
        if self.task.kind != "regression":
            stats.corrects.append(torch.tensor(numbers.correct, dtype=torch.float64))
        stats.rows.append(int(numbers.rows) if self.task.kind == "multilabel" else None)
        stats.lrs.append(self.opt.optimizer.param_groups[0]["lr"])
        stats.updates.append(self.update_count)

    def _ddp_update(self, batch: Any, epoch: int, batch_idx: int, is_last: bool) -> MicrobatchNumbers:
        """One microbatch: forward through DDP, agree before backward, backward, maybe the update."""
        window, task, ddp = self.window, self.task, self.ddp
        assert ddp is not None
        closes = window.microbatches + 1 >= window.accumulate or is_last
        error: BaseException | None = None
        local = MicrobatchNumbers()
        loss_sum = output = target = None
        count = 0
        with contextlib.nullcontext() if closes else ddp.no_sync():  # gradients sync on the window's last microbatch
            try:
                inputs, target = split_batch(batch)
                inputs, target = to_device(inputs, self.device), to_device(target, self.device)
                output = ddp(*inputs) if isinstance(inputs, (tuple, list)) else ddp(inputs)
                task.check(output, target)
                loss_sum, count = task.loss_terms(output, target)
                correct, rows = task.correct(output.detach(), target)
                if correct is None:
                    read = [float(loss_sum.detach())]
                else:
                    read = torch.stack([loss_sum.detach().double(), correct.double()]).tolist()  # one host read
                local = MicrobatchNumbers(
                    loss=read[0], count=float(count), correct=read[1] if len(read) > 1 else 0.0, rows=float(rows or 0)
                )
            except Exception as exc:  # agreed below: every rank raises the same error
                error = exc
            numbers = agreement.agree_microbatch(self.collective, local, error, f"epoch {epoch} batch {batch_idx}")
            assert loss_sum is not None
            if window.accumulate == 1:
                # the window's W is already global: seed the backward with world/W (DDP averages)
                w = numbers.count
                seed = self.world / w if w else 0.0
                loss_sum.backward(torch.full((), seed, dtype=loss_sum.dtype, device=loss_sum.device))
                window.add(self.world if w else 0)
            else:
                loss_sum.backward()  # the numerator only
                window.add(numbers.count)
        if self.summary is not None:
            self.summary.add_loss(loss_sum.detach(), count)
            self.summary.update(output, target)
        if window.ends(is_last):
            self._close_window(epoch, batch_idx)
        return numbers

    def _close_window(self, epoch: int, batch_idx: int) -> None:
        weight, micro = self.window.close()
        committed = commit_update(
            self.opt,
            agreement.update_weight(weight or 0.0, self.world),  # 0: W == 0 on every rank → skipped everywhere
            max_norm=self.optim_params.grad_clip_norm,
            check_finite=lambda: True,  # finiteness was agreed before every backward
        )
        if committed:
            self._on_update(epoch, batch_idx, micro)
        else:
            self.skipped_windows += 1

    # ------------------------------------------------------------- records
    def _score(self, loader: Any, acc: EpochAccumulator) -> int:
        net, task, batches = self.model.net, self.task, 0
        with restored_modes(net), torch.inference_mode():
            net.eval()
            for batch in loader:
                inputs, target = split_batch(batch)
                inputs, target = to_device(inputs, self.device), to_device(target, self.device)
                out = net(*inputs) if isinstance(inputs, (tuple, list)) else net(inputs)
                task.check(out, target)
                loss_sum, count = task.loss_terms(out, target)
                acc.add_loss(loss_sum, count)
                acc.update(out, target)
                batches += 1
        return batches

    def validate(self, epoch: int) -> None:
        """This rank's validation shard and training summary, then one all-reduce of their sums."""
        val_loader = self.params.val_loader
        width = self.model.head.width
        val_acc = EpochAccumulator(self.task, width, self.specs, full_scores=True) if val_loader is not None else None
        error: BaseException | None = None
        batches = 0
        if val_acc is not None:
            try:
                batches = self._score(val_loader, val_acc)
            except Exception as exc:
                error = exc
        accumulators = [a for a in (val_acc, self.summary) if a is not None]
        if accumulators:
            stats = SufficientStatistics(accumulators, width, self.device)
            reduced = agreement.agreed_sum(self.collective, [float(batches), *stats.values()], error, f"epoch {epoch} validation")
            stats.load(reduced[1:])
            if val_acc is not None and not reduced[0]:
                raise TrainingInputError("the validation loader yielded no batches on any rank")
        val = EvaluationDataPoint(**val_acc.result()) if val_acc is not None else None
        summary = EvaluationDataPoint(**self.summary.result()) if self.summary is not None else None
        self._record_epoch(epoch, val, summary)

    # ------------------------------------------------------------- commits
    def _gather_streams(self, where: str) -> None:
        """Every rank's RNG streams to every rank, carrying the hooks' failures (one collective)."""
        own = self.guard.take()
        mine = None if own is None else failure_of(own, self.collective.rank)
        entries = self.collective.all_gather((mine, torch_state.capture_rng(self._loaders())))
        raise_failure(first_failure([e[0] for e in entries]), where, own)
        self._rank_rngs = [e[1] for e in entries]

    def commit(self, epoch: int) -> None:
        """The writer commits; the outcome is agreed, so a failed write stops every rank alike."""
        self._gather_streams(f"epoch {epoch} callbacks")
        error: BaseException | None = None
        if self.collective.is_writer:
            try:
                super().commit(epoch)
            except Exception as exc:
                error = exc
        else:
            self.committed_epoch, self.committed_this_call = epoch, True
        raise_if_failed(self.collective, error, f"commit of epoch {epoch}")

    def finalize(self) -> None:
        if self.committed_epoch is None:
            return
        self._gather_streams("on_train_end callbacks")
        error: BaseException | None = None
        if self.collective.is_writer:
            try:
                super().finalize()
            except Exception as exc:
                error = exc
        raise_if_failed(self.collective, error, "final LAST refresh")

    def payload(self, epoch: int) -> dict[str, Any]:
        out = super().payload(epoch)
        out["kind"] = DDP_KIND
        out["rng"] = {"ranks": list(self._rank_rngs or [])}
        out["distributed"] = {
            "world_size": self.world, "writer_rank": self.collective.writer_rank, "partitions": self.partitions,
        }
        return out

    def restore(self, payload: Mapping[str, Any], *, stateful: bool) -> None:
        """Restore this rank's view of a checkpoint (its own RNG streams)."""
        if not stateful:
            super().restore(payload, stateful=False)
            return
        streams = payload["rng"]["ranks"]
        view = {**payload, "kind": "nnmodel", "rng": streams[self.collective.rank]}
        super().restore(view, stateful=True)


# ------------------------------------------------------------------------------- admission (writer)
@attrs.frozen
class _Plan:
    """The writer's admission answer, broadcast to every rank."""

    action: str  # "fresh" | "continue" | "finished"
    payload: bytes | None = None
    stateful: bool = False
    status: Mapping[str, Any] | None = None
    idps: tuple[IterationDataPoint, ...] = ()


def _refusal(payload: Mapping[str, Any], stateful: bool, world: int, partitions: Sequence[Mapping[str, Any]]) -> str | None:
    kind = payload.get("kind")
    if stateful and kind not in ("nnmodel", DDP_KIND):
        return f"checkpoint was written by {kind!r}; resume it with that entry point"
    saved = payload.get("distributed") if kind == DDP_KIND else None
    return agreement.resume_refusal(saved, stateful=stateful, world_size=world, partitions=partitions)


def _resume_source(params: Any, base: Any, world: int, partitions: Sequence[Mapping[str, Any]]) -> tuple[bytes, dict[str, Any], bool, dict[str, Any]] | None:
    """The writer reads and verifies (SHA-256) the resume point, and refuses it before anything is written."""
    from nnx_api.model import read_resume_source

    found = read_resume_source(params, base)
    if found is not None:
        _, payload, stateful, _ = found
        agreement.refuse_resume(_refusal(payload, stateful, world, partitions))
    return found


def _admit(params: Any, run: NNRun, files: RunFiles, world: int, partitions: Sequence[Mapping[str, Any]]) -> _Plan:
    """``NNModel.train``'s admission, on the writer (under the run lease)."""
    from nnx_api.model import _attempt_completed, admit

    storage, base = files.storage, run.root
    source = _resume_source(params, base, world, partitions)
    check_run_budget(
        params, nnx_owns_windows=True, resumed_schedule=source[1].get("schedule") if source and source[2] else None
    )
    if admit(files, params):
        storage.clean_temporaries(run.id)
        last = files.read_tag(LAST)
        assert last is not None
        loaded = NNRun.load(run.id, base)
        data = files.read_blob(last.blobs["state"])  # verified against its SHA-256
        payload = torch_state.decode(data, where=f"run {run.id} LAST")
        if last.epoch + 1 >= params.n_epochs or _attempt_completed(files):  # finished (e.g. an early stop)
            return _Plan("finished", data, False, loaded.resume_status, loaded.idps)
        agreement.refuse_resume(_refusal(payload, True, world, partitions))
        status = {"mode": "stateful", "source_run": run.id, "source_checkpoint": LAST, "source_epoch": last.epoch}
        return _Plan("continue", data, True, status, loaded.idps)  # metadata.yaml: once the restore is agreed
    storage.clean_temporaries(run.id)  # a kill before run.yaml can leave only temporaries
    status = source[3] if source else None
    attrs.evolve(run, resume_status=status).save()
    return _Plan("fresh", source[0] if source else None, bool(source and source[2]), status, ())


# ------------------------------------------------------------------------------- train
def train_distributed(
    model: Any,
    params: Any,
    ddp: DDP,
    *,
    callbacks: Sequence[Any] | None = None,
    train_step_fn: Any = None,
    eval_step_fn: Any = None,
    salt: str | None = None,
    root: Any = None,
    components: Sequence[Any] | None = None,
    objective: Any = None,
    history: Any = None,
) -> NNRun:
    """``model.train(params, distributed=DDP())`` on this rank; every rank returns the same NNRun."""
    if not isinstance(ddp, DDP):
        raise ParamsError("distributed", f"must be nnx.distributed.DDP(...), got {type(ddp).__name__}")
    collective = TorchCollective(writer_rank=ddp.writer_rank)
    rank, world, writer = collective.rank, collective.world_size, collective.is_writer

    # 1. every check, on every rank; the first failing rank's error is raised everywhere
    error: BaseException | None = None
    run_id = partition = None
    declared: list[Callback] = []
    here: list[Callback] = []
    base = runs_root(root)
    try:
        problems = _scope_problems(
            model, params, collective, train_step_fn=train_step_fn, eval_step_fn=eval_step_fn, objective=objective,
            history=history,
        )
        if problems:
            raise ParamsError("distributed", "; ".join(problems))
        declared, here = _resolve_callbacks(callbacks, writer)
        model._check_train(params, declared, None, None)
        _check_metrics_mergeable(model, params)
        run = NNRun(config=model.run_config(params, salt), root=base)
        run_id, partition = run.id, _partition_of(params.train_loader)
    except Exception as exc:
        error = exc
    gathered = collective.all_gather((None if error is None else failure_of(error, rank), run_id, partition))
    raise_failure(first_failure([g[0] for g in gathered]), "setup", error)
    ids = sorted({g[1] for g in gathered})
    if len(ids) > 1:
        raise ParamsError(
            "distributed", f"the ranks built different run configurations ({', '.join(ids)}); build the model, "
            "params and salt the same way on every rank"
        )
    partitions = [g[2] for g in gathered]
    problems = agreement.partition_problems(partitions)
    if problems:
        raise TrainingInputError("the ranks' train loaders disagree: " + "; ".join(problems))

    # 2. admission: the writer alone holds the lease, reads and verifies; it broadcasts the plan or the refusal
    storage = FileStorage(base)
    files = RunFiles(storage, run.id)
    with contextlib.ExitStack() as lease:
        lease.callback(collective.close)  # the shared-memory segment (an earlier exit leaves it to the GC)
        plan: _Plan | Failure | None = None
        error = None
        if writer:
            try:
                lease.enter_context(storage.lease(run.id))
                plan = _admit(params, run, files, world, partitions)
            except Exception as exc:
                error = exc
                plan = failure_of(exc, rank)
        plan = collective.broadcast(plan, src=collective.writer_rank)
        if isinstance(plan, Failure):
            raise_failure(plan, "admission", error)
        assert isinstance(plan, _Plan)
        payload = None if plan.payload is None else torch_state.decode(plan.payload, where=f"run {run.id} resume point")
        if plan.action == "finished":
            model.net.load_state_dict(payload["weights"])  # type: ignore[index]
            return NNRun(config=run.config, root=base, idps=plan.idps, resume_status=plan.status)
        try:
            return _train(model, params, collective, run, files, plan, payload, here, components or (), partitions)
        except Exception:
            if writer and plan.action == "fresh":  # a run that never committed is removed, so the id can be retried
                with contextlib.suppress(Exception):
                    if not storage.exists(files.tag_path(LAST)):
                        storage.remove_tree(run.id)
            raise


def _train(
    model: Any, params: Any, collective: TorchCollective, run: NNRun, files: RunFiles, plan: _Plan,
    payload: dict[str, Any] | None, callbacks: list[Callback], components: Sequence[Any],
    partitions: Sequence[Mapping[str, Any]],
) -> NNRun:
    from nnx_api.model import NNModel, _progress

    rank, writer = collective.rank, collective.is_writer
    fresh = plan.action == "fresh"
    run = attrs.evolve(run, idps=plan.idps, resume_status=plan.status)
    if params.seed is not None and payload is None:
        torch_state.set_seed(params.seed)
    optimizer = model._optimizer(params)
    start = offset = 0
    if payload is not None:
        start = int(payload["epoch"]) + 1
        offset = 0 if not fresh else start  # a new lineage run trains n_epochs more epochs
    history = EagerHistory(run.idps if not fresh else ())
    guard = _HookGuard(callbacks)
    session = DistributedSession(
        collective=collective, partitions=partitions, guard=guard, model=model, params=params, run=run, files=files,
        callbacks=callbacks, components=components, train_step_fn=None, eval_step_fn=None, optimizer=optimizer,
        start_epoch=start, phase_offset=offset, history=history,
    )
    session._iter_idx = len(history.idps) if not fresh else 0
    attempt = new_attempt(run.id)
    session.attempt = attempt
    error: BaseException | None = None
    try:  # restore and the writer's attempt record: agreed
        if payload is not None:
            session.restore(payload, stateful=plan.stateful)
        if params.seed is not None and not plan.stateful:
            torch_state.set_seed(params.seed + rank)  # each rank draws its own stream (e.g. dropout)
        if writer:
            if plan.action == "continue":  # the resume is recorded only once the restore accepted it
                files.storage.write(files.metadata_yaml, dump_yaml(run.metadata()))
            attempt.save(files)
    except Exception as exc:
        error = exc
    raise_if_failed(collective, error, "restore")
    session.committed_epoch = history.idps[-1].epoch_idx if history.idps else None
    optimizer.zero_grad()
    show = writer and progress_enabled(params.progress)
    try:
        try:
            with guard, _progress(session, show):
                run_lifecycle(session, callbacks, session.ctx, base=Callback)
        except BaseException as exc:
            if writer:
                NNModel._on_failure(files, session, attempt, exc, fresh)
            for cleanup in guard.cleanup_errors:
                warnings.warn(f"on_train_end failed while another error was propagating: {cleanup!r}", CleanupWarning, stacklevel=2)
            raise
        error = guard.take()
        if writer and error is None:
            try:
                attempt.status, attempt.finished_at = "stopped" if session.stopped_at_update() else "completed", now()
                attempt.save(files)
            except Exception as exc:
                error = exc
        try:
            raise_if_failed(collective, error, "finish")
        except Exception as exc:
            if writer:
                NNModel._on_failure(files, session, attempt, exc, fresh)
            raise
    finally:
        session.release()
    if show:
        print(f"Run saved to {run.path}")
    return NNRun(config=run.config, root=run.root, idps=tuple(session.history.idps), resume_status=run.resume_status)


__all__ = [
    "DDP",
    "DistributedSession",
    "GroupInfo",
    "ShardedTrainLoader",
    "ShardedValidationLoader",
    "WriterOnly",
    "init_process_group",
    "partition_indices",
    "refuse_process_group",
    "shutdown",
    "train_distributed",
    "train_loader",
    "validation_loader",
    "writer_only",
]
