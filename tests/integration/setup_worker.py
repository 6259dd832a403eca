"""One rank of a setup-agreement launch: ``python setup_worker.py <mode> <out dir> <runs root>``.

``test_ddp_setup.py`` starts one process per rank with torchrun's environment. Each mode gives
the ranks different ``train()`` arguments, as a new user might; every rank records the error it
raised and how long ``train()`` took to ``<out>/<mode>_rank<r>.json``. The group is joined with
the default timeout (30 minutes), as a user's script does: a rank left waiting is caught by the
test's wall-clock limit, not by the group.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import ddp_common as common

import nnx_api as nnx
from nnx_api import distributed


def params(seed: int = 0) -> nnx.NNTrainParams:
    return nnx.NNTrainParams(
        n_epochs=4, seed=seed, optim=nnx.NNOptimParams(max_lr=0.02),
        train_loader=distributed.train_loader(common.dataset(), common.BATCH, "pad", common.LOADER_SEED),
        val_loader=distributed.validation_loader(common.validation_set(), 8), progress=False,
    )


def stopper() -> nnx.EarlyStopping:
    """An EarlyStopping that stops after epoch 1 (no later epoch improves by 100)."""
    return nnx.EarlyStopping(patience=1, min_delta=100.0)


def given(mode: str, rank: int) -> dict[str, Any]:
    """The ``train()`` arguments of this rank in ``mode``."""
    if mode == "callbacks":  # an EarlyStopping on rank 0 only (it stops there after epoch 1)
        return {"params": params(), "callbacks": [stopper()] if rank == 0 else []}
    if mode == "writer_rank":  # DDP(writer_rank=LOCAL_RANK): each rank thinks it writes
        return {"params": params(), "distributed": distributed.DDP(writer_rank=rank)}
    if mode == "seed":  # seed=rank: different run configurations
        return {"params": params(seed=rank)}
    if mode == "same":  # the same arguments on every rank: trains
        return {"params": params(), "callbacks": [stopper()]}
    raise SystemExit(f"unknown mode {mode!r}")


def main() -> None:
    mode, out, root = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    info = distributed.init_process_group("gloo")
    kw = {"distributed": distributed.DDP(), **given(mode, info.rank)}
    start = time.monotonic()
    try:
        run = common.model().train(kw.pop("params"), root=root / mode, **kw)
        seen: dict[str, Any] = {"error": None, "epochs": sorted({i.epoch_idx for i in run.idps})}
    except Exception as exc:  # noqa: BLE001 - what the test compares
        seen = {"error": {"type": type(exc).__name__, "message": str(exc)}}
    seen["seconds"] = time.monotonic() - start
    (out / f"{mode}_rank{info.rank}.json").write_text(json.dumps(seen))
    distributed.shutdown(timeout_seconds=30)


if __name__ == "__main__":
    main()
