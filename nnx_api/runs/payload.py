"""The checkpoint payload: what one checkpoint blob of a run holds, as one typed value.

A run's checkpoint blob (``<run>/checkpoints/<tag>.json`` names it) is written with
``nnx_adapters.pytorch.state.encoder`` and read with its safe ``decode`` as a plain mapping; this
module is the only place that mapping is read by key. Two forms:

* :class:`CheckpointPayload` — a stateful checkpoint (LAST, BEST, the phase tags), the keys in the
  order they are written::

      kind, epoch, weights, optimizer, schedule,
      [optimizers, schedules, update_counts]        a Trainer's named optimizers (only a Trainer's)
      rng, components, optional_components, update_count, transforms,
      [distributed]                                 world size, writer, partitions (only under DDP())
      [compile]                                     the CompileRecord (only with train(compile=...))
      [data_seed]                                   the seed of every sample's randomness in loader workers
      [position]                                    where a mid-epoch commit stands (only in one)

  ``kind`` is the entry point that wrote it: ``"nnmodel"``, ``"trainer"`` or ``"nnmodel-ddp"``
  (:data:`DDP_KIND`), ``"trainer-ddp"``. A key in brackets is absent when unset, as before this class.
* :class:`WeightsPayload` — a weights-only tag (``ModelCheckpoint``): ``kind`` (``"weights"``),
  ``epoch``, ``weights``.

Both convert to and from the plain mapping through the one converter (``nnx_core.convert``).
The tensor-bearing parts (the weights' state dict with its ``_metadata``, optimizer and schedule
states, RNG streams, component states, the transforms' and the extras' plain mappings) are
:data:`SavedState`: handed through both ways exactly as given, never copied. A mapping with an
unknown key, or without a required one, is a ``CorruptRunError`` naming the checkpoint.
Checkpoints written before ``optional_components`` existed read it as empty.

The standalone ``NNCheckpoint.to_file`` file is a third form, :class:`StandalonePayload`
(``kind`` ``"nnx.checkpoint"``: weights, parameters and record, no training state), read here too
(``decode_standalone``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, NewType

import attrs

from nnx_core.convert import OMIT, Stateful, converter
from nnx_core.errors import CorruptRunError
from nnx_api.runs.checkpoint import STANDALONE_KIND

__all__ = [
    "DDP_KIND",
    "DDP_KINDS",
    "NNMODEL_KIND",
    "TRAINER_DDP_KIND",
    "TRAINER_KIND",
    "WEIGHTS_KIND",
    "CheckpointPayload",
    "Payload",
    "SavedState",
    "StandalonePayload",
    "WeightsPayload",
    "decode_mapping",
    "decode_payload",
    "decode_standalone",
    "read_payload",
]

NNMODEL_KIND = "nnmodel"  # written by NNModel.train in one process
TRAINER_KIND = "trainer"  # written by Trainer.train
DDP_KIND = "nnmodel-ddp"  # written by NNModel.train under DDP() (a single-process stateful resume refuses it)
TRAINER_DDP_KIND = "trainer-ddp"  # written by Trainer.train under DDP()
DDP_KINDS = (DDP_KIND, TRAINER_DDP_KIND)
WEIGHTS_KIND = "weights"  # a weights-only tag

_FORMAT_KEY = "nnx_payload_format"  # added by the codec (nnx_adapters.pytorch.state), checked by its decode


def _codec() -> Any:
    """``nnx_adapters.pytorch.state``, the safe codec: imported (with torch) when a blob is encoded
    or decoded, not with this module (``nnx runs list`` reads runs without torch)."""
    from nnx_adapters.pytorch import state

    return state


SavedState = NewType("SavedState", Mapping[str, Any])
"""A saved part of a payload (a state dict, an optimizer's, schedule's, component's or RNG state,
a transform, a plain record): tensors and plain types that the converter passes through as they
are — never rebuilt, so an ``OrderedDict`` keeps its type and its ``_metadata``."""


def _as_given(value: Any, *_: Any) -> Any:
    return value


for _opaque in (SavedState, SavedState | None):
    converter.register_unstructure_hook(_opaque, _as_given)
    converter.register_structure_hook(_opaque, _as_given)


@attrs.frozen(kw_only=True)
class WeightsPayload(Stateful):
    """A weights-only checkpoint (``ModelCheckpoint``'s tags): no training state to resume."""

    stateful: ClassVar[bool] = False

    kind: str = attrs.field(default=WEIGHTS_KIND)
    epoch: int
    weights: SavedState

    @kind.validator
    def _weights_kind(self, _attribute: Any, value: str) -> None:
        if value != WEIGHTS_KIND:
            raise CorruptRunError(f"a weights-only payload has kind {WEIGHTS_KIND!r}, not {value!r}")

    def encode(self) -> bytes:
        """This payload as a checkpoint blob's bytes."""
        return _codec().encode(self.state())


@attrs.frozen(kw_only=True)
class CheckpointPayload(Stateful):
    """A stateful checkpoint: everything a resume restores (module docstring for the keys)."""

    stateful: ClassVar[bool] = True

    kind: str  # NNMODEL_KIND, TRAINER_KIND or DDP_KIND
    epoch: int
    weights: SavedState
    optimizer: SavedState  # a Trainer's: a placeholder an NNModel resume refuses
    schedule: SavedState
    optimizers: SavedState | None = attrs.field(default=None, metadata=OMIT)  # a Trainer's, by name
    schedules: SavedState | None = attrs.field(default=None, metadata=OMIT)
    update_counts: SavedState | None = attrs.field(default=None, metadata=OMIT)
    rng: SavedState  # this process's streams; under DDP() {"ranks": [every rank's]}
    components: SavedState
    optional_components: Sequence[str] = ()  # absent from checkpoints written before it existed
    update_count: int
    transforms: Sequence[SavedState]
    distributed: SavedState | None = attrs.field(default=None, metadata=OMIT)
    compile: SavedState | None = attrs.field(default=None, metadata=OMIT)
    data_seed: int | None = attrs.field(default=None, metadata=OMIT)  # nnx_adapters.pytorch.positioned
    position: SavedState | None = attrs.field(default=None, metadata=OMIT)  # a mid-epoch commit's (training.partial)

    def __attrs_post_init__(self) -> None:
        if (self.optimizers is None) != (self.schedules is None):
            raise CorruptRunError("a Trainer checkpoint holds both 'optimizers' and 'schedules', or neither")

    def named_state(self) -> tuple[Mapping[str, Any], Mapping[str, Any], Mapping[str, Any] | None]:
        """Optimizer states, schedule states and update counts by optimizer name (an NNModel
        checkpoint holds one optimizer, ``"default"``, and no per-optimizer counts)."""
        if self.optimizers is not None and self.schedules is not None:
            return self.optimizers, self.schedules, self.update_counts
        return {"default": self.optimizer}, {"default": self.schedule}, None

    def distributed_state(self) -> Mapping[str, Any] | None:
        """The ``distributed`` record of a checkpoint written under ``DDP()`` (None otherwise)."""
        return self.distributed if self.kind in DDP_KINDS else None

    def rank_view(self, rank: int) -> CheckpointPayload:
        """A distributed checkpoint as ``rank`` restores it: its own RNG streams."""
        return attrs.evolve(self, rng=self.rng["ranks"][rank])

    def reshard_view(self, rank: int) -> CheckpointPayload:
        """A distributed checkpoint as ``rank`` of a group of another size restores it
        (``resume_mode="reshard"``): a rank the checkpoint had keeps its own RNG streams; a new
        rank takes rank 0's with its torch, NumPy and Python streams moved to a seed derived from
        rank 0's torch state and its own rank, so no two ranks draw the same dropout."""
        ranks = self.rng["ranks"]
        if rank < len(ranks):
            return self.rank_view(rank)
        base = dict(ranks[0])
        digest = hashlib.sha256(base["torch"].numpy().tobytes() + f"rank {rank}".encode()).digest()
        seed = int.from_bytes(digest[:8], "little") >> 1
        base["reseed"] = seed  # restore_rng puts the streams back, then seeds them with it
        return attrs.evolve(self, rng=base)

    def training_state(self) -> dict[str, Any]:
        """``NNCheckpoint.load_training_state``'s view: every key but the weights, then
        ``completed_epoch`` and ``scheduler`` (the epoch and the schedule state again) and, for a
        Trainer, ``schedulers`` (the schedule states by optimizer name, as NNx names them) with
        ``optimizer`` and ``scheduler`` None (a Trainer has no single one) and, as NNx reads them,
        each optimizer's own state dict (``state``, ``param_groups``) with ``optimizer_types`` and
        ``optimizer_topologies`` by name."""
        state = {k: v for k, v in self.state().items() if k != "weights"}
        state["completed_epoch"] = self.epoch
        state["scheduler"] = self.schedule
        if self.schedules is not None:  # a Trainer's, by optimizer name, under NNx's key too; no single ones
            state["schedulers"] = dict(self.schedules)
            state["optimizer"] = state["scheduler"] = None
            if self.optimizers is not None and all("state_dict" in saved for saved in self.optimizers.values()):
                # NNx's view: each optimizer's own state dict, its type and topology beside it
                state["optimizers"] = {name: {**saved["state_dict"], **saved} for name, saved in self.optimizers.items()}
                state["optimizer_types"] = {name: saved["type"] for name, saved in self.optimizers.items()}
                state["optimizer_topologies"] = {name: saved["topology"] for name, saved in self.optimizers.items()}
        elif isinstance(self.optimizer, Mapping) and "state_dict" in self.optimizer:
            # NNx's view: the optimizer's own state dict (``state``, ``param_groups``) and its type and
            # topology beside it; the schedule's type (a plateau schedule is this project's rule)
            state["optimizer"] = {**self.optimizer["state_dict"], **self.optimizer}
            state["optimizer_type"], state["optimizer_topology"] = self.optimizer["type"], self.optimizer["topology"]
            if "factory" in self.optimizer:  # a registered factory's spec (id, version, config)
                state["optimizer_factory"] = self.optimizer["factory"]
            state["scheduler_type"] = self.schedule.get("type", "nnx_core.schedules.PlateauRule")
            if "state_dict" in self.schedule:  # a torch schedule's own state dict (``last_epoch``, ...) too
                state["scheduler"] = {**self.schedule["state_dict"], **self.schedule}
            if isinstance(self.rng, Mapping) and self.rng.get("loaders"):  # NNx's name for the loader's stream
                state["rng"] = {**self.rng, "train_loader_generator": self.rng["loaders"][0]}
        return state

    def encoder(self, staging: Any = None) -> Callable[[Any], None]:
        """A producer writing this payload to a sink (``Storage.write_blob``); with ``staging``
        (``nnx_adapters.pytorch.staging.Staging``) it writes a snapshot taken now, the same bytes."""
        state = self.state()
        return _codec().encoder(state if staging is None else staging.snapshot(state))


Payload = CheckpointPayload | WeightsPayload


def _in_field_order(cls: type) -> None:
    """Write ``cls``'s keys in field order: the converter writes an omitted-when-unset field
    after the others, but a payload's keys keep the order they always had."""
    generated = converter.get_unstructure_hook(cls)
    names = [f.name for f in attrs.fields(cls)]

    def unstructure(obj: Any) -> dict[str, Any]:
        state = generated(obj)
        return {name: state[name] for name in names if name in state}

    converter.register_unstructure_hook(cls, unstructure)


_in_field_order(CheckpointPayload)


def read_payload(state: Mapping[str, Any], where: str) -> Payload:
    """The payload of a decoded checkpoint mapping; ``where`` names the checkpoint in the
    ``CorruptRunError`` an unknown key, a missing one or a bad value gives."""
    if not isinstance(state, Mapping):
        raise CorruptRunError(f"{where}: a checkpoint payload is a mapping, got {type(state).__name__}")
    fields = {k: v for k, v in state.items() if k != _FORMAT_KEY}
    cls: type[Payload] = WeightsPayload if fields.get("kind") == WEIGHTS_KIND else CheckpointPayload
    try:
        return cls.from_state(fields)
    except (ValueError, TypeError) as exc:  # ParamsError (the converter's), or the class's own check
        raise CorruptRunError(f"{where}: not a readable NNx checkpoint payload ({exc})") from exc


def decode_mapping(data: bytes, where: str) -> dict[str, Any]:
    """A checkpoint blob decoded with the safe loader, as the plain mapping it was written as;
    anything else is ``CorruptRunError`` naming ``where``."""
    return _codec().decode(data, where=where)  # type: ignore[no-any-return]


def decode_payload(data: bytes, where: str) -> Payload:
    """Decode a checkpoint blob with the safe loader (``nnx_adapters.pytorch.state.decode``) and
    read its payload; anything else is ``CorruptRunError`` naming ``where``."""
    return read_payload(_codec().decode(data, where=where), where)


@attrs.frozen(kw_only=True)
class StandalonePayload(Stateful):
    """A standalone ``NNCheckpoint.to_file`` file: weights, the parameters' states and the record;
    no training state. Every key is written; the optional ones may hold None."""

    kind: str = attrs.field(default=STANDALONE_KIND)
    net_params: SavedState | None = None  # NNParams.state() of a built-in net
    net_state: SavedState
    model_params: SavedState  # NNModelParams.state()
    idp: SavedState | None = None  # the tag's IterationDataPoint.state()
    transforms: Sequence[SavedState] = ()
    run_id: str | None = None
    tag: str | None = None
    epoch: int | None = None
    module_signature: SavedState | None = None

    def encode(self) -> bytes:
        """This file's bytes (the safe codec)."""
        return _codec().encode(self.state())


def decode_standalone(data: bytes, where: str) -> StandalonePayload:
    """A standalone checkpoint file, decoded with the safe loader; a file of another kind, or one
    with an unknown or missing key, is ``CorruptRunError`` naming ``where``."""
    state = _codec().decode(data, where=where)
    kind = state.get("kind") if isinstance(state, Mapping) else None
    if kind != STANDALONE_KIND:
        raise CorruptRunError(f"{where}: not an NNCheckpoint file (kind {kind!r})")
    try:
        return StandalonePayload.from_state({k: v for k, v in state.items() if k != _FORMAT_KEY})
    except (ValueError, TypeError) as exc:
        raise CorruptRunError(f"{where}: not a readable NNCheckpoint file ({exc})") from exc
