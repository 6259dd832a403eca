"""Builders shared by the DDP worker processes (``ddp_worker.py``) and the single-process
references in ``test_ddp.py``: the same data, nets, parameters and the "union" loader.

The union loader is what one process trains on to equal a 2-rank run: batch i of epoch e is
rank 0's batch i followed by rank 1's batch i. It deals the rows itself, from the specification's
words (``spec_partition``), never through the product's ``partition_indices`` or
``train_loader``: an exactness oracle must not share the code it checks.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import TensorDataset

import nnx_api as nnx
from nnx_api import distributed

IGNORE = -100
ROWS, FEATURES, CLASSES = 45, 5, 3
BATCH, ACCUMULATE, WORLD = 4, 2, 2
LOADER_SEED = 11
MAIN_EPOCHS = 10
CRASH_EPOCHS = 4


def free_port() -> int:
    """A TCP port free right now on 127.0.0.1 (each launch takes its own, so tests run in parallel)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_env(rank: int, world: int, port: int) -> dict[str, str]:
    """torchrun's environment for one rank of a one-node group on 127.0.0.1 (one thread, no progress)."""
    return {
        **os.environ, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_WORLD_SIZE": str(world),
        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "NNX_PROGRESS": "0", "OMP_NUM_THREADS": "1",
        "PYTHONUNBUFFERED": "1",
    }


def dataset() -> TensorDataset:
    """45 rows, ~20% targets ignored, and epoch 0's second window masked on both ranks (W == 0)."""
    x, y = _labelled(ROWS, 2024)
    g = torch.Generator().manual_seed(7)
    y[torch.rand(ROWS, generator=g) < 0.2] = IGNORE
    for rank in range(WORLD):  # window 1 of epoch 0 = batches 2 and 3 of every rank
        rows = spec_partition(ROWS, WORLD, rank, epoch=0, seed=LOADER_SEED, policy="pad")
        y[rows[2 * BATCH : 4 * BATCH]] = IGNORE
    return TensorDataset(x, y)


def spec_partition(n_rows: int, world: int, rank: int, *, epoch: int, seed: int, policy: str) -> list[int]:
    """Rank ``rank``'s rows of an epoch, as the specification words it (architecture §3,
    Partitions): "each epoch's permutation (seeded by seed + epoch)" — torch.randperm with a
    generator seeded so —, its tail first padded ("pad" repeats leading rows) or dropped ("drop")
    so every rank takes the same number of rows, then dealt to the ranks like cards."""
    order = torch.randperm(n_rows, generator=torch.Generator().manual_seed(seed + epoch)).tolist()
    if policy == "pad":
        order += order[: -n_rows % world]
    else:
        order = order[: n_rows - n_rows % world]
    return [row for position, row in enumerate(order) if position % world == rank]


def _labelled(rows: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A learnable task: the class is the argmax of a fixed linear map, with 20% of labels flipped."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, FEATURES, generator=g)
    w = torch.randn(FEATURES, CLASSES, generator=torch.Generator().manual_seed(1))
    y = (x @ w).argmax(-1)
    flip = torch.rand(rows, generator=g) < 0.2
    y[flip] = torch.randint(0, CLASSES, (int(flip.sum()),), generator=g)
    return x, y


def validation_set() -> TensorDataset:
    return TensorDataset(*_labelled(31, 99))


def net(dropout: float = 0.0) -> nn.Module:
    torch.manual_seed(5)
    layers: list[nn.Module] = [nn.Linear(FEATURES, 16), nn.Tanh()]
    if dropout:
        layers.append(nn.Dropout(dropout))
    layers.append(nn.Linear(16, CLASSES))
    return nn.Sequential(*layers)


def model(dropout: float = 0.0, **model_kw: Any) -> nnx.NNModel:
    params = nnx.NNModelParams(task=nnx.TaskSpec.categorical(CLASSES, ignore_index=IGNORE), **model_kw)
    return nnx.NNModel(params=params, module=net(dropout))


class UnionLoader:
    """One process's view of a 2-rank run: rank 0's batch i, then rank 1's, concatenated; each
    rank's share from ``spec_partition`` for the epoch NNx sets (``set_epoch``)."""

    def __init__(self, data: TensorDataset, policy: str = "pad") -> None:
        self.data, self.policy, self.epoch = data, policy, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def _shares(self) -> list[list[int]]:
        return [spec_partition(len(self.data), WORLD, r, epoch=self.epoch, seed=LOADER_SEED, policy=self.policy)
                for r in range(WORLD)]

    def __len__(self) -> int:
        return -(-len(self._shares()[0]) // BATCH)

    def __iter__(self):
        shares = self._shares()
        for start in range(0, len(shares[0]), BATCH):
            rows = torch.tensor([row for share in shares for row in share[start : start + BATCH]])
            yield tuple(t[rows] for t in self.data.tensors)


def main_params(*, single: bool, **kw: Any) -> nnx.NNTrainParams:
    """The exactness + records run: accumulation 2, ignore_index, a padded tail, clipping, a
    validation set, metrics, one monitor driving plateau LR, BEST and EarlyStopping."""
    data = dataset()
    if single:
        train, val = UnionLoader(data), distributed.validation_loader(validation_set(), 8, rank=0, world_size=1)
    else:
        train, val = distributed.train_loader(data, BATCH, "pad", LOADER_SEED), distributed.validation_loader(validation_set(), 8)
    kw.setdefault("n_epochs", MAIN_EPOCHS)
    return nnx.NNTrainParams(
        seed=0,
        optim=nnx.NNOptimParams(name=nnx.Optims.SGD, max_lr=0.1, momentum=0.9, grad_clip_norm=1.0, accumulate_grad_batches=ACCUMULATE),
        scheduler=nnx.NNSchedulerParams(factor=0.5, patience=0, cooldown=0),
        metrics=(nnx.MetricSpec(id="f1"), nnx.MetricSpec(id="nll")),
        monitor=nnx.MonitorSpec(metric="loss", split="val"),
        train_loader=train,
        val_loader=val,
        progress=False,
        **kw,
    )


def crash_params(**kw: Any) -> nnx.NNTrainParams:
    """The crash/resume run: dropout (each rank's own RNG stream must be restored), Adam."""
    kw.setdefault("n_epochs", CRASH_EPOCHS)
    kw.setdefault("val_loader", distributed.validation_loader(validation_set(), 8))
    kw.setdefault("train_loader", distributed.train_loader(dataset(), BATCH, "pad", LOADER_SEED))
    return nnx.NNTrainParams(
        seed=3,
        optim=nnx.NNOptimParams(max_lr=0.02),
        progress=False,
        **kw,
    )


class WeightTrace(nnx.Callback):
    """The weights after every committed update (and the update count and epoch at each)."""

    distributed = "all"

    def __init__(self) -> None:
        self.weights: list[dict[str, torch.Tensor]] = []
        self.updates: list[int] = []
        self.epochs: list[int] = []

    def on_optimizer_update(self, ctx: Any, event: Any) -> None:
        self.weights.append({k: v.detach().clone() for k, v in ctx.model.net.state_dict().items()})
        self.updates.append(event.update_idx)
        self.epochs.append(event.epoch_idx)


class Hooks(nnx.Callback):
    """Logs its begin and end hooks; ``fail_on`` ranks raise in ``on_train_begin``."""

    distributed = "all"

    def __init__(self, name: str, log: list[str], fail_on: tuple[int, ...] = ()) -> None:
        self.name, self.log, self.fail_on = name, log, fail_on

    def on_train_begin(self, ctx: Any) -> None:
        rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
        if rank in self.fail_on:
            raise RuntimeError(f"on_train_begin of {self.name} failed")
        self.log.append(f"begin {self.name}")

    def on_train_end(self, ctx: Any) -> None:
        self.log.append(f"end {self.name}")


class EndOnly(nnx.Callback):
    """Only a cleanup hook (its begin is the base class' no-op)."""

    distributed = "all"

    def __init__(self, name: str, log: list[str]) -> None:
        self.name, self.log = name, log

    def on_train_end(self, ctx: Any) -> None:
        self.log.append(f"end {self.name}")


def hook_callbacks(log: list[str], fail_on: tuple[int, ...]) -> list[nnx.Callback]:
    """a, b (its begin fails on ``fail_on``), c, then d with only on_train_end."""
    return [Hooks("a", log), Hooks("b", log, fail_on), Hooks("c", log), EndOnly("d", log)]


class CrashAt(nnx.Callback):
    """Raises at the start of epoch ``epoch`` on every rank (epochs before it stay committed)."""

    distributed = "all"

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch

    def on_epoch_begin(self, ctx: Any) -> None:
        if ctx.epoch == self.epoch:
            raise RuntimeError(f"crash at epoch {self.epoch}")


def files_under(folder: Path) -> dict[str, bytes]:
    """Every file below ``folder`` and its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


TASKS = ("regression", "multilabel")


def task_case(kind: str, *, single: bool) -> tuple[nnx.NNModel, nnx.NNTrainParams]:
    """A regression (mse/mae) or multilabel (f1) run of 3 epochs, 'drop' policy: the records are
    global sums on every rank (loss, accuracy rows, metric accumulators, label counts)."""
    g = torch.Generator().manual_seed(17)
    x = torch.randn(27, FEATURES, generator=g)
    if kind == "regression":
        y = x[:, :2] * 0.5 + 0.1 * torch.randn(27, 2, generator=g)
        task, metrics = nnx.TaskSpec.regression(2), (nnx.MetricSpec(id="mse"), nnx.MetricSpec(id="mae"))
    else:
        y = (x[:, :3] + 0.3 * torch.randn(27, 3, generator=g) > 0).float()
        task, metrics = nnx.TaskSpec.multilabel(3), (nnx.MetricSpec(id="f1", config={"average": "micro"}),)
    data, val = TensorDataset(x[:21], y[:21]), TensorDataset(x[21:], y[21:])
    torch.manual_seed(5)
    module = nn.Sequential(nn.Linear(FEATURES, 8), nn.Tanh(), nn.Linear(8, y.shape[1]))
    model = nnx.NNModel(params=nnx.NNModelParams(task=task), module=module)
    place = {"rank": 0, "world_size": 1} if single else {}
    params = nnx.NNTrainParams(
        n_epochs=3, seed=0, metrics=metrics, monitor=nnx.MonitorSpec(metric="loss", split="train"),
        train_loader=UnionLoader(data, "drop") if single else distributed.train_loader(data, BATCH, "drop", LOADER_SEED),
        val_loader=distributed.validation_loader(val, 4, **place),
        progress=False,
    )
    return model, params


# ------------------------------------------------------------------------------- custom steps
def custom_dataset() -> TensorDataset:
    """40 rows, every 5th target ignored: the ranks' batches hold unequal valid counts, none empty."""
    x, y = _labelled(40, 2024)
    y[::5] = IGNORE
    return TensorDataset(x, y)


def custom_step(*, weigh: bool, fail: tuple[int, int, int] | None = None, nan: tuple[int, int, int] | None = None):
    """The documented custom step (docs/steps-objectives.md): forward through ``ctx.model.net``, a
    mean loss over the valid targets, its own backward and optimizer step, one report. ``weigh``:
    it states its loss's denominator (``ctx.weigh``); ``fail`` / ``nan``: (rank, epoch, batch) where
    it raises, or where its loss turns NaN."""
    import torch.nn.functional as F

    def step(ctx: Any) -> nnx.EvaluationDataPoint:
        x, y = ctx.batch
        rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
        here = (rank, ctx.epoch_idx, ctx.batch_idx)
        if here == fail:
            raise ValueError(f"injected step failure on rank {rank}")
        out = ctx.model.net(x)
        if here == nan:
            out = out * float("nan")
        loss = F.cross_entropy(out, y, ignore_index=IGNORE)
        valid = int((y != IGNORE).sum())
        if weigh:
            ctx.weigh(valid)
        ctx.optimizer.zero_grad()
        loss.backward()
        ctx.optimizer.step()
        ctx.report_update()
        return nnx.EvaluationDataPoint(loss=loss.item(), count=valid)

    return step


def custom_eval_step(ctx: Any) -> nnx.EvaluationDataPoint:
    """A custom validation over its loader (one rank's shard under DDP): the mean loss and
    accuracy over its rows, with ``count`` the rows it scored."""
    import torch.nn.functional as F

    total = correct = rows = 0.0
    for x, y in ctx.val_loader:
        out = ctx.model.net(x)
        total += float(F.cross_entropy(out, y, reduction="sum"))
        correct += float((out.argmax(-1) == y).sum())
        rows += len(y)
    return nnx.EvaluationDataPoint(loss=total / rows, accuracy=correct / rows, count=int(rows),
                                   extra={"rows_seen": rows})


def custom_params(*, single: bool, **kw: Any) -> nnx.NNTrainParams:
    data = custom_dataset()
    train = UnionLoader(data) if single else distributed.train_loader(data, BATCH, "pad", LOADER_SEED)
    kw.setdefault("n_epochs", 3)
    kw.setdefault("optim", nnx.NNOptimParams(name=nnx.Optims.SGD, max_lr=0.2, momentum=0.9))
    return nnx.NNTrainParams(
        seed=0, train_loader=train,
        metrics=(nnx.MetricSpec(id="accuracy"),), progress=False, **kw,
    )


class WindowLog(nnx.Callback):
    """``ctx.idps`` at every epoch's end, as (epoch, batch) pairs: the journal's window."""

    distributed = "all"

    def __init__(self) -> None:
        self.seen: list[list[tuple[int, int]]] = []

    def on_epoch_end(self, ctx: Any) -> None:
        self.seen.append([(r.epoch_idx, r.batch_idx) for r in ctx.idps])


class FullReader(nnx.Callback):
    """A callback reading the full history, declared to run on every rank."""

    distributed = "all"
    history_access = "full"


JOURNAL = nnx.HistoryJournal(retention=7, chunk_size=3)  # less than two epochs of 5 batches
LOSS_FN_OPTIM = nnx.NNOptimParams(name=nnx.Optims.SGD, max_lr=0.02)  # small: a summed loss's steps are batch-sized


def teacher() -> nn.Module:
    """A fixed teacher for distillation (another initialisation of the same shape)."""
    torch.manual_seed(17)
    return nn.Sequential(nn.Linear(FEATURES, 8), nn.Tanh(), nn.Linear(8, CLASSES))



# ------------------------------------------------------------------------------- Trainer
def cadence_step(seen: list[tuple[float, float]]):
    """A Trainer step: the head commits on every batch, the encoder (the primary) on every other,
    each loss the mean over its valid targets, weighed (``ctx.weigh``); ``seen`` gets each batch's
    learning rates before stepping."""
    import torch.nn.functional as F

    def step(ctx: Any) -> nnx.EvaluationDataPoint:
        seen.append((ctx.optimizers["encoder"].param_groups[0]["lr"], ctx.optimizers["head"].param_groups[0]["lr"]))
        x, y = ctx.batch
        valid = int((y != IGNORE).sum())
        ctx.weigh(valid)
        for name in (["encoder", "head"] if ctx.batch_idx % 2 else ["head"]):
            opt = ctx.optimizers[name]
            opt.zero_grad()
            loss = F.cross_entropy(ctx.model.net(x), y, ignore_index=IGNORE)
            loss.backward()
            opt.step()
            ctx.report_update(name)
        return nnx.EvaluationDataPoint(loss=float(loss), count=valid)

    return step


def cadence_params(*, single: bool) -> nnx.NNTrainerParams:
    data = custom_dataset()
    train = UnionLoader(data) if single else distributed.train_loader(data, BATCH, "pad", LOADER_SEED)
    halve = nnx.NNSchedulerParams(kind=nnx.Schedulers.STEP, step_size=1, factor=0.7, clock="optimizer_update")
    sgd = {"name": nnx.Optims.SGD, "max_lr": 0.3, "momentum": 0.0}
    return nnx.NNTrainerParams(
        n_epochs=2, seed=0, train_loader=train, progress=False, schedulers={"encoder": halve, "head": halve},
        optims={"encoder": nnx.NNOptimParams(**sgd, param_groups=[nnx.NNParamGroupSpec(name_pattern="0.*")]),
                "head": nnx.NNOptimParams(**sgd, param_groups=[nnx.NNParamGroupSpec(name_pattern="2.*")])},
    )


class FaultyObjective(nnx.Objective):
    """The supervised objective, raising (``fail``) or NaN (``nan``) on rank 1 at epoch 1 batch 2."""

    def __init__(self, fault: str) -> None:
        self.fault, self.inner = fault, nnx.supervised_objective()

    def __call__(self, ctx: Any) -> Any:
        if torch.distributed.get_rank() == 1 and (ctx.epoch_idx, ctx.batch_idx) == (1, 2):
            if self.fault == "fail":
                raise ValueError("injected objective failure on rank 1")
            x, y = ctx.batch
            ctx = dataclasses.replace(ctx, batch=(x * float("nan"), y))
        return self.inner(ctx)


# ------------------------------------------------------------------------------- fp16 (faked on the CPU)
FP16_INJECT = 3  # rank 1's gradients overflow in its 3rd training batch (epoch 0, batch 2)
FP16_CASES = ("default", "flag", "custom", "objective")


def fp16_entry(case: str, here: Any, scales: list[float]) -> dict[str, Any]:
    """The step of an fp16 case: the default step ("default": a real inf in rank 1's gradient,
    averaged by DDP; "flag": only rank 1's scaler flag says overflow), the documented custom step
    through ``ctx.scaler`` with a real inf in rank 1's own gradient before the scaler's decision
    ("custom"), or the supervised objective ("objective")."""
    import torch.nn.functional as F

    if case == "objective":
        return {"objective": nnx.supervised_objective()}
    if case != "custom":
        return {}

    def step(ctx: Any) -> nnx.EvaluationDataPoint:
        x, y = ctx.batch
        with torch.autocast("cpu", dtype=torch.float16):
            out = ctx.model.net(x)
        loss = F.cross_entropy(out.float(), y, ignore_index=IGNORE)
        valid = int((y != IGNORE).sum())
        ctx.weigh(valid)
        ctx.optimizer.zero_grad()
        ctx.scaler.scale(loss).backward()
        if here():
            next(ctx.model.net.parameters()).grad.fill_(float("inf"))
        before = ctx.scaler.get_scale()
        ctx.scaler.step(ctx.optimizer)  # skipped on every rank when any rank overflowed
        ctx.scaler.update()
        scales.append(ctx.scaler.get_scale())
        if ctx.scaler.get_scale() >= before:  # a scaler-skipped step is no update: not reported
            ctx.report_update()
        return nnx.EvaluationDataPoint(loss=loss.item(), count=valid)

    return {"train_step_fn": step}

