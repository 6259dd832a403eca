"""What ``DDP()`` changes in the one training pipeline (seed §3): the group behaviour and how the
default step's microbatches join.

``DataParallel`` is the session's group behaviour over the ``Collective`` port: the same run id
and partition on every rank, the epoch's number of steps agreed at its start, the ranks'
sufficient statistics added once per epoch (records are global), every rank's RNG streams in each
checkpoint, and a resume refused unless it has the same world size and partition.

``RankSync`` hooks the group into the one built-in step (``nnx_api.training.builtin_step``):
its forward and backward go through ``DistributedDataParallel``, whose gradient buckets it sums
(a comm hook). One update::

    forward + backward through DDP       no_sync until the window's last microbatch
       │  loss numerator only; the last bucket's all-reduce carries [failed, non-finite, count]
       │  (a rank that failed sends zeros of the same buckets, then every rank raises its error)
    window end: W = the summed count     W == 0 → the update is skipped on every rank
    grad = Σ gradients / W  →  clip  →  optimizer.step()   (identical on every rank)

Until DDP's buckets are settled (the first windows of each fit), and always with fp16 or
SyncBatchNorm, each microbatch is agreed before its backward instead ([count, non-finite,
failed], one all-reduce); a fit that fuses computes the same bits either way (an exact resume).
Each committed update equals one process training on the union of the ranks' batches. Records
are this rank's sums, added over the group at the epoch's end (``EpochStats.edps``). The rules
live in ``nnx_core.agreement``; traffic per step and per epoch: docs/distributed.md.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import inspect
import math
import socket
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from nnx_core import agreement
from nnx_core.commit import LAST, RunFiles, TagManifest
from nnx_core.errors import CorruptRunError, ParamsError, TrainingInputError
from nnx_adapters.pytorch import state as torch_state
from nnx_adapters.pytorch.metrics import EpochAccumulator
from nnx_adapters.pytorch.statistics import SufficientStatistics, UnmergeableMetricError, statistic_slots
from nnx_api.distributed.callbacks import resolve_callbacks
from nnx_api.distributed.loaders import PositionedShards, ShardedTrainLoader, ShardedValidationLoader, partition_of
from nnx_api.distributed.process_group import agree_given
from nnx_api.distributed.steps import CustomSync, ObjectiveSync, joined_record
from nnx_api.runs.payload import CheckpointPayload
from nnx_api.training.batch_checks import batch_problem
from nnx_api.training.builtin_step import batch_place
from nnx_api.training.partial import load_tree, tree_state

# no buffer broadcast before every forward ("forward_sync_buffers" in newer torch, "broadcast_buffers" before)
_BUFFER_SYNC = (
    "forward_sync_buffers"
    if "forward_sync_buffers" in inspect.signature(DistributedDataParallel.__init__).parameters
    else "broadcast_buffers"
)


# the devices on which DDP admits fp16 (a GradScaler: CUDA, as in one process) and batch norm
# (torch's SyncBatchNorm needs CUDA); tests on CPU widen them to fake a GPU (tests/integration)
FP16_DEVICES = frozenset({"cuda"})
SYNC_NORM_DEVICES = frozenset({"cuda"})


class RankSync:
    """How the default step's microbatches join across the ranks (module docstring): through DDP,
    whose gradient buckets carry the window's agreement, divided by the group's W."""

    agrees_finite = True  # a non-finite loss on any rank is agreed (``weight`` raises it on every rank)

    def __init__(self, collective: Any) -> None:
        self.collective = collective
        self.ddp: DistributedDataParallel | None = None
        # fused once DDP's buckets are known, unless a forward holds a collective (SyncBatchNorm: a
        # failed rank could not catch up) or fp16 scales the loss (its backward keeps the 1/W seed
        # agreed before it, which bounds the scaled gradients); a fit that may fuse never seeds,
        # so its agreed and fused windows compute the same bits (an exact resume)
        self.fusable = True
        self.seeds = False
        self.fused = False  # this window's agreement rides in its gradient buckets
        self.layout: list[tuple[int, torch.dtype, bool]] = []  # the last closing backward's buckets
        self._last: list[tuple[int, torch.dtype, bool]] = []  # the one before (equal: the layout is settled)
        self._buckets: list[tuple[int, torch.dtype, bool]] = []  # this closing backward's, so far
        self._open = False
        self._count = 0.0  # this window's valid count on this rank (fused)
        self._loss: torch.Tensor | None = None  # this window's loss numerator on this rank (fused)
        self._reduced: torch.Tensor | None = None
        self._where = ""

    def bind(self, state: Any, net: Any) -> DistributedDataParallel:
        """Wrap the model for this fit (never assigned to ``model.net``: checkpoints keep its keys),
        its gradient buckets summed by ``_bucket``."""
        # buffers sync once at init; batch norm's (CUDA only) are SyncBatchNorm's, computed over the union
        options: dict[str, Any] = {_BUFFER_SYNC: False}
        device = state.device
        if device.type == "cuda":
            options["device_ids"] = [device.index if device.index is not None else torch.cuda.current_device()]
        self.ddp = DistributedDataParallel(state.model.net, **options)
        # the hook holds this RankSync weakly: DDP keeps its hook in C++, where Python's collector
        # cannot see the cycle back to the wrapper, so a strong reference would keep every fit's
        # DDP (its gradient buckets, its autograd hooks on the model's parameters) until exit
        me = weakref.ref(self)
        self.ddp.register_comm_hook(None, lambda _state, bucket: me()._bucket(bucket))  # type: ignore[union-attr]  # unannotated: DDP checks them
        scaled = getattr(state.optimizers[state.primary], "scaler", None) is not None
        self.fusable = not scaled and not any(isinstance(m, nn.SyncBatchNorm) for m in state.model.net.modules())
        self.seeds = not self.fusable
        return self.ddp

    def _bucket(self, bucket: Any) -> torch.futures.Future[torch.Tensor]:
        """DDP's gradient bucket, summed over the ranks; the last one of the backward carries the
        window's numbers (every window, so the all-reduces and their bits are the same whether the
        window is fused or not), summed in place beside it in one coalesced all-reduce (no copy
        of the gradients in Python)."""
        grads, last = bucket.buffer(), bucket.is_last()
        self._buckets.append((grads.numel(), grads.dtype, last))
        group = dist.group.WORLD  # DDP's
        if not last:
            return group.allreduce([grads]).get_future().then(_first)  # type: ignore[union-attr]
        numbers = torch.tensor([0.0, 0.0, self._count, *self._riding()], dtype=grads.dtype, device=grads.device)  # WINDOW_SLOTS
        if self._loss is not None:
            numbers[1] = (~torch.isfinite(self._loss)).to(grads.dtype)  # on the device: no host sync
        self._reduced = numbers  # summed in place by the time backward returns
        return group.allreduce_coalesced([grads, numbers]).get_future().then(_first)  # type: ignore[union-attr]

    def _riding(self) -> list[float]:
        """The numbers the collective's rider adds to every all-reduce (none without one)."""
        rider = getattr(self.collective, "rider", None)
        return rider.local() if rider is not None else []

    def overflow(self, found: bool) -> bool:
        """The fp16 scaler's overflow decision over the group (``AgreedGradScaler``, at the
        window's ``unscale_``): the gradients are summed, so every rank found the same; agreed
        anyway (one all-reduce of one number), so the skip-or-step decision cannot diverge."""
        return self.collective.all_reduce_sum([1.0 if found else 0.0])[0] > 0

    def microbatch(self, closes: bool) -> contextlib.AbstractContextManager[Any]:
        """Gradients synchronise on the window's last microbatch only."""
        assert self.ddp is not None
        return contextlib.nullcontext() if closes else self.ddp.no_sync()

    def agree(
        self, state: Any, part: Any, error: BaseException | None, batch: Any, epoch: int, batch_idx: int
    ) -> float:
        """A microbatch's failure or non-finite loss, on any rank, is raised on every rank: agreed
        here, before backward, until DDP's buckets are known (the first windows of a fit); then
        with the window's gradients (``weight``), a failed rank sending zeros of the same buckets.
        Returns the denominator the window adds: the group's count (agreed) or this rank's (fused)."""
        if not self._open:  # a window opens: every rank decides alike (the layouts are the same)
            self._open, self.fused = True, self.fusable and self.layout == self._last and _summable(self.layout)
        self._where = f"epoch {epoch} batch {batch_idx}"
        if error is not None:
            error = batch_problem(state.model, batch, batch_place(epoch, batch_idx)) or error
        if not self.fused:  # the group's count: this microbatch's share of W
            finite = error is None and math.isfinite(float(part.loss))
            return agreement.agree_microbatch(self.collective, 0.0 if error else float(part.count), finite, error, self._where)
        if error is not None:
            group = dist.group.WORLD
            for size, dtype, last in self.layout:  # the all-reduces the others are about to make
                zeros = [torch.zeros(size, dtype=dtype, device=state.device)]
                if last:
                    failed = torch.tensor([*agreement.FAILED_WINDOW, *self._riding()], dtype=dtype, device=state.device)
                    group.allreduce_coalesced([*zeros, failed]).wait()  # type: ignore[union-attr]
                else:
                    group.allreduce(zeros).wait()  # type: ignore[union-attr]
            agreement.fail_window(self.collective, error, self._where)
        self._count += float(part.count)
        self._loss = part.loss if self._loss is None else self._loss + part.loss
        return float(part.count)

    def weight(self, window_weight: float | None) -> float | None:
        """The window's end, after its backward: the fused verdict (a failure or non-finite loss
        on any rank raised on every rank), then what the summed gradients are divided by: the
        group's W (0 skips the update on every rank; None, an additive loss: the ranks' sum)."""
        count = window_weight  # agreed before backward: the window's sum of the group's counts
        if self.fused:
            assert self._reduced is not None
            reduced, slots = self._reduced.tolist(), len(agreement.WINDOW_SLOTS)
            rider = getattr(self.collective, "rider", None)
            if rider is not None:  # the window's commit-point answers (they ride here as on every all-reduce)
                rider.note(reduced[slots:])
            summed = agreement.agree_window(self.collective, reduced[:slots], self._where)
            count = None if window_weight is None else summed
        self._last, self.layout, self._buckets = self.layout, self._buckets, []
        self._open, self._count, self._loss, self._reduced = False, 0.0, None, None
        return count

    def finite(self, window_loss: Any) -> Callable[[], bool]:
        """The window's finiteness: already agreed (``agree`` before backward, or ``weight``)."""
        return _agreed_finite


def _agreed_finite() -> bool:
    """A window whose finiteness every rank has agreed on (a non-finite one raised before)."""
    return True


def _first(done: torch.futures.Future[list[torch.Tensor]]) -> torch.Tensor:
    """A process-group future's tensor, as DDP wants a comm hook's result."""
    return done.value()[0]


def _summable(layout: Sequence[tuple[int, torch.dtype, bool]]) -> bool:
    """Whether the last bucket of this layout can carry the window's numbers: float32 or float64
    (a count stays exact below 2**24 valid targets per window)."""
    return any(last and dtype in (torch.float32, torch.float64) for _, dtype, last in layout)


class DataParallel:
    """The session's group behaviour on one rank of a torchrun group (module docstring)."""


    def __init__(self, collective: Any, writer_rank: int) -> None:
        self.collective = collective
        self.writer_rank = writer_rank  # DDP(writer_rank=...), until place_writer finds the run elsewhere
        self.partitions: list[dict[str, Any]] = []
        self.reshard = False  # resume_mode="reshard": a checkpoint of another world size may be restored
        self.norms: list[tuple[nn.Module, str, nn.Module]] = []  # batch norms swapped for SyncBatchNorm (CUDA)

    def place_writer(self, run_id: str, storage: Any) -> str | None:
        """Where the run continues, when each node may have its own runs root: every rank reports
        what its own root holds of ``run_id`` (LAST's epoch and the SHA-256 of LAST's manifest,
        no blob read), in one all-gather, and the newest committed state wins
        (``agreement.writer_for``): its holder becomes the writer for this call, so a run is never
        started over while any rank's root holds a committed LAST. Different copies of one
        epoch are refused on every rank, naming both places. Returns what to tell the user
        (the writer moved, older copies left as they are), or None."""
        holdings = agreement.gathered(self.collective, "setup", lambda: holding(storage, run_id))
        configured, writer = self.writer_rank, agreement.writer_for(holdings, self.writer_rank)
        self.writer_rank = writer
        if hasattr(self.collective, "writer_rank"):
            self.collective.writer_rank = writer
        return placement_note(holdings, configured, writer)

    # ------------------------------------------------------------- before training
    def agree_given(self, entry: Any) -> None:
        """The run's first collective: what each rank was given (callbacks, writer rank, step
        functions, objective, precision, history, configuration) must be the same; a difference is
        refused on every rank, naming it (``nnx_api.distributed.process_group.agree_given``)."""
        agree_given(self.collective, entry, self.writer_rank)

    def join_record(self, record: Any, error: BaseException | None, where: str) -> Any:
        """A custom validation's records of the ranks' shards as one, identical on every rank
        (``joined_record``: weighted by each record's ``count``); any rank's error on every rank."""
        return joined_record(self.collective, record, error, where)

    def objective_sync(self) -> ObjectiveSync:
        """How an objective's readings, gradients and records join across this group."""
        return ObjectiveSync(self.collective)

    def custom_sync(self) -> CustomSync:
        """How a custom step's gradients and records join across this group."""
        return CustomSync(self.collective)

    def step_sync(self) -> RankSync:
        """How the default step's microbatches join across this group."""
        return RankSync(self.collective)

    def resolve_callbacks(self, callbacks: Sequence[Any]) -> tuple[list[Any], list[Any]]:
        """(every declared callback, the ones that run on this rank)."""
        return resolve_callbacks(callbacks, self.collective.rank == self.writer_rank)

    def check(self, entry: Any) -> None:
        """The seed's out-of-scope list and the metrics that cannot be added across ranks."""
        problems = scope_problems(entry, self.collective)
        if problems:
            raise ParamsError("distributed", "; ".join(problems))
        model = entry.model
        probe = EpochAccumulator(model.task_adapter, model.head.width, tuple(entry.train.metrics), full_scores=True)
        try:
            statistic_slots(probe, model.head.width)
        except UnmergeableMetricError as exc:
            raise ParamsError("NNTrainParams.metrics", str(exc)) from exc
        if model.device.type in SYNC_NORM_DEVICES:  # before DDP wraps the net and any training forward; undone by close()
            self.norms.extend(sync_batch_norms(model.net))

    def setup(self, run_id: str, params: Any) -> None:
        """Every rank built the same run and deals the same data (only its rank differs)."""
        gathered = self.collective.all_gather((run_id, partition_of(params.train_loader)))
        ids = sorted({g[0] for g in gathered})
        if len(ids) > 1:
            raise ParamsError(
                "distributed", f"the ranks built different run configurations ({', '.join(ids)}); build the model, "
                "params and salt the same way on every rank"
            )
        self.partitions = [dict(g[1]) for g in gathered]
        self.reshard = params.resume_mode == "reshard"
        problems = agreement.partition_problems(self.partitions)
        if problems:
            raise TrainingInputError("the ranks' train loaders disagree: " + "; ".join(problems))

    def refusal(self, payload: CheckpointPayload, stateful: bool) -> str | None:
        """A stateful resume needs a checkpoint of this world size and partition (another world size:
        ``resume_mode="reshard"`` and a deal that fixed the global batch)."""
        return agreement.resume_refusal(
            payload.distributed_state(), stateful=stateful, world_size=self.collective.world_size, partitions=self.partitions,
            reshard=self.reshard,
        )

    def kind(self, entry_kind: str) -> str:
        """The payload kind of a distributed checkpoint: ``nnmodel-ddp`` or ``trainer-ddp``."""
        return f"{entry_kind}-ddp"

    def accepted_kinds(self, entry_kind: str) -> tuple[str, ...]:
        """A run of the entry's own single-process kind (its resume is refused on the partition)."""
        return (entry_kind,)

    def positioned(self, loader: Any, seed: int) -> PositionedShards | None:
        """The train loader NNx positions inside an epoch (``commit_every``, a preemption): a
        ``train_loader``'s deal (``PositionedShards``); None for any other loader."""
        return PositionedShards(loader) if isinstance(loader, ShardedTrainLoader) else None

    def position_refusal(self, loader: Any) -> str | None:
        """Why NNx cannot position ``loader`` inside an epoch of this group (None: it can)."""
        if isinstance(loader, ShardedTrainLoader):
            return None
        return (f"{type(loader).__name__} under DDP() is not NNx's deal; use nnx.distributed.train_loader(dataset, ...), "
                "whose epochs NNx skips into by index, or leave commit_every unset: commits at epoch ends still work")

    def ride(self, points: Any) -> None:
        """The commit points' answers (a signal on one rank, each rank's clock) ride on every
        all-reduce of this group, so every rank commits at the same update (``CommitPoints``). A
        collective without a ``rider`` (one of the user's) agrees them in an all-reduce of their
        own at each update boundary instead."""
        if not points.rides:
            return
        points.ride()
        if hasattr(self.collective, "rider"):
            self.collective.rider = points
        else:
            points.vote = self.collective.all_reduce_sum

    # ------------------------------------------------------------- during training
    def partial_state(self, local: dict[str, Any]) -> dict[str, Any]:
        """A mid-epoch commit's per-rank part (accumulators, samples): every rank's (one gather);
        ``samples``: the group's."""
        ranks = self.collective.all_gather(local)
        return {**local, "samples": sum(int(r["samples"]) for r in ranks), "summary": None, "ranks": ranks}

    def partial_view(self, saved: dict[str, Any], model: Any, fresh: Any) -> dict[str, Any]:
        """This rank's part of a mid-epoch commit (``partial_state``). On another world size
        (``resume_mode="reshard"``) rank 0 takes the sums of every old rank's training summary
        into ``fresh`` (an empty accumulator of the run) and the others start empty: the epoch's
        summary adds the same numbers, in another order."""
        ranks, rank = saved["ranks"], self.collective.rank
        if len(ranks) == self.collective.world_size:
            return dict(ranks[rank])
        if rank or fresh is None or not isinstance(fresh, EpochAccumulator):
            return {**ranks[0], "summary": None, "samples": 0, "record_sizes": ranks[0]["record_sizes"]}
        return {**ranks[0], "summary": summed_summary(fresh, [r["summary"] for r in ranks], model),
                "samples": sum(int(r["samples"]) for r in ranks)}

    def begin_epoch(self, train_loader: Any, epoch: int) -> None:
        """Every rank must take the same number of steps this epoch (refused on every rank)."""
        agreement.agree_same(self.collective, len(train_loader), f"epoch {epoch}: the number of train batches")

    def reduce(
        self, model: Any, accumulators: Sequence[Any], batches: int, error: BaseException | None, where: str
    ) -> int:
        """Add every rank's sums (and validation batch counts) in one all-reduce; the failure of
        any rank is raised on every rank. Returns the batches scored over all ranks."""
        stats = SufficientStatistics(accumulators, model.head.width, model.device)
        reduced = agreement.agreed_sum(self.collective, [float(batches), *stats.values()], error, where)
        stats.load(reduced[1:])
        return int(reduced[0])

    def total(self, counts: torch.Tensor) -> torch.Tensor:
        """Per-batch class counts summed over the ranks (one all-reduce for the epoch, in rank
        order: every rank gets the same bits), so each batch is scored as the union of the ranks'
        microbatches, as one process scores its batch."""
        summed = self.collective.all_reduce_sum(counts.flatten().tolist())
        return torch.tensor(summed, dtype=counts.dtype, device=counts.device).view_as(counts)

    def rng(self, loaders: Sequence[Any]) -> Any:
        """Every rank's RNG streams, to every rank (one gather)."""
        return {"ranks": list(self.collective.all_gather(torch_state.capture_rng(loaders)))}

    def distributed_record(self) -> dict[str, Any] | None:
        """A checkpoint's ``distributed`` record: world size, writer and partitions, what a
        stateful resume must match."""
        return {"world_size": self.collective.world_size, "writer_rank": self.writer_rank, "partitions": self.partitions}

    def restore_view(self, payload: CheckpointPayload) -> CheckpointPayload:
        """This rank's view of a distributed checkpoint: its own RNG streams (resharded: a new
        rank's are derived, ``CheckpointPayload.reshard_view``)."""
        if len(payload.rng["ranks"]) != self.collective.world_size:
            return payload.reshard_view(self.collective.rank)
        return payload.rank_view(self.collective.rank)

    def close(self) -> None:
        """Put the net's own batch norms back (``restore_batch_norms``), take this call's commit
        points off the collective and release it (the shared-memory segment, when opted in)."""
        norms, self.norms = self.norms, []
        restore_batch_norms(norms)
        if getattr(self.collective, "rider", None) is not None:  # this call's commit points ride no more
            self.collective.rider = None
        close = getattr(self.collective, "close", None)
        if close is not None:
            close()


def summed_summary(fresh: EpochAccumulator, states: Sequence[Any], model: Any) -> Any:
    """The state (``tree_state``) of ``fresh`` holding the sums of the training-summary states
    ``states`` (one per rank of a mid-epoch commit)."""
    total: list[float] | None = None
    for state in states:
        values = SufficientStatistics([load_tree(copy.deepcopy(fresh), state)], model.head.width, model.device).values()
        total = values if total is None else [a + b for a, b in zip(total, values, strict=True)]
    assert total is not None
    load_tree(fresh, states[0])
    SufficientStatistics([fresh], model.head.width, model.device).load(total)
    return tree_state(fresh)


def holding(storage: Any, run_id: str) -> agreement.Holding:
    """What this rank's runs root holds of the run: LAST's epoch, committed updates and manifest
    digest (cheap: one small file read, no blob hashed), or that LAST is there but unreadable."""
    place = f"{socket.gethostname()}:{getattr(storage, 'root', storage)}"
    files = RunFiles(storage, run_id)
    try:
        data = storage.read(files.tag_path(LAST))
    except FileNotFoundError:
        return agreement.Holding(place)
    try:
        last = TagManifest.from_bytes(data, tag=LAST, run_id=run_id)
    except CorruptRunError:
        return agreement.Holding(place, unreadable=True)
    updates = last.meta.get("update_count")
    return agreement.Holding(place, last.epoch, hashlib.sha256(data).hexdigest(),
                             updates=updates if isinstance(updates, int) else 0)


def placement_note(holdings: Sequence[agreement.Holding], configured: int, writer: int) -> str | None:
    """What the user is told where the run is not where ``DDP(writer_rank=...)`` would write it,
    or where another root keeps an older copy (left as it is)."""
    chosen = holdings[writer]
    parts = []
    if writer != configured:
        held = "an unreadable LAST" if chosen.unreadable else f"its newest committed epoch ({chosen.epoch})"
        parts.append(f"rank {writer}'s runs root {chosen.place} holds {held}, so rank {writer} writes this run "
                     f"instead of rank {configured}")
    places = {chosen.place}
    for rank, h in enumerate(holdings):
        if h.place not in places and h.epoch is not None and h.digest != chosen.digest:
            places.add(h.place)
            parts.append(f"rank {rank}'s runs root {h.place} keeps an older copy (epoch {h.epoch}), left as it is")
    return "; ".join(parts) or None


def sync_batch_norms(net: nn.Module) -> list[tuple[nn.Module, str, nn.Module]]:
    """Swap every batch normalization below ``net`` for a ``torch.nn.SyncBatchNorm``
    (``convert_sync_batchnorm``), in place, so a training forward normalises over the union of
    the ranks' batches and every rank keeps the same running statistics — one process's batch
    norm on the union. The SyncBatchNorm holds the original's parameters and buffers (the same
    tensors, the same state-dict keys), so the optimizer, checkpoints and the run identity are
    unchanged. Returns ``(parent, name, original)`` for ``restore_batch_norms``. (``net`` itself
    cannot be swapped in place: ``scope_problems`` refuses a net that is one batch norm.)"""
    swapped = []
    for parent in list(net.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.modules.batchnorm._BatchNorm) and not isinstance(child, nn.SyncBatchNorm):
                parent._modules[name] = nn.SyncBatchNorm.convert_sync_batchnorm(child)
                swapped.append((parent, name, child))
    return swapped


def restore_batch_norms(swapped: Sequence[tuple[nn.Module, str, nn.Module]]) -> None:
    """Put the original batch norms back where ``sync_batch_norms`` swapped them, holding the
    SyncBatchNorm's current parameters, buffers and mode (what training left)."""
    for parent, name, original in reversed(swapped):
        synced = parent._modules[name]
        if synced is not None:
            original._parameters.update(synced._parameters)
            original._buffers.update(synced._buffers)
            original.training = synced.training
        parent._modules[name] = original


def scope_problems(entry: Any, collective: Any) -> list[str]:
    """The seed's out-of-scope list, refused before anything is written (same answer on every rank)."""
    model, params = entry.model, entry.train
    problems = []
    full = [
        type(cb).__name__ for cb in entry.callbacks
        if getattr(cb, "history_access", None) == "full" and getattr(cb, "distributed", None) != "writer"
    ]
    if entry.history is not None and full:
        problems.append(
            f"callbacks reading the full history (history_access='full': {', '.join(full)}) would run on every rank, but "
            "only the writer holds the journal; declare distributed = 'writer' on them"
        )
    policy = model.params.precision
    mode = policy.mode if policy is not None and policy.mode != "fp32" else model.precision  # NNx's mixed_precision flag too
    device = model.device.type
    if mode == "fp16" and device not in FP16_DEVICES:
        problems.append(
            "fp16 needs CUDA (it uses a GradScaler): under DDP it trains on the nccl group's GPUs only, and on "
            f"{device} it is refused, even with fallback='fp32' or mixed_precision; use PrecisionPolicy('bf16') or fp32"
        )
    elif mode == "fp16" and getattr(entry, "step_fn", None) is not None and getattr(entry.kind, "named_optimizers", False):
        problems.append(
            "fp16 with a trainer_step_fn is refused under DDP: the step owns its loss scaling, so its GradScaler would "
            "decide skip-or-step on each rank alone; use an objective (its scaler is agreed), bf16 or fp32"
        )
    norms = sorted({type(m).__name__ for m in model.net.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)})
    if norms and device not in SYNC_NORM_DEVICES:
        problems.append(
            f"batch normalization ({', '.join(norms)}) is refused on {device}: each rank's running statistics would "
            "be its own batches', and torch's SyncBatchNorm, which computes them over the union of the ranks' "
            "batches, runs on CUDA only; use LayerNorm or GroupNorm, or train on GPUs (nccl), where NNx converts "
            "batch norm to SyncBatchNorm"
        )
    elif isinstance(model.net, nn.modules.batchnorm._BatchNorm):
        problems.append(
            f"the net is itself a batch normalization ({type(model.net).__name__}), which cannot be converted to "
            "SyncBatchNorm in place; wrap it (nn.Sequential(norm))"
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
    backend = getattr(collective, "backend", None)
    if backend == "nccl" and device != "cuda":
        problems.append("the nccl backend needs the model on CUDA (NNModelParams(device=Devices.CUDA))")
    if backend == "gloo" and device != "cpu":
        problems.append(f"the gloo group trains a CPU model, not {device}; use init_process_group(backend='nccl') on GPUs")
    return problems
