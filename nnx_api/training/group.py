"""The group of one process: ``SingleProcess``, the ``Group`` role (``nnx_api.training.roles``)
when no ``DDP()`` is given — nothing to agree, reduce or gather — and the syncs it makes, which
do nothing: ``LocalSync`` for the built-in step (``nnx_api.training.builtin_step``),
``LocalCustomSync`` for a step function, ``LocalObjectiveSync`` for an objective.
``nnx_api.distributed``'s ``DataParallel``, ``RankSync``, ``CustomSync`` and ``ObjectiveSync``
play the same roles over a torchrun group."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from nnx_core.errors import ParamsError
from nnx_adapters.collective.local import LocalCollective
from nnx_adapters.pytorch import state as torch_state
from nnx_adapters.pytorch.gradients import TorchGradientSlots
from nnx_adapters.pytorch.positioned import PositionedLoader, StatefulLoader, position_refusal, positioned
from nnx_api.runs.payload import CheckpointPayload
from nnx_api.training.builtin_step import LocalSync


class LocalCustomSync:
    """A custom step's join in one process: nothing to join (``nnx_api.distributed.steps.CustomSync``
    is the group form)."""

    overflow = None  # a GradScaler decides its overflow alone

    def bind(self, optimizer: Any, accumulate: int = 1) -> None:
        """Nothing to hook."""

    def weigh(self, count: float) -> None:
        """``ctx.weigh(count)`` in one process: nothing to weigh against."""

    def begin(self, where: str) -> None:
        """Nothing to note."""

    def end(self, record: Any, error: BaseException | None) -> Any:
        """The batch's record as it is (its error raised as it is)."""
        if error is not None:
            raise error
        return record


class LocalObjectiveSync:
    """An objective's join in one process: its readings and records are already the whole batch's
    (``nnx_api.distributed.steps.ObjectiveSync`` is the group form)."""

    overflow = None  # a GradScaler decides its overflow alone

    def readings(
        self, readings: Sequence[Any] | None, record: Any, error: BaseException | None, where: str
    ) -> tuple[Sequence[Any] | None, Any]:
        """The microbatch's readings and record as they are (its error raised as it is)."""
        if error is not None:
            raise error
        return readings, record

    def slots(self, params: Sequence[torch.Tensor], scaler: Any = None) -> TorchGradientSlots:
        """The engine's gradient slots over ``params``."""
        return TorchGradientSlots(params, scaler)


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

    def objective_sync(self) -> LocalObjectiveSync:
        """An objective in one process: its readings are already the whole batch's."""
        return LocalObjectiveSync()

    def custom_sync(self) -> LocalCustomSync:
        """A custom step in one process: nothing to join."""
        return LocalCustomSync()

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

    def positioned(self, loader: Any, seed: int) -> PositionedLoader | StatefulLoader | None:
        """The train loader NNx positions inside an epoch: a plain ``DataLoader`` over a map-style
        dataset (``PositionedLoader``, each sample's worker randomness from ``seed``), a loader with
        the state protocol (``StatefulLoader``); None for any other."""
        return positioned(loader, seed)

    def position_refusal(self, loader: Any) -> str | None:
        """Why NNx cannot position ``loader`` inside an epoch (None: it can)."""
        return position_refusal(loader)

    def ride(self, points: Any) -> None:
        """One process answers its commit points alone: nothing rides."""

    def partial_state(self, local: dict[str, Any]) -> dict[str, Any]:
        """A mid-epoch commit's own part (accumulators, samples), as it is."""
        return local

    def partial_view(self, saved: dict[str, Any], model: Any, fresh: Any) -> dict[str, Any]:
        """The part of a mid-epoch commit this process restores: all of it."""
        return saved

    def close(self) -> None:
        """Nothing to release."""

    def kind(self, entry_kind: str) -> str:
        """The payload kind a checkpoint of this group records."""
        return entry_kind

    def begin_epoch(self, train_loader: Any, epoch: int) -> None:
        """Nothing to agree at an epoch's start."""

    def reduce(
        self, model: Any, accumulators: Sequence[Any], batches: int, error: BaseException | None, where: str
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
