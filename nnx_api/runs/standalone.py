"""The standalone checkpoint file: one ``NNCheckpoint`` in one file, apart from its run.

``NNCheckpoint.to_file(path)`` writes it and ``NNCheckpoint.from_file(path)`` reads it back (the
other thing ``from_file`` reads, a run's own tag, is read through the run: ``nnx_api.runs.run``).
The file is a ``StandalonePayload`` (``nnx_api.runs.payload``, kind ``"nnx.checkpoint"``) in the
safe codec: the weights, the net's and the model's params, the record of the checkpoint's epoch,
its transforms and where it came from (run id, tag, epoch, module signature); no training state.
It is decoded with PyTorch's safe loader only (nothing in it can run code) and written through a
temporary beside it, renamed into place (nothing partial is visible under its name).
``ModelCheckpoint``'s ``<tag>.pt`` export (``nnx_api.callbacks.exports``) is a file of this format.

The params are rebuilt (``nnx_api.config.params``: their enums hold torch classes) only where a
file is read, so the run readers that import this module (``nnx runs list``) need no torch.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from nnx_core.errors import ParamsError
from nnx_core.records import IterationDataPoint
from nnx_api.runs.checkpoint import NNCheckpointTransform
from nnx_api.runs.payload import SavedState, StandalonePayload, decode_standalone

FORMATS = ("nnx", "pickle")  # NNCheckpoint.to_file's format names: both write the same safe file


def write_checkpoint_file(checkpoint: Any, path: str | os.PathLike[str], format: str = "nnx") -> Path:  # noqa: A002
    """Write ``checkpoint`` (an ``NNCheckpoint``: weights, params, record; no training state) as
    one standalone file at ``path``; the path written. ``format`` is ``"nnx"`` or NNx's
    ``"pickle"``, which writes the same safe file."""
    if format not in FORMATS:
        raise ParamsError("NNCheckpoint.to_file.format", f"'nnx' or 'pickle' (both the safe-loader file), got {format!r}")
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


def read_checkpoint_file(path: Path) -> dict[str, Any]:
    """The fields of the ``NNCheckpoint`` the standalone file at ``path`` holds, its params and
    record rebuilt (``training_state_present`` False: the file holds none); a file of another
    kind, or a malformed one, is ``CorruptRunError`` naming ``path`` (never unpickled)."""
    from nnx_api.config.params import NNModelParams, NNParams  # torch: only where a file is read

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


__all__ = ["FORMATS", "read_checkpoint_file", "write_checkpoint_file"]
