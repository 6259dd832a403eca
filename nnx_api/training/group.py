"""The group of one process: ``SingleProcess``, the ``Group`` role (``nnx_api.training.roles``)
when no ``DDP()`` is given — nothing to agree, reduce or gather. ``nnx_api.distributed``'s
``DataParallel`` plays the same role over a torchrun group."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from nnx_adapters.collective.local import LocalCollective
from nnx_adapters.pytorch import state as torch_state
from nnx_api.runs.payload import CheckpointPayload
from nnx_api.training.owners import LocalSync


class SingleProcess:
    """The group behaviour of one process: a group of one, so nothing to agree, reduce or gather."""

    writer_rank = 0

    def __init__(self) -> None:
        self.collective = LocalCollective()

    def accepted_kinds(self, entry_kind: str) -> tuple[str, ...]:
        """Other checkpoint kinds a stateful resume restores: none (one process restores its own)."""
        return ()

    def agree_given(self, entry: Any) -> None:
        """One process: nothing to compare."""

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
        """One process trains anything an entry point accepts."""

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

    def total(self, counts: torch.Tensor) -> torch.Tensor:
        """A group of one's per-batch counts are already the whole batch's."""
        return counts

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
