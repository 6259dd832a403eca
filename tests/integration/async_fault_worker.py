"""Faults in the background writer's commits: the injector ``test_async_faults.py`` uses, and one
rank of its 2-rank launch (``python async_fault_worker.py OUT ROOT --mode async|sync --fault C:FN:K:ERRNO ...``,
with torchrun's environment; ``test_async_faults.py`` starts one process per rank).

``Faults`` numbers the run's commits (every ``commit_epoch``: an epoch's, a mid-epoch one) and,
inside each, the ``os.write`` / ``os.fsync`` calls made by the thread running that commit; it fails
the K-th call FN of commit C with OSError(ERRNO) — only on the thread named ``thread`` ("nnx-commit":
the background writer; "MainThread": a synchronous commit, the oracle). ``Updates`` (a callback on
every rank) records the updates; once training has made an update after the faulted commit's
point, the injector fires (so training has moved on while the commit was in flight), and with
``settle`` the callback then waits for the faulted commit's work to end on the writer's thread
(``fault_ended``): the failure is then known before the next update boundary, so where it
surfaces is exact, not a race.

The launch: ``ddp_common``'s data and net (``crash_params``, 3 epochs: updates 1-4, 5-10, 11-16; epoch commits),
``distributed=DDP()``; the faults are injected on rank 0 (the writer) only, one training per
``--fault`` (each under ``ROOT/fault<i>``). Every rank saves what it saw to ``OUT/rank<r>.json`` and
prints ``error rank R: <type>: <message>`` per training; after the last one it shuts the group
down and re-raises the last training's error, as a script without a handler would (exit code 1).
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import nnx_core.background as background_module  # noqa: E402
import nnx_adapters.runner as runner_module  # noqa: E402
import nnx_api as nnx  # noqa: E402
import nnx_api.training.writer as writer_module  # noqa: E402

N_EPOCHS = 3  # the 2-rank launch's epochs (one commit each)
WAIT_S = 20.0  # the longest the injector waits for training to move on, or a callback for the writer


def path_of(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return "?"


class Faults:
    """Numbers the commits and their ``os.write`` / ``os.fsync`` calls; fails one (module docstring).

    ``fail``: (commit, function, k, errno) — commit 1 is the run's first ``commit_epoch``.
    ``wait``: before failing, wait until training made an update after the commit's point (only
    on the background writer's thread; a synchronous commit blocks training)."""

    def __init__(self, mp: pytest.MonkeyPatch, fail: tuple[int, str, int, int] | None = None, *,
                 thread: str = "nnx-commit", wait: bool = True) -> None:
        self.fail, self.thread, self.wait = fail, thread, wait
        self.commits: list[dict[str, Any]] = []  # per commit: its update, epoch, thread and os calls
        self._inside: tuple[int, dict[str, Any]] | None = None  # (thread ident, commit entry)
        self.injected: OSError | None = None
        self.injected_on: str | None = None  # the thread the fault was raised on
        self.fault_update: int | None = None  # the faulted commit's update count
        self.moved_on = threading.Event()  # training made an update after the faulted commit's point
        self.fault_ended = threading.Event()  # the background work running the faulted commit returned
        self.waited_in_vain = False
        for module in (background_module, writer_module):  # the background and the synchronous path
            mp.setattr(module, "commit_epoch", self._commit(module.commit_epoch))
        mp.setattr(runner_module.ThreadRunner, "start", self._start(runner_module.ThreadRunner.start))
        mp.setattr(background_module.BackgroundCommits, "submit", self._submit(background_module.BackgroundCommits.submit))
        self.submitted = 0  # background commits handed over (numbered as ``commits`` is: every commit is one)
        for fn in ("write", "fsync"):
            mp.setattr(os, fn, self._os_call(fn, getattr(os, fn)))

    def _commit(self, original: Any) -> Any:
        def commit_epoch(files: Any, commit: Any) -> Any:
            entry = {"n": len(self.commits) + 1, "epoch": commit.epoch, "update": commit.meta.get("update_count"),
                     "thread": threading.current_thread().name, "calls": {"write": 0, "fsync": 0}, "trace": []}
            self.commits.append(entry)
            if self.fail is not None and self.fail[0] == entry["n"]:
                self.fault_update = entry["update"]
            outer, self._inside = self._inside, (threading.get_ident(), entry)
            try:
                return original(files, commit)
            finally:
                self._inside = outer

        return commit_epoch

    def _submit(self, original: Any) -> Any:
        def submit(background: Any, commit: Any, *args: Any) -> Any:  # on the training thread, before it goes on
            self.submitted += 1
            if self.fail is not None and self.fail[0] == self.submitted:
                self.fault_update = commit.meta.get("update_count")
            return original(background, commit, *args)

        return submit

    def _start(self, original: Any) -> Any:
        def start(runner: Any, work: Any) -> Any:
            def tracked() -> None:  # one background commit: sets fault_ended once it has kept its failure
                before = len(self.commits)
                try:
                    work()
                finally:
                    if self.fail is not None and any(c["n"] == self.fail[0] for c in self.commits[before:]):
                        self.fault_ended.set()

            return original(runner, tracked)

        return start

    def _os_call(self, fn: str, original: Any) -> Any:
        def call(fd: int, *args: Any) -> Any:
            inside = self._inside
            if inside is None or inside[0] != threading.get_ident():  # not the commit's own thread
                return original(fd, *args)
            entry = inside[1]
            entry["calls"][fn] += 1
            k = entry["calls"][fn]
            entry["trace"].append((fn, k, path_of(fd)))
            name = threading.current_thread().name
            if self.fail is not None and self.fail[:3] == (entry["n"], fn, k) and name == self.thread:
                if self.wait and name == "nnx-commit" and not self.moved_on.wait(WAIT_S):
                    self.waited_in_vain = True
                code = self.fail[3]
                self.injected = OSError(code, f"injected {errno.errorcode[code]} at os.{fn} #{k} of commit {entry['n']}")
                self.injected_on = name
                raise self.injected
            return original(fd, *args)

        return call


class Updates(nnx.Callback):
    """Every update this rank made; wakes the injector once training moved past the faulted
    commit; with ``settle``, then waits for the faulted commit's work to end (module docstring)."""

    distributed = "all"

    def __init__(self, faults: Faults | None = None, *, settle: bool = True) -> None:
        self.faults, self.settle = faults, settle
        self.seen: list[int] = []
        self.commit_running_after_wait = False

    def on_optimizer_update(self, ctx: Any, event: Any) -> None:
        self.seen.append(int(event.update_idx))
        faults = self.faults
        if faults is None or faults.fault_update is None or event.update_idx <= faults.fault_update:
            return
        faults.moved_on.set()
        if self.settle and faults.thread == "nnx-commit":  # the worker may not have begun the commit yet
            self.commit_running_after_wait |= not faults.fault_ended.wait(WAIT_S)


# ------------------------------------------------------------------------------- the 2-rank launch
def parse_fault(text: str) -> tuple[int, str, int, int]:
    commit, fn, k, code = text.split(":")
    return int(commit), fn, int(k), int(code)


def main(argv: list[str]) -> None:
    import ddp_common as common
    import torch

    from nnx_api import distributed

    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("root", type=Path)
    parser.add_argument("--mode", choices=("async", "sync"), required=True)
    parser.add_argument("--fault", type=parse_fault, action="append", required=True)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    info = distributed.init_process_group(timeout_seconds=30)
    results: list[dict[str, Any]] = []
    last_error: BaseException | None = None
    for i, fault in enumerate(args.fault):
        mp = pytest.MonkeyPatch()
        thread, wait = "nnx-commit" if args.mode == "async" else "MainThread", fault[0] < N_EPOCHS  # the last: nothing after it
        faults = Faults(mp, fault, thread=thread, wait=wait) if info.rank == 0 else None
        updates = Updates(faults)
        result: dict[str, Any] = {"fault": list(fault), "error": None}
        try:
            common.model().train(common.crash_params(n_epochs=N_EPOCHS, async_commits=args.mode == "async"),
                                 callbacks=[updates], root=args.root / f"fault{i}", distributed=distributed.DDP())
        except Exception as exc:
            last_error = exc
            result["error"] = {"type": type(exc).__name__, "message": str(exc),
                               "cause": None if exc.__cause__ is None else f"{type(exc.__cause__).__name__}: {exc.__cause__}"}
            print(f"error rank {info.rank}: {type(exc).__name__}: {exc}", flush=True)
        finally:
            mp.undo()
        result["updates"] = updates.seen
        result["commit_running_after_wait"] = updates.commit_running_after_wait
        if faults is not None:
            result["injected"] = None if faults.injected is None else str(faults.injected)
            result["injected_on"] = faults.injected_on
            result["fault_update"] = faults.fault_update
            result["waited_in_vain"] = faults.waited_in_vain
            result["commits"] = [{k: v for k, v in c.items() if k != "trace"} for c in faults.commits]
        results.append(result)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"rank{info.rank}.json").write_text(json.dumps(results, indent=1))
    distributed.shutdown(timeout_seconds=30)
    if last_error is not None:
        raise last_error  # a script without a handler: the traceback names the error, exit code 1
    print(f"done rank {info.rank} without an error", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
