"""One rank of a multi-node test: ``torchrun ... multinode_worker.py <out dir> <runs root> [epochs] [kill epoch] [victim]``.

``test_multinode.py`` starts it under torchrun, two agents acting as two nodes (or one agent with
two ranks, the reference). It joins the group, trains ``ddp_common``'s tiny categorical run
(Adam, a padded tail, a validation set) for a few epochs under ``DDP()`` with ``resume="auto"``,
and saves what it saw to ``<out>/rank<r>.pt``: its place in the group (the ``GroupInfo``
fields and torchrun's environment), the final parameters, the records and the run id. With a
kill epoch, the victim rank (default 1) SIGKILLs itself at its second update of that epoch, once
per job (a marker file in the out dir; torchrun's ``TORCHELASTIC_RESTART_COUNT`` counts each
agent's own restarts only, so it cannot tell): a node lost mid-epoch. Each
agent may be given its own runs root (a node without shared storage).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import ddp_common as common

import nnx_api as nnx
from nnx_api import distributed

ENV = ("RANK", "LOCAL_RANK", "GROUP_RANK", "LOCAL_WORLD_SIZE", "GROUP_WORLD_SIZE", "WORLD_SIZE", "OMP_NUM_THREADS",
       "TORCHELASTIC_RESTART_COUNT")


class Killer(nnx.Callback):
    """SIGKILLs the victim rank at its second update of epoch ``epoch``, once (``marker``)."""

    distributed = "all"

    def __init__(self, epoch: int, victim: int, marker: Path) -> None:
        self.epoch, self.victim, self.marker, self.seen = epoch, victim, marker, 0

    def on_optimizer_update(self, ctx: Any, event: Any) -> None:
        if event.epoch_idx == self.epoch and torch.distributed.get_rank() == self.victim and not self.marker.exists():
            self.seen += 1
            if self.seen == 2:
                self.marker.parent.mkdir(parents=True, exist_ok=True)
                self.marker.touch()
                os.kill(os.getpid(), signal.SIGKILL)


def main(out: Path, root: Path, epochs: int, kill_epoch: int | None, victim: int) -> None:
    info = distributed.init_process_group(timeout_seconds=60)
    model = common.model()
    callbacks = [] if kill_epoch is None else [Killer(kill_epoch, victim, out / "killed")]
    run = model.train(common.crash_params(n_epochs=epochs, resume="auto"), callbacks=callbacks, root=root,
                      distributed=distributed.DDP())
    saved = {
        "info": (info.rank, info.world_size, info.local_rank, info.backend, info.node_rank, info.local_world_size),
        "env": {key: os.environ.get(key) for key in ENV},
        "threads": torch.get_num_threads(),
        "final": {k: v.detach().clone() for k, v in model.net.state_dict().items()},
        "idps": run.idps,
        "id": run.id,
        "resume": None if run.resume_status is None else run.resume_status["mode"],
    }
    out.mkdir(parents=True, exist_ok=True)
    torch.save(saved, out / f"rank{info.rank}.pt")
    distributed.shutdown(timeout_seconds=60)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 2,
         int(sys.argv[4]) if len(sys.argv) > 4 else None, int(sys.argv[5]) if len(sys.argv) > 5 else 1)
