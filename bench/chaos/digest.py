"""What a crash-matrix run ended with, for ckpt-chaos ``--result-cmd``: ``python bench/chaos/digest.py OUT``.

Reads ``OUT/runs`` through the public API only (what any reader sees) and prints five lines:
the final run's LAST epoch, a SHA-256 over LAST's weights (every tensor of the state dict in
key order: name, dtype, shape, bytes), a SHA-256 over its committed history, followed back
through its lineage (``nnx.iter_history(..., lineage=True)``: a run resumed with
``resume_from_run_id`` continues its source's records), BEST (its epoch, committed updates and
weights digest; a continuation none of whose epochs improved on its source's best has no BEST
of its own, so BEST is followed back through the lineage too) and the phase tags (``first``,
``q1``..``q3``: each one's epoch and committed updates; ``--no-phases``, the driver whose resume
is a new lineage run, prints ``phases -``: a continuation's phases are its own plan's). The final
run is the one no other run names as its ``parent_run_id``. ckpt-chaos compares the output with
the fault-free run's: one differing byte is a ``SILENT_DIVERGENCE`` (so a lost or lagging BEST
or phase tag fails a point); a run that fails to load exits non-zero.

For the ``search`` driver (``OUT/study.journal`` exists) it prints ``search_summary`` instead:
one line per trial of the study (number, params, state, reason, value, BEST epoch, its run
and attempt, epochs, updates, what pruning saw: not the worker, seconds or checkpoint path,
which differ from run to run), the best trial, and one line per run under ``OUT/runs`` (LAST
and BEST: epoch and weights digest; its history's digest).
"""

from __future__ import annotations

import hashlib
import json
import os
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


SEARCH_JOURNAL, SEARCH_STUDY = "study.journal", "chaos-search"
OUTCOME_FIELDS = ("state", "reason", "value", "best_epoch", "run_id", "attempt_id", "epochs", "updates",
                  "observations", "pruned_at_epoch", "error")


def search_storage(out: Path, grace_seconds: int) -> object:
    """The ``search`` driver's Optuna study storage: a journal file under ``out`` whose lock is an
    ``O_EXCL`` file (``JournalFileOpenLock``), broken ``grace_seconds`` after a killed worker left it.

    Appended as Optuna's ``JournalFileBackend`` appends (under the lock: open for append, one
    write, fsync, close), but with ``os.open`` / ``os.write`` rather than ``open()``, and the file
    created the same way: ckpt-chaos's ``torn`` mode cuts a file written with ``open()`` to half its
    size, which for an append-only journal destroys lines fsynced long before (no crash does
    that), and Optuna cannot read a journal with a cut line followed by more lines. Every journal
    and lock event stays a crash point of the other modes."""
    import optuna
    from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock
    from optuna.storages.journal._file import get_lock_file

    class Appended(JournalFileBackend):
        def append_logs(self, logs: list[dict]) -> None:
            data = ("\n".join(json.dumps(log, separators=(",", ":")) for log in logs) + "\n").encode()
            with get_lock_file(self._lock):
                fd = os.open(self._file_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                try:
                    view = memoryview(data)
                    while view:
                        view = view[os.write(fd, view):]
                    os.fsync(fd)
                finally:
                    os.close(fd)

    if not out.is_dir():  # the journal's folder (the runs root's parent): Optuna creates the file, not its folder
        out.mkdir(parents=True)
    path = str((out / SEARCH_JOURNAL).resolve())
    if not os.path.exists(path):  # what JournalFileBackend does with open(path, "ab")
        os.close(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644))
    return optuna.storages.JournalStorage(Appended(path, JournalFileOpenLock(path, grace_seconds)))


def search_summary(out: Path) -> str:
    """What the ``search`` driver ended with: every trial's outcome, the best trial, every run.
    The study's random id (``search.STUDY_ID_ATTR``, in every attempt id and so every run id)
    differs from one fault-free search to the next: attempts show it as ``{study}`` and runs are
    named by the trial that names them (``t<number>``; a run no trial names: ``unnamed``)."""
    import optuna

    from nnx_api.experiments.search import STUDY_ID_ATTR, TrialOutcome

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.load_study(study_name=SEARCH_STUDY, storage=search_storage(out, 3))
    study_id = str(study.user_attrs.get(STUDY_ID_ATTR))
    trials = study.get_trials(deepcopy=False)
    runs = sorted(committed_runs(out / "runs"), key=lambda r: r.id)
    names = {t.user_attrs["run_id"]: f"t{t.number}" for t in trials if t.user_attrs.get("run_id")}
    lines = []
    for frozen in trials:
        o = TrialOutcome.of(frozen)
        facts = {"params": dict(o.params), **{k: getattr(o, k) for k in OUTCOME_FIELDS}}
        facts["attempt_id"] = None if o.attempt_id is None else o.attempt_id.replace(study_id, "{study}")
        facts["run_id"] = None if o.run_id is None else names[o.run_id] + ("" if o.run_id in {r.id for r in runs}
                                                                          else " (missing)")
        lines.append(f"trial {o.number} {json.dumps(facts, sort_keys=True)}")
    complete = [t for t in trials if t.state.name == "COMPLETE"]
    lines.append(f"best {study.best_trial.number if complete else None}")
    for run in sorted(runs, key=lambda r: (r.id not in names, names.get(r.id, ""), r.id)):
        tags = []
        for tag in ("last", "best"):
            ckpt = run.checkpoint(tag)
            tags.append(f"{tag} {None if ckpt is None else ckpt.epoch} {None if ckpt is None else state_digest(ckpt.weights())}")
        lines.append(f"run {names.get(run.id, 'unnamed')} {' '.join(tags)} history {history_digest(run)}")
    return "\n".join(lines) + "\n"


PHASES = ("first", "q1", "q2", "q3")  # NNx's phase tags (LAST aside)


def committed_updates(ckpt: nnx.Checkpoint) -> object:
    """The update count a tag's manifest commits (its meta's ``update_count``)."""
    return ckpt.manifest.meta.get("update_count")


def lineage_best(run: nnx.NNRun) -> nnx.Checkpoint | None:
    """BEST of ``run``, else of the nearest run up its lineage that has one (a continuation whose
    epochs never improved on its source's best writes none: that best is the source's)."""
    while True:
        best = run.checkpoint("best")
        parent = run.config.get("train", {}).get("parent_run_id")
        if best is not None or parent is None:
            return best
        run = nnx.NNRun.load(parent, run.root)


def tags_summary(run: nnx.NNRun, phases: bool = True) -> str:
    """BEST (epoch, committed updates, weights digest) and the phase tags (epoch/updates)."""
    best = lineage_best(run)
    line = "best None" if best is None else (
        f"best {best.epoch} {committed_updates(best)} {state_digest(best.weights())}")
    if not phases:
        return line + "\nphases -\n"
    held = [(tag, run.checkpoint(tag)) for tag in PHASES]
    return line + "\nphases " + " ".join(
        f"{tag}={'None' if c is None else f'{c.epoch}/{committed_updates(c)}'}" for tag, c in held) + "\n"


def summary(root: Path, phases: bool = True) -> str:
    """The five lines: LAST's epoch, its weights' digest, the lineage history's digest, BEST and
    the phase tags (``phases=False``: ``phases -``)."""
    last = final_checkpoint(root)
    return (f"epoch {last.epoch}\nweights {state_digest(last.weights())}\nhistory {history_digest(last.run)}\n"
            + tags_summary(last.run, phases))


if __name__ == "__main__":
    out = Path(sys.argv[1])
    no_phases = "--no-phases" in sys.argv[2:]
    sys.stdout.write(search_summary(out) if (out / SEARCH_JOURNAL).exists() else summary(out / "runs", not no_phases))
