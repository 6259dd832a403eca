"""The crash tests' training script: ``python train_script.py ROOT OUT [options]``.

Trains ``tinyrun``'s seeded model into ROOT with ``resume="auto"`` — rerunning the same command
after a kill continues the run — and writes the final weights to OUT (atomically). Prints
``ready`` once imported and ``done <run id>`` at the end. Exit codes: 0 done, 3 the run's lease
is held by another process (``RunLeaseError``), 4 ``--hold`` waited too long.

Options: ``--epochs N``; ``--overwrite`` (``overwrite_existing=True`` instead of resuming);
``--hold FILE`` (after epoch 0's ``on_epoch_end``, print ``holding`` and wait until FILE exists,
keeping the lease).

``python train_script.py --serve`` is a fork server for the SIGKILL test: importing torch costs
seconds, so it imports once and, for each stdin line ``<kill after s> <script args...>``, forks a
child that runs this script's ``main`` on those args, SIGKILLs it after that many seconds (a
negative delay: no kill; any child is killed after 120 s) and prints ``result <status> <elapsed>``
where status is ``killed`` or ``exit:<code>``. The children are real processes killed for real;
only the interpreter start-up is shared.
"""

from __future__ import annotations

import argparse
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

import nnx_api as nnx  # noqa: E402


class Hold(nnx.Callback):
    def __init__(self, path: str) -> None:
        self.path = path

    def on_epoch_end(self, ctx: nnx.CallbackContext) -> None:
        if ctx.epoch != 0:
            return
        print("holding", flush=True)
        deadline = time.monotonic() + 60
        while not os.path.exists(self.path):
            if time.monotonic() > deadline:
                print("hold timed out", flush=True)
                os._exit(4)
            time.sleep(0.01)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("root")
    parser.add_argument("out")
    parser.add_argument("--epochs", type=int, default=tinyrun.N_EPOCHS)
    parser.add_argument("--overwrite", action="store_true")
    parser.add_argument("--hold")
    args = parser.parse_args(argv)
    print("ready", flush=True)
    kw = {"resume": None, "overwrite_existing": True} if args.overwrite else {}
    callbacks = [Hold(args.hold)] if args.hold else None
    try:
        model, run = tinyrun.train(args.root, args.epochs, callbacks=callbacks, **kw)
    except nnx.RunLeaseError as exc:
        print(f"lease-refused: {exc}", flush=True)
        return 3
    tmp = f"{args.out}.partial"
    torch.save(model.net.state_dict(), tmp)
    os.replace(tmp, args.out)
    print(f"done {run.id}", flush=True)
    return 0


HARD_TIMEOUT_S = 120.0


def _reap(pid: int, kill_after: float) -> str:
    start = time.monotonic()
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        elapsed = time.monotonic() - start
        if (0 <= kill_after <= elapsed) or elapsed > HARD_TIMEOUT_S:
            os.kill(pid, signal.SIGKILL)
            _, status = os.waitpid(pid, 0)
            break
        time.sleep(0.001)
    if os.WIFSIGNALED(status):
        return "killed"
    return f"exit:{os.WEXITSTATUS(status)}"


def serve() -> int:
    print("serving", flush=True)
    for line in sys.stdin:
        words = shlex.split(line)
        if not words or words[0] == "quit":
            break
        kill_after, argv = float(words[0]), words[1:]
        start = time.monotonic()
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
        status = _reap(pid, kill_after)
        print(f"result {status} {time.monotonic() - start:.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(serve() if sys.argv[1:] == ["--serve"] else main(sys.argv[1:]))
