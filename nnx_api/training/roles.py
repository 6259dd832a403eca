"""Declared roles of a training run.

* ``EntryKind``: which entry point trains (``NNMODEL``, ``TRAINER``), as data — what it names its
  step function, whether its optimizers are named, whether it needs an update owner — so no code
  tests an entry's name.
* ``Group``: one process or a data-parallel group (``SingleProcess``, ``nnx_api.distributed``'s
  ``DataParallel``), by duty: ``GroupSetup`` before training (the pipeline), ``SyncFactory``
  (the update owners' syncs), ``EpochGroup`` while training (the session).
* ``StepSync``, ``CustomSync``, ``ObjectiveSync``: how the built-in step, a step function or an
  objective joins its work in that group; in one process each is a do-nothing stand-in, so an
  owner never asks which group it is in.
* ``UpdateOwner``: who turns a batch into gradients and ends each window (``nnx_api.training.owners``);
  it receives the epoch's state (``nnx_api.training.epoch.EpochState``), not the session.
* ``Sharded`` / ``ShardedValidation``: loaders that deal each rank its share.

A role is a structural ``typing.Protocol`` (runtime-checkable): the training code asks whether an
object plays it (``isinstance(loader, Sharded)``) without importing the class that implements it,
so ``nnx_api.training`` never depends on the layers above it (``nnx_api.distributed``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import attrs

# --- the entry point --------------------------------------------------------------------------


@attrs.frozen
class EntryKind:
    """Which entry point trains a run, declared as data (``NNMODEL``, ``TRAINER``)."""

    name: str  # the checkpoint payload's kind: a stateful resume accepts its own kind only
    step_name: str  # the keyword of its step function
    named_optimizers: bool  # several named optimizers: ctx.optimizers, per-optimizer clocks and state
    owner_required: bool  # no built-in step: a step function or an objective owns the updates

    def report_call(self, optimizer: str) -> str:
        """How a step reports optimizer ``optimizer``'s update."""
        return f"ctx.report_update({optimizer!r})" if self.named_optimizers else "ctx.report_update()"

    def clock_component(self, optimizer: str) -> str:
        """The checkpoint component name of optimizer ``optimizer``'s update-clock schedule."""
        return f"nnx.scheduler_clock.{optimizer}" if self.named_optimizers else "nnx.scheduler_clock"


NNMODEL = EntryKind("nnmodel", "train_step_fn", named_optimizers=False, owner_required=False)
"""``NNModel.train``: one optimizer, ``"default"``; the built-in step unless a step or objective is given."""
TRAINER = EntryKind("trainer", "trainer_step_fn", named_optimizers=True, owner_required=True)
"""``Trainer.train``: named optimizers, each updated by a ``trainer_step_fn`` or an objective."""


# --- the group, by duty, and the syncs it makes ------------------------------------------------


class StepSync(Protocol):
    """How the built-in step's microbatches join in a group (``nnx_api.training.builtin_step``:
    ``LocalSync`` in one process, ``HandBuiltSync`` for a context built by hand;
    ``nnx_api.distributed``'s ``RankSync``)."""

    seeds: bool  # W is known before backward (one process), else the backward takes the numerator only
    agrees_finite: bool  # a non-finite loss is agreed by the group (else read at the window's end)
    overflow: Callable[[bool], bool] | None  # an fp16 scaler's overflow flag agreed over the group (None: alone)

    def bind(self, state: Any, net: Any) -> Any: ...
    def microbatch(self, closes: bool) -> contextlib.AbstractContextManager[Any]: ...
    def agree(self, state: Any, part: Any, error: BaseException | None, batch: Any, epoch: int, batch_idx: int) -> float: ...
    def weight(self, window_weight: float | None) -> float | None: ...
    def finite(self, window_loss: Any) -> Callable[[], bool] | None: ...


class CustomSync(Protocol):
    """How a step function's gradients and records join in a group (``LocalCustomSync`` in one
    process; ``nnx_api.distributed.steps.CustomSync``)."""

    overflow: Callable[[bool], bool] | None

    def bind(self, optimizer: Any, accumulate: int = 1) -> None: ...
    def weigh(self, count: float) -> None: ...
    def begin(self, where: str) -> None: ...
    def end(self, record: Any, error: BaseException | None) -> Any: ...


class ObjectiveSync(Protocol):
    """How an objective's readings, gradients and records join in a group (``LocalObjectiveSync``
    in one process; ``nnx_api.distributed.steps.ObjectiveSync``)."""

    overflow: Callable[[bool], bool] | None

    def readings(self, readings: Any, record: Any, error: BaseException | None, where: str) -> tuple[Any, Any]: ...
    def slots(self, params: Sequence[Any], scaler: Any = None) -> Any: ...


class GroupSetup(Protocol):
    """The group's duties before training (``nnx_api.launch``): what the ranks were given, where
    the run is written, what it refuses, and its release at the end."""

    collective: Any
    writer_rank: int

    def agree_given(self, entry: Any) -> None: ...
    def place_writer(self, run_id: str, storage: Any) -> str | None: ...
    def resolve_callbacks(self, callbacks: Sequence[Any]) -> tuple[list[Any], list[Any]]: ...
    def check(self, entry: Any) -> None: ...
    def setup(self, run_id: str, params: Any) -> None: ...
    def accepted_kinds(self, entry_kind: str) -> tuple[str, ...]: ...
    def refusal(self, payload: Any, stateful: bool) -> str | None: ...
    def positioned(self, loader: Any, seed: int) -> Any: ...
    def close(self) -> None: ...


class SyncFactory(Protocol):
    """The syncs a group makes for the update owners (``nnx_api.training.owners.owner_for``)."""

    def step_sync(self) -> StepSync: ...
    def custom_sync(self) -> CustomSync: ...
    def objective_sync(self) -> ObjectiveSync: ...


class EpochGroup(Protocol):
    """The group's duties while training (the session): the epoch's agreement, the sums of
    validation and records, and the group's part of every checkpoint."""

    collective: Any
    total: Callable[[Any], Any] | None  # per-batch sums → the group's (None: a group of one)

    def begin_epoch(self, train_loader: Any, epoch: int) -> None: ...
    def reduce(self, model: Any, accumulators: Sequence[Any], batches: int, error: BaseException | None, where: str) -> int: ...
    def join_record(self, record: Any, error: BaseException | None, where: str) -> Any: ...
    def rng(self, loaders: Sequence[Any]) -> Any: ...
    def kind(self, entry_kind: str) -> str: ...
    def distributed_record(self) -> dict[str, Any] | None: ...
    def restore_view(self, payload: Any) -> Any: ...
    def ride(self, points: Any) -> None: ...
    def position_refusal(self, loader: Any) -> str | None: ...
    def partial_state(self, local: dict[str, Any]) -> dict[str, Any]: ...
    def partial_view(self, saved: dict[str, Any], model: Any, fresh: Any) -> dict[str, Any]: ...


class Group(GroupSetup, SyncFactory, EpochGroup, Protocol):
    """One process (``nnx_api.training.group.SingleProcess``) or a data-parallel group
    (``nnx_api.distributed``'s ``DataParallel``): all three duties, each asked by its own user."""


# --- the update owner ---------------------------------------------------------------------------


class UpdateOwner(Protocol):
    """Who turns each batch into gradients and ends each window (one per run); it gets the
    epoch's state (``nnx_api.training.epoch.EpochState``), never the session."""

    components: tuple[Any, ...]  # checkpointed components it brings (an objective's update engine)
    records_updates: bool  # every record carries the run's committed-update count (an objective's engine, as NNx)

    def bind(self, state: Any) -> None: ...
    def begin_epoch(self, state: Any, epoch: int) -> None: ...
    def step(self, state: Any, batch: Any, epoch: int, batch_idx: int, is_last: bool) -> None: ...


# --- sharded loaders --------------------------------------------------------------------------

@runtime_checkable
class Sharded(Protocol):
    """A training loader that deals each rank its share of every epoch
    (``nnx_api.distributed.ShardedTrainLoader``): its per-rank batch count depends on the world
    size, so the data fingerprint leaves ``len(loader)`` out. ``dataset`` is the whole set."""

    dataset: Any
    rank: int
    world_size: int

    def set_epoch(self, epoch: int) -> None:
        """Deal the permutation of ``epoch``."""
        ...

    def partition(self) -> dict[str, Any]:
        """What a checkpoint records of the deal."""
        ...


@runtime_checkable
class ShardedValidation(Protocol):
    """A validation loader scoring rows ``rank::world_size`` of a dataset
    (``nnx_api.distributed.ShardedValidationLoader``): ``shard`` is this rank's ``Subset`` of it,
    ``shard.dataset`` the whole set."""

    shard: Any
    batch_size: int
    rank: int
    world_size: int

    def indices(self) -> list[int]:
        """This rank's rows."""
        ...

