"""The group of one process: ``SingleProcess``, the ``Group`` role (``nnx_api.training.roles``)
when no ``DDP()`` is given — nothing to agree, reduce or gather — and ``LocalSync``, how the one
default step's microbatches join in it. ``nnx_api.distributed``'s ``DataParallel`` and
``RankSync`` play the same roles over a torchrun group."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import attrs
import torch

from nnx_core.errors import ParamsError
from nnx_adapters.collective.local import LocalCollective
from nnx_adapters.pytorch import state as torch_state
from nnx_api.runs.payload import CheckpointPayload
from nnx_api.training.checks import batch_problem


class LocalSync:
    """How the default step's microbatches join in one process: nothing to agree (a failure is
    raised here, naming the batch), the window's own count divides it, and its finiteness is read
    once at the window's end. ``nnx_api.distributed`` supplies the group form (``RankSync``)."""

    seeds = True  # W is known before backward: a one-microbatch window seeds its backward with 1/W
    agrees_finite = False  # finiteness is checked at the window's end (one read), not agreed per microbatch

    def bind(self, state: Any, net: Any) -> Any:
        """The module the step runs forward through: the net (or its compiled forward)."""
        return net

    def microbatch(self, closes: bool) -> contextlib.AbstractContextManager[Any]:
        """Around one microbatch's forward and backward: nothing."""
        return contextlib.nullcontext()

    def agree(
        self, state: Any, part: Microbatch, error: BaseException | None, batch: Any, epoch: int, batch_idx: int
    ) -> float:
        """Raise this microbatch's failure (naming what is wrong with the batch when the first
        batch's checks find it); else its denominator: the valid count."""
        if error is not None:
            where = batch_place(epoch, batch_idx)  # built only on a failure: nothing per batch
            problem = batch_problem(state.model, batch, where) if isinstance(error, _BATCH_ERRORS) else None
            if problem is None:
                raise error
            raise problem from error
        return part.count

    def weight(self, window_weight: float | None) -> float | None:
        """What the window's gradients are divided by: its denominator W."""
        return window_weight

    def record(self, state: Any, part: Microbatch, denominator: float) -> None:
        """The batch's statistics, on the device."""
        state.stats.add_output(part.loss, part.count, part.output, part.target, state.task)


def batch_place(epoch: int, batch_idx: int) -> str:
    """How errors name a training batch."""
    return f"train_loader's batch {batch_idx} (0-based) of epoch {epoch}"


_BATCH_ERRORS = (RuntimeError, IndexError, TypeError, ValueError)  # what a batch unlike the first raises in torch


@attrs.define(slots=True)
class Microbatch:
    """One microbatch of the default step: its detached loss numerator, valid count, detached
    output and target (this rank's), and its correct count and rows (for a group's agreement)."""

    loss: torch.Tensor
    count: int
    output: torch.Tensor
    target: torch.Tensor


class SingleProcess:
    """The group behaviour of one process: a group of one, so nothing to agree, reduce or gather."""

    total = None  # a group of one's per-batch sums are already the whole batch's: nothing to add
    writer_rank = 0

    def __init__(self) -> None:
        self.collective = LocalCollective()

    def accepted_kinds(self, entry_kind: str) -> tuple[str, ...]:
        """Other checkpoint kinds a stateful resume restores: none (one process restores its own)."""
        return ()

    def agree_given(self, entry: Any) -> None:
        """One process: nothing to compare."""

    def place_writer(self, run_id: str, storage: Any) -> str | None:
        """One process writes where it runs: nothing to place."""
        return None

    def join_record(self, record: Any, error: BaseException | None, where: str) -> Any:
        """A custom validation's record is already the whole one (an error is raised as it is)."""
        if error is not None:
            raise error
        return record

    def objective_sync(self) -> None:
        """An objective in one process: its readings are already the whole batch's."""
        return None

    def custom_sync(self) -> None:
        """A custom step in one process: nothing to join."""
        return None

    def step_sync(self) -> LocalSync:
        """How the default step's microbatches join: in this process alone."""
        return LocalSync()

    def resolve_callbacks(self, callbacks: Sequence[Any]) -> tuple[list[Any], list[Any]]:
        """(every declared callback, the ones that run here): all of them."""
        return list(callbacks), list(callbacks)

    def check(self, entry: Any) -> None:
        """One process trains anything an entry point accepts; ``resume_mode="reshard"`` is for a
        data-parallel run."""
        if entry.train.resume_mode == "reshard":
            raise ParamsError(
                "NNTrainParams.resume_mode",
                "'reshard' continues a distributed run on another world size and needs distributed=nnx.distributed.DDP() "
                "(one process: torchrun --nproc-per-node=1); a run of one process resumes with 'auto' or 'stateful'",
            )

    def setup(self, run_id: str, params: Any) -> None:
        """Nothing to compare with other ranks."""

    def close(self) -> None:
        """Nothing to release."""

    def kind(self, entry_kind: str) -> str:
        """The payload kind a checkpoint of this group records."""
        return entry_kind

    def begin_epoch(self, session: Any, epoch: int) -> None:
        """Nothing to agree at an epoch's start."""

    def reduce(
        self, session: Any, accumulators: Sequence[Any], batches: int, error: BaseException | None, where: str
    ) -> int:
        """A group of one's sums are already whole (an error is raised as it is): ``batches``."""
        if error is not None:
            raise error
        return batches

    def rng(self, loaders: Sequence[Any]) -> Any:
        """This process's RNG streams."""
        return torch_state.capture_rng(loaders)

    def distributed_record(self) -> dict[str, Any] | None:
        """A checkpoint's ``distributed`` record: none for one process."""
        return None

    def restore_view(self, payload: CheckpointPayload) -> CheckpointPayload:
        """The payload as this process restores it."""
        return payload

    def refusal(self, payload: CheckpointPayload, stateful: bool) -> str | None:
        """One process restores any checkpoint of its own kind."""
        return None
