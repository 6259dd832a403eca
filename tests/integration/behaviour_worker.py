"""One process of ``test_same_behaviour.py``: the same scenarios in one process or on a torchrun rank.

``python behaviour_worker.py MODE SCENARIO OUT ROOT``: MODE is ``single`` (no process group, plain
``model.train``) or ``ddp`` (torchrun's environment, ``distributed=DDP()``). What the scenario saw
is written to ``OUT/SCENARIO_MODE_rankR.json``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import TensorDataset

from nnx_adapters.collective.torch import TorchCollective
import nnx_api as nnx
from nnx_api import distributed

EPOCHS = 3
RANK = 0  # this process's rank (0 in one process)


class Recorder(nnx.Callback):
    """Records which hooks ran; ``fail_at`` raises in one hook (optionally at one epoch, on some ranks)."""

    distributed = "all"

    def __init__(self, name: str, log: list[str], fail_at: str | None = None, epoch: int | None = None,
                 ranks: tuple[int, ...] | None = None) -> None:
        self.name, self.log, self.fail_at, self.epoch, self.ranks = name, log, fail_at, epoch, ranks

    def _hook(self, hook: str, ctx: Any) -> None:
        self.log.append(f"{self.name}.{hook}")
        here = self.ranks is None or RANK in self.ranks
        if hook == self.fail_at and here and (self.epoch is None or ctx.epoch == self.epoch):
            raise RuntimeError(f"{self.name} fails in {hook}")

    def on_train_begin(self, ctx: Any) -> None:
        self._hook("on_train_begin", ctx)

    def on_epoch_end(self, ctx: Any) -> None:
        self._hook("on_epoch_end", ctx)

    def on_train_end(self, ctx: Any) -> None:
        self._hook("on_train_end", ctx)


class Counting(TorchCollective):
    """The torch collective, counting its all-reduces."""

    calls = 0

    def all_reduce_sum(self, values: Any) -> list[float]:
        Counting.calls += 1
        return super().all_reduce_sum(values)


def data() -> tuple[TensorDataset, TensorDataset]:
    g = torch.Generator().manual_seed(3)
    x = torch.randn(40, 4, generator=g)
    y = (x[:, 0] > 0).long()
    return TensorDataset(x[:32], y[:32]), TensorDataset(x[32:], y[32:])


def model() -> nnx.NNModel:
    torch.manual_seed(0)
    return nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=2, hidden_dims=(8,)), nnx.NNModelParams())


def params(mode: str, **kw: Any) -> nnx.NNTrainParams:
    train, val = data()
    place = {} if mode == "ddp" else {"rank": 0, "world_size": 1}
    return nnx.NNTrainParams(
        n_epochs=EPOCHS, seed=1, optim=nnx.NNOptimParams(max_lr=1e-2),
        train_loader=distributed.train_loader(train, 8, seed=0, **place),
        val_loader=distributed.validation_loader(val, 4, **place), progress=False, **kw,
    )


def train(mode: str, root: str, *, collective: Any = None, **kw: Any) -> Any:
    extra = {"distributed": distributed.DDP(collective=collective)} if mode == "ddp" else {}
    return model().train(params(mode, **{k: v for k, v in kw.items() if k != "callbacks"}), root=root,
                         callbacks=kw.get("callbacks"), **extra)


def outcome(fn: Any, root: str) -> dict[str, Any]:
    try:
        run = fn()
    except Exception as exc:  # noqa: BLE001 - the outcome is what the test compares
        return {"error": type(exc).__name__, "message": str(exc).replace(root, "<root>")}
    return {"epochs": sorted({i.epoch_idx for i in run.idps}), "resume": dict(run.resume_status or {}).get("mode")}


def scenario(name: str, mode: str, root: str) -> dict[str, Any]:
    if name in ("begin_failure", "begin_failure_one_rank"):
        log: list[str] = []
        ranks = (1,) if name == "begin_failure_one_rank" else None
        cbs = [Recorder("a", log), Recorder("b", log, "on_train_begin", ranks=ranks), Recorder("c", log)]
        result = outcome(lambda: train(mode, root, callbacks=cbs), root)
        if mode == "ddp":
            torch.distributed.barrier()  # the writer removes the never-committed folder after its peers returned
        runs = sorted(p.name for p in Path(root).iterdir() if not p.name.startswith(".")) if Path(root).is_dir() else []
        return {**result, "hooks": log, "runs": runs}
    if name == "admission":
        first = outcome(lambda: train(mode, root), root)
        again = outcome(lambda: train(mode, root), root)
        finished = outcome(lambda: train(mode, root, resume="auto"), root)
        overwrite = outcome(lambda: train(mode, root, overwrite_existing=True), root)
        return {"first": first, "again": again, "finished": finished, "overwrite": overwrite}
    if name == "resume":
        log = []
        failed = outcome(lambda: train(mode, root, callbacks=[Recorder("x", log, "on_epoch_end", epoch=1)]), root)
        continued = outcome(lambda: train(mode, root, resume="auto"), root)
        return {"failed": failed, "continued": continued}
    if name == "custom_collective":  # DDP(collective=...): the run's agreements go through the given adapter
        result = outcome(lambda: train(mode, root, collective=Counting()), root)
        return {**result, "all_reduces": Counting.calls}
    raise SystemExit(f"unknown scenario {name!r}")


def main(mode: str, name: str, out: Path, root: Path) -> None:
    global RANK
    if mode == "ddp":
        RANK = distributed.init_process_group("gloo", timeout_seconds=30).rank
    seen = scenario(name, mode, str(root / name / mode))
    (out / f"{name}_{mode}_rank{RANK}.json").write_text(json.dumps(seen))
    if mode == "ddp":
        distributed.shutdown(timeout_seconds=30)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4]))
