"""The standalone checkpoint file: one ``NNCheckpoint`` in one file, apart from its run.

``NNCheckpoint.to_file(path)`` writes it and ``NNCheckpoint.from_file(path)`` reads it back (the
other thing ``from_file`` reads, a run's own tag, is read through the run: ``nnx_api.runs.run``).
The file is a ``StandalonePayload`` (``nnx_api.runs.payload``, kind ``"nnx.checkpoint"``) in the
safe codec: the weights, the net's and the model's params, the record of the checkpoint's epoch,
its transforms and where it came from (run id, tag, epoch, module signature); no training state.
It is decoded with PyTorch's safe loader only (nothing in it can run code) and written through a
temporary beside it, renamed into place (nothing partial is visible under its name).
``ModelCheckpoint``'s ``<tag>.pt`` export (``nnx_api.callbacks.exports``) is a file of this format.

``to_file(path, format="safetensors")`` writes NNx's portable layout instead: the weights as
safetensors tensors, the params, record and transforms as JSON strings in its metadata
(``nnx_format_version`` "1", ``model_params``, ``net_params``, ``idp``, ``transforms``,
``training_state_id``, ``training_state_present``; where the checkpoint came from under
``nnx.run_id`` / ``nnx.tag`` / ``nnx.epoch``), so either package reads the other's file.
``from_file`` tells the two apart by the safetensors header (byte 8 opens its JSON), never by the
name; neither reader can run code.

The params are rebuilt (``nnx_api.config.params``: their enums hold torch classes) only where a
file is read, so the run readers that import this module (``nnx runs list``) need no torch.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from nnx_core.errors import CorruptRunError, ParamsError
from nnx_core.records import IterationDataPoint
from nnx_adapters.extras import require
from nnx_api.runs.checkpoint import NNCheckpointTransform
from nnx_api.runs.payload import SavedState, StandalonePayload, decode_standalone

FORMATS = ("nnx", "pickle", "safetensors")  # NNCheckpoint.to_file's format names ("nnx" and "pickle": one safe file)
SAFETENSORS_VERSION = "1"  # NNx's nnx_format_version of the safetensors layout


def write_checkpoint_file(checkpoint: Any, path: str | os.PathLike[str], format: str = "nnx") -> Path:  # noqa: A002
    """Write ``checkpoint`` (an ``NNCheckpoint``: weights, params, record; no training state) as
    one standalone file at ``path``; the path written. ``format`` is ``"nnx"`` or NNx's
    ``"pickle"``, which writes the same safe file, or ``"safetensors"`` (module docstring); every
    refusal comes before anything is written."""
    if format not in FORMATS:
        raise ParamsError("NNCheckpoint.to_file.format", f"unknown checkpoint format {format!r}: 'pickle' (the "
                                                         "safe-loader file, also named 'nnx') or 'safetensors'")
    if format == "safetensors":
        return _write_safetensors(checkpoint, Path(path))
    signature = checkpoint.module_signature
    payload = StandalonePayload(
        net_params=None if checkpoint.net_params is None else SavedState(checkpoint.net_params.state()),
        net_state=SavedState(dict(checkpoint.net_state)),
        model_params=SavedState(checkpoint.model_params.state()),
        idp=None if checkpoint.idp is None else SavedState(checkpoint.idp.state()),
        transforms=[SavedState(t.state()) for t in checkpoint.transforms],
        run_id=checkpoint.run_id,
        tag=checkpoint.tag,
        epoch=checkpoint.epoch,
        module_signature=None if signature is None else SavedState(dict(signature)),
    )
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.write_bytes(payload.encode())
    os.replace(tmp, target)
    return target


def _write_safetensors(checkpoint: Any, target: Path) -> Path:
    """``to_file(path, format="safetensors")``: the weights as tensors, the rest as JSON metadata,
    through a temporary beside ``target`` renamed into place."""
    import torch  # only where weights are written

    if not checkpoint.reconstructible:
        raise ParamsError("NNCheckpoint.to_file", "a safetensors checkpoint is portable, but this one holds a "
                                                  "runtime-only module's weights (no factory rebuilds it): register a "
                                                  "model factory and train from a ModelSpec, or keep format='pickle'")
    loose = [key for key, value in checkpoint.net_state.items() if not isinstance(value, torch.Tensor)]
    if loose:
        raise ParamsError("NNCheckpoint.to_file", f"a safetensors checkpoint export holds tensors only: non-tensor "
                                                  f"state_dict entry {loose[0]!r}; keep format='pickle' for it")
    st = require("safetensors.torch", "export", "NNCheckpoint.to_file(format='safetensors')", package="safetensors")
    meta = {
        "nnx_format_version": SAFETENSORS_VERSION,
        "model_params": json.dumps(checkpoint.model_params.state()),
        "net_params": json.dumps(None if checkpoint.net_params is None else checkpoint.net_params.state()),
        "idp": json.dumps(None if checkpoint.idp is None else checkpoint.idp.state()),
        "transforms": json.dumps([t.state() for t in checkpoint.transforms]),
        "training_state_id": checkpoint.training_state_id or "",
        "training_state_present": json.dumps(checkpoint.training_state_present),
        **{f"nnx.{name}": str(getattr(checkpoint, name)) for name in ("run_id", "tag", "epoch")
           if getattr(checkpoint, name) is not None},
    }
    # own, contiguous copies: safetensors refuses shared (tied) or strided storage
    tensors = {key: value.detach().contiguous().clone() for key, value in checkpoint.net_state.items()}
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp")
    try:
        st.save_file(tensors, str(tmp), metadata=meta)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


def is_safetensors(path: Path) -> bool:
    """Whether ``path`` holds a safetensors file: an 8-byte header length, then its JSON's ``{``
    (a torch file starts with a ZIP's ``PK``; its 9th byte is never ``{``)."""
    with path.open("rb") as handle:
        head = handle.read(9)
    return len(head) == 9 and head[8:9] == b"{" and head[:4] != b"PK\x03\x04"


def read_checkpoint_file(path: Path, map_location: Any = "cpu") -> dict[str, Any]:
    """The fields of the ``NNCheckpoint`` the standalone file at ``path`` holds, its params and
    record rebuilt (``training_state_present`` False: the file holds none); a file of another
    kind, or a malformed one, is ``CorruptRunError`` naming ``path`` (never unpickled). A
    safetensors file's weights are read onto ``map_location``."""
    from nnx_api.config.params import NNModelParams, NNParams  # torch: only where a file is read

    if is_safetensors(path):
        return _read_safetensors(path, map_location)
    saved = decode_standalone(path.read_bytes(), where=str(path))
    return {
        "net_params": None if saved.net_params is None else NNParams.resolve_from_state(saved.net_params),
        "net_state": saved.net_state,
        "model_params": NNModelParams.from_state(saved.model_params),
        "idp": None if saved.idp is None else IterationDataPoint.from_state(saved.idp),
        "transforms": tuple(NNCheckpointTransform.from_state(t) for t in saved.transforms or ()),
        "training_state_present": False,
        "run_id": saved.run_id,
        "tag": saved.tag,
        "epoch": saved.epoch,
        "module_signature": saved.module_signature,
    }


def _read_safetensors(path: Path, map_location: Any) -> dict[str, Any]:
    """The fields of an ``NNCheckpoint`` safetensors file (NNx's layout, module docstring)."""
    import torch  # only where weights are read

    from nnx_api.config.params import NNModelParams, NNParams  # torch: only where a file is read

    if not isinstance(map_location, (str, torch.device)):
        raise ParamsError("NNCheckpoint.from_file", f"a safetensors checkpoint takes map_location as a device string "
                                                    f"or torch.device, got {type(map_location).__name__}")
    st = require("safetensors", "export", "NNCheckpoint.from_file (a safetensors file)")
    with st.safe_open(str(path), framework="pt", device=str(map_location)) as handle:
        meta = dict(handle.metadata() or {})
        weights = {key: handle.get_tensor(key) for key in handle.keys()}
    version = meta.get("nnx_format_version")
    if version != SAFETENSORS_VERSION:
        raise CorruptRunError(f"{path}: unsupported safetensors checkpoint format version {version!r} (this NNx reads "
                              f"{SAFETENSORS_VERSION!r}); a safetensors file without it is no NNCheckpoint: load_safetensors")
    try:
        net, idp = json.loads(meta["net_params"]), json.loads(meta["idp"])
        epoch = meta.get("nnx.epoch")
        return {
            "net_params": None if net is None else NNParams.resolve_from_state(net),
            "net_state": weights,
            "model_params": NNModelParams.from_state(json.loads(meta["model_params"])),
            "idp": None if idp is None else IterationDataPoint.from_state(idp),
            "transforms": tuple(NNCheckpointTransform.from_state(t) for t in json.loads(meta.get("transforms", "[]"))),
            "training_state_id": meta.get("training_state_id") or None,
            "training_state_present": json.loads(meta.get("training_state_present", "null")),
            "run_id": meta.get("nnx.run_id"),
            "tag": meta.get("nnx.tag"),
            "epoch": None if epoch is None else int(epoch),
        }
    except (KeyError, ValueError, TypeError) as exc:
        raise CorruptRunError(f"{path}: not a readable NNCheckpoint safetensors file ({exc!r})") from exc


__all__ = ["FORMATS", "is_safetensors", "read_checkpoint_file", "write_checkpoint_file"]
