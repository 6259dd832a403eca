"""The crash tests' training script: ``python train_script.py ROOT OUT [options]``.

Trains ``tinyrun``'s seeded model into ROOT with ``resume="auto"`` — rerunning the same command
after a kill continues the run — and writes the final weights to OUT (atomically). Prints
``ready`` once imported and ``done <run id>`` at the end. Exit codes: 0 done, 3 the run's lease
is held by another process (``RunLeaseError``), 4 ``--hold`` waited past its hang guard.

Options: ``--epochs N``; ``--overwrite`` (``overwrite_existing=True`` instead of resuming);
``--hold FILE`` (after epoch 0's ``on_epoch_end`` — ``--hold-epoch E``: epoch E's, so epochs
before E are committed, once durable —, print ``holding`` and wait until FILE exists,
keeping the lease; after ``HOLD_GUARD_S`` it gives up, so an orphan never lingers — far longer
than any test waits, so a loaded machine cannot make the hold end before the test releases it);
``--kill-at KIND:J`` (SIGKILL this process right before its J-th file-system call of KIND, one of
``FILE_OPS``: the crash lands at a chosen point of the commit protocol, on any machine, however
loaded); ``--ops FILE`` (write how many calls of each kind the run made, as JSON);
``--commit-every N`` (``commit_every=N``); ``--workers N`` (train on ``tinyrun``'s augmenting
``DataLoader`` with N worker processes); ``--announce`` (print ``update N`` after each committed
update and, at ``on_train_end``, ``sigterm-seen N``: the run's update count when the SIGTERM
handler ``train()`` installed first ran, if it did).

``python train_script.py --serve`` is a fork server for the SIGKILL test: importing torch costs
seconds, so it imports once and, for each stdin line ``<script args...>``, forks a child that
runs this script's ``main`` on those args and prints ``result <status>`` where status is
``killed``, ``exit:<code>`` or ``hung`` (a child still running after ``HARD_TIMEOUT_S``, killed by
the hang guard). The children are real processes killed for real; only the interpreter start-up is shared.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import sys
import time
import traceback

os.environ.setdefault("NNX_PROGRESS", "0")

import torch  # noqa: E402
import torch._dynamo  # noqa: E402,F401  (imported by the first optimizer: pay for it before "ready")

torch.set_num_threads(1)

import tinyrun  # noqa: E402
from tinyrun import FILE_OPS  # noqa: E402

from nnx_core.commit import RunFiles  # noqa: E402
from nnx_adapters.storage.fs import FileStorage  # noqa: E402
import nnx_api as nnx  # noqa: E402

HOLD_GUARD_S = 900.0


class Announce(nnx.Callback):
    """``--announce``: ``update N`` on stdout after each committed update; notes the update count at
    which the SIGTERM handler that ``train()`` installs first runs (it wraps that handler, and calls
    it), printed at ``on_train_end`` as ``sigterm-seen N``. A signal handler only records: a print
    there could interrupt a print of the training loop."""

    def __init__(self) -> None:
        self.seen: int | None = None

    def on_train_begin(self, ctx: nnx.CallbackContext) -> None:
        inner = signal.getsignal(signal.SIGTERM)
        if not callable(inner):  # train() installed no handler (preemption off)
            return

        def seen(signum, frame):
            if self.seen is None:
                self.seen = ctx.update_count
            inner(signum, frame)

        signal.signal(signal.SIGTERM, seen)

    def on_optimizer_update(self, ctx: nnx.CallbackContext, event) -> None:
        print(f"update {ctx.update_count}", flush=True)

    def on_train_end(self, ctx: nnx.CallbackContext) -> None:
        if self.seen is not None:
            print(f"sigterm-seen {self.seen}", flush=True)


class Hold(nnx.Callback):
    def __init__(self, path: str, epoch: int = 0, root: str = ".") -> None:
        self.path, self.epoch, self.root = path, epoch, root

    def on_epoch_end(self, ctx: nnx.CallbackContext) -> None:
        if ctx.epoch != self.epoch:
            return
        deadline = time.monotonic() + HOLD_GUARD_S  # a hang guard only: the test releases or kills us
        files = RunFiles(FileStorage(self.root), ctx.run.id)
        while self.epoch and ((last := files.read_tag("last")) is None or last.epoch < self.epoch - 1):
            time.sleep(0.01)  # the commit before is written in the background: held once it is durable
            if time.monotonic() > deadline:
                os._exit(4)
        print("holding", flush=True)
        while not os.path.exists(self.path):
            if time.monotonic() > deadline:
                print("hold timed out", flush=True)
                os._exit(4)
            time.sleep(0.01)


def count_file_ops(kill_at: tuple[str, int] | None) -> dict[str, int]:
    """Count this process' ``os.write`` / ``fsync`` / ``replace`` / ``unlink`` calls from now on;
    with ``kill_at=(kind, j)``, SIGKILL the process right before the j-th call of ``kind``."""
    counts = dict.fromkeys(FILE_OPS, 0)

    def counted(kind: str, real):
        def call(*args, **kwargs):
            counts[kind] += 1
            if kill_at == (kind, counts[kind]):
                os.kill(os.getpid(), signal.SIGKILL)
            return real(*args, **kwargs)

        return call

    for kind in FILE_OPS:
        setattr(os, kind, counted(kind, getattr(os, kind)))
    return counts


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("root")
    parser.add_argument("out")
    parser.add_argument("--epochs", type=int, default=tinyrun.N_EPOCHS)
    parser.add_argument("--overwrite", action="store_true")
    parser.add_argument("--hold")
    parser.add_argument("--hold-epoch", type=int, default=0)
    parser.add_argument("--kill-at")
    parser.add_argument("--ops")
    parser.add_argument("--commit-every", type=int)
    parser.add_argument("--workers", type=int)
    parser.add_argument("--announce", action="store_true")
    args = parser.parse_args(argv)
    print("ready", flush=True)
    kill_at = None
    if args.kill_at:
        kind, j = args.kill_at.split(":")
        kill_at = (kind, int(j))
    counts = count_file_ops(kill_at) if kill_at or args.ops else {}
    kw = {"resume": None, "overwrite_existing": True} if args.overwrite else {}
    callbacks = [Hold(args.hold, args.hold_epoch, args.root)] if args.hold else None
    if args.commit_every is not None:
        kw["commit_every"] = args.commit_every
    if args.workers is not None:
        kw["augmenting_workers"] = args.workers
    if args.announce:
        callbacks = [*(callbacks or []), Announce()]
    try:
        model, run = tinyrun.train(args.root, args.epochs, callbacks=callbacks, **kw)
    except nnx.RunLeaseError as exc:
        print(f"lease-refused: {exc}", flush=True)
        return 3
    tmp = f"{args.out}.partial"
    torch.save(model.net.state_dict(), tmp)
    os.replace(tmp, args.out)
    if args.ops:
        with open(args.ops, "w") as f:
            json.dump(counts, f)
    print(f"done {run.id}", flush=True)
    return 0


HARD_TIMEOUT_S = 120.0


def _reap(pid: int) -> str:
    deadline = time.monotonic() + HARD_TIMEOUT_S
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:  # a hang guard, never part of a test's outcome
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return "hung"
        time.sleep(0.001)
    if os.WIFSIGNALED(status):
        return "killed"
    return f"exit:{os.WEXITSTATUS(status)}"


def serve() -> int:
    print("serving", flush=True)
    for line in sys.stdin:
        argv = shlex.split(line)
        if not argv or argv[0] == "quit":
            break
        pid = os.fork()
        if pid == 0:  # the child: run the script, never return into the server loop
            code = 1
            try:
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, 1)
                code = main(argv)
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stderr.flush()
                os._exit(code)
        print(f"result {_reap(pid)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(serve() if sys.argv[1:] == ["--serve"] else main(sys.argv[1:]))
