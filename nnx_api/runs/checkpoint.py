"""``NNCheckpoint``: NNx's checkpoint handle over this project's verified checkpoints.

A checkpoint here is a tag manifest (``<run>/checkpoints/<tag>.json``) naming a content-addressed
payload blob whose SHA-256 is checked before it is read; payloads are decoded with PyTorch's
safe loader only (``weights_only=True``): nothing in a checkpoint file can run code. The handle
gives NNx's view of one checkpoint — ``net_params``, ``net_state``, ``model_params``, ``idp`` (the
epoch's last record), ``training_state_present`` — and NNx's static loaders::

    ckpt = NNCheckpoint.load(run=run.id, type=Checkpoints.BEST)
    model = NNModel.from_checkpoint(ckpt)                      # or (checkpoint=ckpt, device="cpu")
    state = NNCheckpoint.load_training_state(run.id, Checkpoints.LAST)   # optimizer, schedule, RNG ...
    point = NNCheckpoint.resume_point(run.id, Checkpoints.LAST)          # checkpoint id, epoch, SHA-256

``from_file`` reads a checkpoint by path: a tag manifest of a run (``.../checkpoints/<tag>.json``;
NNx's ``<tag>.pt`` name of the same tag is accepted, e.g. a ``ModelCheckpoint`` file
``snap_e0.pt``), or a standalone file written by ``to_file``. Missing files give None, as in NNx.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from nnx_core.commit import LAST
from nnx_core.errors import CorruptRunError, ParamsError, RunNotFoundError
from nnx_core.identity import validate_run_id, validate_tag
from nnx_core.records import IterationDataPoint
from nnx_adapters.pytorch import state as torch_state
from nnx_api.config.params import NNModelParams, NNParams
from nnx_api.runs.run import Checkpoint, NNRun

STANDALONE_KIND = "nnx.checkpoint"


@attrs.frozen
class NNCheckpointTransform(Mapping[str, Any]):
    """A recipe for a topology change a callback made at ``on_train_end`` (its
    ``checkpoint_transforms()``), recorded with the checkpoint: ``name``, ``version``, ``options``.
    It is a read-only mapping of those three keys, which is how the checkpoint stores it."""

    name: str
    version: int = 1
    options: Mapping[str, Any] = attrs.field(factory=dict)

    def __getitem__(self, key: str) -> Any:
        if key not in ("name", "version", "options"):
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Any:
        return iter(("name", "version", "options"))

    def __len__(self) -> int:
        return 3

    def state(self) -> dict[str, Any]:
        """``{"name", "version", "options"}``."""
        return {"name": self.name, "version": self.version, "options": dict(self.options)}

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> NNCheckpointTransform:
        """Rebuild from :meth:`state` (``version`` / ``options`` may be absent)."""
        return cls(str(state["name"]), int(state.get("version", 1)), dict(state.get("options") or {}))


@attrs.frozen(kw_only=True)
class NNCheckpoint:
    """One checkpoint of a run: the net's shape (None for a custom module), its weights, the
    model params, the record of the epoch it holds, and whether it carries training state
    (optimizer, schedule, RNG: a stateful resume point) or only weights (``ModelCheckpoint``)."""

    net_params: NNParams | None
    net_state: Mapping[str, Any] = attrs.field(repr=False, eq=False)  # tensors: equality ignores them
    model_params: NNModelParams
    idp: IterationDataPoint | None
    transforms: tuple[NNCheckpointTransform, ...] = ()
    training_state_id: str | None = None
    training_state_present: bool | None = None
    run_id: str | None = None
    tag: str | None = None
    epoch: int | None = None
    module_signature: Mapping[str, Any] | None = attrs.field(default=None, repr=False)

    @property
    def reconstructible(self) -> bool:
        """Whether a model can be rebuilt from this checkpoint alone (a built-in net); a custom
        module's weights need the module again: ``NNModel.from_checkpoint(ckpt, module=...)``."""
        return self.net_params is not None

    # ------------------------------------------------------------------ loaders
    @staticmethod
    def load(
        run: str | NNRun, type: Any = LAST, root: str | os.PathLike[str] | None = None, map_location: Any = "cpu",
        *, storage: Any = None,
    ) -> NNCheckpoint | None:
        """The committed checkpoint ``type`` (a ``Checkpoints`` member or a tag name) of ``run``
        (an id or an ``NNRun``), its blob verified; None when the run or the tag does not exist."""
        found = _committed(run, type, root, storage)
        return None if found is None else NNCheckpoint.of(found)

    @staticmethod
    def of(checkpoint: Checkpoint) -> NNCheckpoint:
        """The handle of a committed ``Checkpoint`` (``run.checkpoint(tag)``)."""
        payload = checkpoint.payload()
        run = checkpoint.run
        stateful = payload.get("kind") != "weights"
        return NNCheckpoint(
            net_params=run.net,
            net_state=payload["weights"],
            model_params=run.model,
            idp=run.epoch_record(checkpoint.epoch),
            transforms=_transforms(payload),
            training_state_id=checkpoint.manifest.blobs["state"].sha256 if stateful else None,
            training_state_present=stateful,
            run_id=run.id,
            tag=checkpoint.tag,
            epoch=checkpoint.epoch,
            module_signature=run.config.get("module"),
        )

    @staticmethod
    def load_training_state(
        run: str | NNRun, type: Any = LAST, root: str | os.PathLike[str] | None = None, map_location: Any = "cpu",
        *, storage: Any = None,
    ) -> dict[str, Any] | None:
        """The checkpoint's training state — ``optimizer``, ``scheduler``, ``rng``,
        ``components``, ``completed_epoch``, ``update_count`` — decoded safely from its verified
        blob; None when the run or tag does not exist or the checkpoint holds weights only."""
        found = _committed(run, type, root, storage)
        return None if found is None else _training_state(found.payload())

    @staticmethod
    def load_with_training_state(
        run: str | NNRun, type: Any = LAST, root: str | os.PathLike[str] | None = None, map_location: Any = "cpu",
        *, storage: Any = None,
    ) -> tuple[NNCheckpoint | None, dict[str, Any] | None]:
        """``(load(...), load_training_state(...))`` read from one verified blob."""
        found = _committed(run, type, root, storage)
        if found is None:
            return None, None
        return NNCheckpoint.of(found), _training_state(found.payload())

    @staticmethod
    def load_optimizer_state(
        run: str | NNRun, type: Any = LAST, root: str | os.PathLike[str] | None = None, *, storage: Any = None,
    ) -> Mapping[str, Any] | None:
        """The optimizer part of the training state, None when there is none."""
        state = NNCheckpoint.load_training_state(run, type, root, storage=storage)
        return None if state is None else state.get("optimizer")

    @staticmethod
    def resume_point(
        run: str | NNRun, type: Any = LAST, root: str | os.PathLike[str] | None = None, *, storage: Any = None,
    ) -> dict[str, Any] | None:
        """What stamps this resume point, read from its tag manifest without loading the payload:
        ``checkpoint_id`` (the payload's SHA-256, which is also its ``generation``),
        ``completed_epoch``, ``committed_updates``, ``weights_only`` and the ``files`` with their
        SHA-256 and size; None when the run or tag does not exist."""
        found = _committed(run, type, root, storage)
        if found is None:
            return None
        manifest = found.manifest
        ref = manifest.blobs["state"]
        return {
            "run_id": manifest.run_id,
            "tag": manifest.tag,
            "checkpoint_id": ref.sha256,
            "generation": ref.sha256,
            "completed_epoch": manifest.epoch,
            "committed_updates": manifest.meta.get("update_count"),
            "weights_only": bool(manifest.meta.get("weights_only", False)),
            "files": {name: {"sha256": r.sha256, "size": r.size} for name, r in manifest.blobs.items()},
        }

    @staticmethod
    def verify(
        run: str | NNRun, type: Any = LAST, root: str | os.PathLike[str] | None = None, *, storage: Any = None,
    ) -> dict[str, Any] | None:
        """Check the checkpoint's blobs against their SHA-256 (hashed in place, nothing decoded)
        and return its ``resume_point``; ``CorruptRunError`` names a missing or damaged blob."""
        found = _committed(run, type, root, storage)
        if found is None:
            return None
        files = found.run.files()
        for ref in found.manifest.blobs.values():
            files.verify_blob(ref)
        return NNCheckpoint.resume_point(found.run, found.tag, storage=storage)

    # ------------------------------------------------------------------ files
    @staticmethod
    def from_file(path: str | os.PathLike[str], map_location: Any = "cpu") -> NNCheckpoint | None:
        """The checkpoint at ``path``: a run's tag (``<root>/<run>/checkpoints/<tag>.json``, or
        NNx's ``<tag>.pt`` name for it) or a standalone ``to_file`` file. None when nothing is
        there; a file that is neither is refused with ``CorruptRunError`` (never unpickled)."""
        path = Path(path)
        tag_file = path.with_suffix(".json")
        if path.parent.name == "checkpoints" and (path.suffix == ".json" or not path.exists()) and tag_file.is_file():
            run_dir = path.parent.parent
            return NNCheckpoint.load(validate_run_id(run_dir.name), validate_tag(path.stem), run_dir.parent)
        if not path.is_file():
            return None
        payload = torch_state.decode(path.read_bytes(), where=str(path))
        if payload.get("kind") != STANDALONE_KIND:
            raise CorruptRunError(f"{path}: not an NNCheckpoint file (kind {payload.get('kind')!r})")
        net = payload.get("net_params")
        idp = payload.get("idp")
        return NNCheckpoint(
            net_params=None if net is None else NNParams.resolve_from_state(net),
            net_state=payload["net_state"],
            model_params=NNModelParams.from_state(payload["model_params"]),
            idp=None if idp is None else IterationDataPoint.from_state(idp),
            transforms=_transforms(payload),
            training_state_present=False,
            run_id=payload.get("run_id"),
            tag=payload.get("tag"),
            epoch=payload.get("epoch"),
            module_signature=payload.get("module_signature"),
        )

    def to_file(self, path: str | os.PathLike[str], format: str = "nnx") -> Path:
        """Write this checkpoint (weights, params, record; no training state) as one standalone
        file that ``from_file`` reads back with the safe loader. ``format="pickle"`` (NNx's
        default name) writes the same safe file: nothing here ever needs an unpickling loader
        (a ``.safetensors`` export of a run's tag: ``nnx_api.runs.export.export_safetensors``)."""
        if format not in ("nnx", "pickle"):
            raise ParamsError("NNCheckpoint.to_file.format", f"'nnx' or 'pickle' (both the safe-loader file), got {format!r}")
        payload = {
            "kind": STANDALONE_KIND,
            "net_params": None if self.net_params is None else self.net_params.state(),
            "net_state": dict(self.net_state),
            "model_params": self.model_params.state(),
            "idp": None if self.idp is None else self.idp.state(),
            "transforms": [t.state() for t in self.transforms],
            "run_id": self.run_id,
            "tag": self.tag,
            "epoch": self.epoch,
            "module_signature": None if self.module_signature is None else dict(self.module_signature),
        }
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.tmp")
        tmp.write_bytes(torch_state.encode(payload))
        os.replace(tmp, target)
        return target


def _committed(run: str | NNRun, type: Any, root: Any, storage: Any) -> Checkpoint | None:
    """The committed checkpoint, or None when the run or the tag does not exist."""
    tag = validate_tag(str(getattr(type, "value", type)))
    if isinstance(run, NNRun):
        return run.checkpoint(tag)
    run_id = validate_run_id(run)
    try:
        loaded = NNRun.load(run_id, root, storage=storage)
    except RunNotFoundError:
        return None
    return loaded.checkpoint(tag)


def _transforms(payload: Mapping[str, Any]) -> tuple[NNCheckpointTransform, ...]:
    return tuple(NNCheckpointTransform.from_state(t) for t in payload.get("transforms") or ())


def _training_state(payload: Mapping[str, Any]) -> dict[str, Any] | None:
    """The training-state view of a payload; None for a weights-only one."""
    if payload.get("kind") == "weights":
        return None
    state = {k: v for k, v in payload.items() if k not in ("weights", "nnx_payload_format")}
    state["completed_epoch"] = payload["epoch"]
    state["scheduler"] = payload.get("schedule")
    return state


__all__ = ["NNCheckpoint", "NNCheckpointTransform"]
