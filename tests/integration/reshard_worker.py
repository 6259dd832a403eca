"""One rank of a world-size change: ``torchrun --standalone --nproc-per-node=W reshard_worker.py <out dir> <runs root> [stop epoch]``.

``test_multinode.py`` runs it on 2, then 1, then 4 ranks against the same runs root (each stage
stops at the start of its stop epoch, after the epochs before it committed), and once
uninterrupted on 2 ranks. The run: ``ddp_common``'s categorical data (masked targets), a net
without dropout (so the forward is deterministic), SGD with momentum,
``train_loader(global_batch_size=8)`` with a padded tail, validation whose first batch per rank
depends on the world size, ``resume="auto"`` and
``resume_mode="reshard"``. Rank 0 saves the final parameters, the records and how the call
resumed to ``<out>/result.pt``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import ddp_common as common

import nnx_api as nnx
from nnx_api import distributed

EPOCHS, GLOBAL_BATCH = 5, 8


def params() -> nnx.NNTrainParams:
    return nnx.NNTrainParams(
        n_epochs=EPOCHS, seed=3, progress=False, resume="auto", resume_mode="reshard",
        optim=nnx.NNOptimParams.builder().sgd(max_lr=0.1, momentum=0.9).build(),
        train_loader=distributed.train_loader(common.dataset(), global_batch_size=GLOBAL_BATCH, policy="pad", seed=11),
        # 31 rows in batches of 16: a rank's first batch holds 16 rows on 1 or 2 ranks and 8 on 4, so
        # the data fingerprint must know a world-size change from other data
        val_loader=distributed.validation_loader(common.validation_set(), 16),
    )


def main(out: Path, root: Path, stop: int | None) -> None:
    info = distributed.init_process_group(timeout_seconds=60)
    model = common.model()
    callbacks = [] if stop is None else [common.CrashAt(stop)]
    try:
        run = model.train(params(), callbacks=callbacks, root=root, distributed=distributed.DDP())
    except RuntimeError as exc:
        if stop is None or f"crash at epoch {stop}" not in str(exc):
            raise
    else:
        if info.rank == 0:
            out.mkdir(parents=True, exist_ok=True)
            torch.save({
                "final": {k: v.detach().clone() for k, v in model.net.state_dict().items()},
                "idps": run.idps, "id": run.id,
                "resume": None if run.resume_status is None else dict(run.resume_status),
            }, out / "result.pt")
    distributed.shutdown(timeout_seconds=60)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else None)
