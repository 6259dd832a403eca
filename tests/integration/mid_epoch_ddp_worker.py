"""One rank of a mid-epoch DDP run: ``torchrun --standalone --nproc-per-node=W mid_epoch_ddp_worker.py OUT ROOT [options]``.

``test_mid_epoch_ddp.py`` runs it: ``ddp_common``'s categorical data (masked targets) dealt by
``train_loader(global_batch_size=8, policy="pad", seed=11)`` (6 group batches an epoch on any
world size), SGD with momentum, a validation set, ``resume="auto"``, ``distributed=DDP()``.
Rerunning the same command after a crash or a preemption continues the run.

Options: ``--epochs N`` (3); ``--dropout P`` (0.1: each rank draws its own masks, so its RNG
stream must be restored); ``--commit-every K`` (``commit_every=K``; unset: preemption alone commits
inside an epoch); ``--reshard`` (``resume_mode="reshard"``: may continue on another world size);
``--crash-at U`` (rank 1 ends itself with ``os._exit(17)`` right after committed update U is
announced, before any commit of it); ``--hold-at U --gate PATH`` (rank 1 waits after committed
update U until the file PATH exists, at most 60 s: an outside signal then lands at a known update,
the other rank waiting for it in the next collective); ``--journal`` (``history=HistoryJournal``
with a window of 3 records, smaller than an epoch). A training summary with a metric is on:
a mid-epoch commit carries every rank's partial sums.

Output (stdout, flushed): ``pid rank R <pid>`` at start; on rank 0 ``update N epoch E batch B``
after each committed update; ``preempted rank R update U epoch E committed C`` when ``train()``
raised ``TrainingPreempted`` (then exit code 3, after the teardown barrier); ``done rank R`` at
the end. Rank 0 saves the final parameters, the records (a journal run's: all it committed), the run id, ``partial`` and how the call
resumed to ``OUT/result.pt``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import ddp_common as common  # noqa: E402

import nnx_api as nnx  # noqa: E402
from nnx_api import distributed  # noqa: E402

GLOBAL_BATCH = 8
PREEMPTED_EXIT = 3
CRASH_EXIT = 17


def say(line: str) -> None:
    """One line to stdout in one write: the ranks share torchrun's pipe, and ``print`` writes the
    text and its newline apart, so two ranks' lines could run into one."""
    os.write(1, f"{line}\n".encode())


class Announce(nnx.Callback):
    """Rank 0 prints every committed update; rank 1 dies at ``crash_at`` or waits at ``hold_at``
    for ``gate``."""

    distributed = "all"

    def __init__(self, rank: int, crash_at: int | None, hold_at: int | None, gate: Path | None) -> None:
        self.rank, self.crash_at, self.hold_at, self.gate = rank, crash_at, hold_at, gate

    def on_optimizer_update(self, ctx: Any, event: Any) -> None:
        if self.rank == 0:
            say(f"update {event.update_idx} epoch {event.epoch_idx} batch {event.batch_idx}")
        if self.crash_at is not None and self.rank == 1 and event.update_idx == self.crash_at:
            say(f"crash rank 1 update {event.update_idx}")
            os._exit(CRASH_EXIT)  # a hard death: no handler, no commit, no teardown
        if self.rank == 1 and event.update_idx == self.hold_at and self.gate is not None:
            say(f"holding rank 1 update {event.update_idx}")
            deadline = time.monotonic() + 60
            while not self.gate.exists() and time.monotonic() < deadline:
                time.sleep(0.01)


def params(args: argparse.Namespace) -> nnx.NNTrainParams:
    kw: dict[str, Any] = {}
    if args.commit_every is not None:
        kw["commit_every"] = args.commit_every
    if args.reshard:
        kw["resume_mode"] = "reshard"
    return nnx.NNTrainParams(
        n_epochs=args.epochs, seed=3, progress=False, resume="auto",
        optim=nnx.NNOptimParams.builder().sgd(max_lr=0.1, momentum=0.9).build(),
        train_loader=distributed.train_loader(common.dataset(), global_batch_size=GLOBAL_BATCH, policy="pad", seed=11),
        val_loader=distributed.validation_loader(common.validation_set(), 16),
        metrics=(nnx.MetricSpec(id="f1"),),
        **kw,
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("root", type=Path)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--commit-every", type=int)
    parser.add_argument("--reshard", action="store_true")
    parser.add_argument("--crash-at", type=int)
    parser.add_argument("--hold-at", type=int)
    parser.add_argument("--gate", type=Path)
    parser.add_argument("--journal", action="store_true")
    args = parser.parse_args(argv)

    info = distributed.init_process_group(timeout_seconds=60)
    say(f"pid rank {info.rank} {os.getpid()}")
    model = common.model(dropout=args.dropout)
    callbacks = [Announce(info.rank, args.crash_at, args.hold_at, args.gate)]
    try:
        history = nnx.HistoryJournal(retention=3, chunk_size=2) if args.journal else None
        run = model.train(params(args), callbacks=callbacks, root=args.root, distributed=distributed.DDP(), history=history)
    except nnx.TrainingPreempted as exc:
        say(f"preempted rank {info.rank} update {exc.update} epoch {exc.epoch} committed {exc.committed}")
        distributed.shutdown(timeout_seconds=60)
        return PREEMPTED_EXIT
    if info.rank == 0:
        args.out.mkdir(parents=True, exist_ok=True)
        torch.save({
            "final": {k: v.detach().clone() for k, v in model.net.state_dict().items()},
            "idps": list(run.committed_records()) if args.journal else run.idps, "id": run.id, "partial": run.partial,
            "resume": None if run.resume_status is None else dict(run.resume_status),
        }, args.out / "result.pt")
    say(f"done rank {info.rank}")
    distributed.shutdown(timeout_seconds=60)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
