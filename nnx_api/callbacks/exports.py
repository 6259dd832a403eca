"""NNx's milestone files: ``<run>/checkpoints/<tag>.pt``, an export of a committed weights-only tag.

The checkpoint itself is the tag (``<tag>.json`` naming a content-addressed, SHA-256-checked blob),
written after the epoch's commit. NNx users look for the same epoch as ``<tag>.pt`` (NNx's
``ModelCheckpoint`` name, e.g. ``snap_e0.pt``); this module writes that file, and the rules that keep
it from ever endangering the run are:

* it is written after the tag, as the next deferred write of the same epoch commit (so after
  history, LAST, phase tags/BEST and the tag itself are durable); a failure there can only leave
  the previous bytes of the export, never touch a committed file;
* it is derived from the committed tag's blob, read back verified, so it holds exactly the
  committed weights;
* it goes through the store's durable replace (owned temporary in the same folder, fsync, rename,
  fsync the folder): nothing partial is ever visible under the ``.pt`` name;
* nothing that decides what a run holds reads it: tags are ``*.json`` (``RunFiles.tags``), blobs
  live in ``objects/`` (garbage collection lists only that folder), and resume, ``NNCheckpoint.verify``
  and ``nnx runs verify`` go through tags. ``NNCheckpoint.from_file(".../<tag>.pt")`` reads it with
  the safe loader (weights, the run's params, the epoch's record; no training state).
"""

from __future__ import annotations

from typing import Any

from nnx_core.commit import RunFiles
from nnx_core.errors import CorruptRunError
from nnx_core.identity import validate_tag
from nnx_api.runs.payload import SavedState, StandalonePayload

EXPORT_SUFFIX = ".pt"


def export_path(files: RunFiles, tag: str) -> str:
    """Where the export of ``tag`` lives: beside its manifest, NNx's ``<tag>.pt``."""
    return f"{files.checkpoints}/{validate_tag(tag)}{EXPORT_SUFFIX}"


def export_tag(run: Any, tag: str, idp: Any) -> str:
    """Write ``<run>/checkpoints/<tag>.pt`` from the committed tag ``tag`` of ``run`` (an ``NNRun``);
    ``idp`` is the record of the tag's epoch. Returns the store path written."""
    checkpoint = run.checkpoint(tag)
    if checkpoint is None:  # deferred after the tag's own write: it is there unless that write failed
        raise CorruptRunError(f"run {run.id}: tag {tag!r} is not committed, so it has nothing to export")
    weights = checkpoint.contents().weights  # the blob, verified against its SHA-256
    net = run.net
    data = StandalonePayload(
        net_params=None if net is None else SavedState(net.state()),
        net_state=SavedState(dict(weights)),
        model_params=SavedState(run.model.state()),
        idp=None if idp is None else SavedState(idp.state()),
        transforms=[],  # a weights-only tag records none
        run_id=run.id,
        tag=tag,
        epoch=checkpoint.epoch,
        module_signature=None if run.config.get("module") is None else SavedState(dict(run.config["module"])),
    ).encode()
    files = run.files()
    path = export_path(files, tag)
    files.storage.write(path, data)
    return path
