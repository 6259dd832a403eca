"""What a crash-matrix run ended with, for ckpt-chaos ``--result-cmd``: ``python bench/chaos/digest.py OUT``.

Reads ``OUT/runs`` through the public API only (what any reader sees) and prints three lines:
the final run's LAST epoch, a SHA-256 over LAST's weights (every tensor of the state dict in
key order: name, dtype, shape, bytes) and a SHA-256 over its committed history, followed back
through its lineage (``nnx.iter_history(..., lineage=True)``: a run resumed with
``resume_from_run_id`` continues its source's records). The final run is the one no other run
names as its ``parent_run_id``. ckpt-chaos compares the output with the fault-free run's: one
differing byte is a ``SILENT_DIVERGENCE``; a run that fails to load exits non-zero.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Mapping
from pathlib import Path

import torch

import nnx_api as nnx


def committed_runs(root: Path) -> list[nnx.NNRun]:
    """Every run under ``root``, as ``NNRun.all`` lists them (a run being replaced is read where
    it is kept), loaded strictly: a ``CorruptRunError`` propagates. A folder without run.yaml (a
    kill during admission, before anything was committed) is not a run."""
    def unreadable(name: str, exc: Exception) -> None:
        raise exc

    return nnx.NNRun.all(root, on_unreadable=unreadable) if root.is_dir() else []


def final_run(root: Path) -> nnx.NNRun:
    """The one run that is no other run's parent."""
    runs = committed_runs(root)
    parents = {run.config.get("train", {}).get("parent_run_id") for run in runs}
    leaves = [run for run in runs if run.id not in parents]
    if len(leaves) != 1:
        raise SystemExit(f"expected one final run under {root}, found {[run.id for run in leaves]}")
    return leaves[0]


def final_checkpoint(root: Path) -> nnx.Checkpoint:
    """LAST of the final run (SystemExit if it has none)."""
    run = final_run(root)
    last = run.checkpoint("last")
    if last is None:
        raise SystemExit(f"run {run.id} committed nothing")
    return last


def state_digest(state: Mapping[str, torch.Tensor]) -> str:
    """SHA-256 over a state dict: each tensor's name, dtype, shape and bytes, in key order."""
    h = hashlib.sha256()
    for name, tensor in state.items():
        t = tensor.detach().cpu().contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def history_digest(run: nnx.NNRun) -> str:
    """SHA-256 over the committed records, lineage included, without ``iter_idx`` (a run resumed
    with ``resume_from_run_id`` numbers its own records from 0; epochs and updates continue)."""
    h = hashlib.sha256()
    for idp in nnx.iter_history(run.id, run.root, lineage=True):
        record = {k: v for k, v in idp.state().items() if k != "iter_idx"}
        h.update(json.dumps(record, sort_keys=True).encode() + b"\n")
    return h.hexdigest()


def summary(root: Path) -> str:
    """The three lines: LAST's epoch, its weights' digest, the lineage history's digest."""
    last = final_checkpoint(root)
    return f"epoch {last.epoch}\nweights {state_digest(last.weights())}\nhistory {history_digest(last.run)}\n"


if __name__ == "__main__":
    sys.stdout.write(summary(Path(sys.argv[1]) / "runs"))
