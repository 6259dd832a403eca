"""Experiment trackers: TensorBoard and Weights & Biases as callbacks.

Both log the same per-epoch scalars (``nnx_api.runs.curves.epoch_scalars``: ``train/*``,
``train_epoch/*``, ``val/*`` with declared metrics, ``lr``, ``monitor/<split>.<metric>``,
``monitor/improved``, ``monitor/best``) at ``step = epoch``. The values are read at
``on_epoch_end`` and written as deferred writes, i.e. only after the epoch has committed: a
tracker never shows an epoch the run does not have, and a resumed run never logs one twice.

Both are ``distributed = "writer"`` callbacks (they write files). They declare
``history_access = "full"``: with a history journal whose retention is shorter than an epoch,
the whole-epoch training values still cover every batch (only the current epoch's records, at
the end of the history, are read). Their libraries are optional
extras imported when a callback is built: ``pip install "nnx[tensorboard]"`` /
``pip install "nnx[wandb]"``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nnx_adapters.extras import require
from nnx_api.callbacks import Callback, CallbackContext
from nnx_api.runs.curves import current_epoch_records, epoch_scalars

TENSORBOARD_DIR = ".tensorboard"


def scalars_of(ctx: CallbackContext) -> dict[str, float]:
    """The epoch's named scalars, read from the callback context at ``on_epoch_end``."""
    records = current_epoch_records(ctx.idps, ctx.epoch)
    if not records and ctx.idp is not None:
        records = [ctx.idp]
    out = epoch_scalars(records)
    decision = ctx.decision
    if decision is not None:  # the live decision is the one BEST/EarlyStopping obey
        out["monitor/improved"] = 1.0 if decision.improved else 0.0
    return out


class TensorBoardCallback(Callback):
    """Write the epoch scalars to TensorBoard event files (``torch.utils.tensorboard``).

    ``log_dir=None`` writes to ``<runs root>/.tensorboard/<run id>`` (one folder per run, next
    to the runs and hidden from ``nnx runs list``): ``tensorboard --logdir runs/.tensorboard``.
    A given ``log_dir`` is used as it is. One writer per ``train()``, closed at train end.
    """

    distributed = "writer"
    history_access = "full"

    def __init__(self, log_dir: str | os.PathLike[str] | None = None, flush_each_epoch: bool = True) -> None:
        module = require("torch.utils.tensorboard", "tensorboard", "TensorBoardCallback", package="tensorboard")
        self._writer_class = module.SummaryWriter
        self.log_dir = None if log_dir is None else Path(log_dir)
        self.flush_each_epoch = bool(flush_each_epoch)
        self.writer: Any = None
        self.path: Path | None = None  # where the current/last train() wrote

    def on_train_begin(self, ctx: CallbackContext) -> None:
        self.path = self.log_dir or Path(ctx.run.root) / TENSORBOARD_DIR / ctx.run.id
        self.writer = self._writer_class(log_dir=str(self.path))
        add_text = getattr(self.writer, "add_text", None)  # a stand-in writer may give add_scalar only, as NNx needs
        if add_text is not None:
            add_text("nnx/run_id", str(ctx.run.id), global_step=max(ctx.epoch, 0))

    def on_epoch_end(self, ctx: CallbackContext) -> None:
        writer, epoch, scalars = self.writer, ctx.epoch, scalars_of(ctx)

        def write() -> None:
            for name, value in scalars.items():
                writer.add_scalar(name, value, global_step=epoch)
            if self.flush_each_epoch:
                writer.flush()

        ctx.deferred_checkpoint_writes.append(write)

    def on_train_end(self, ctx: CallbackContext) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


class WandbCallback(Callback):
    """Log the epoch scalars to a Weights & Biases run (``{"epoch": e, **scalars}`` at step e).

    Without ``wandb_run`` it starts its own run at train begin (``project``, the NNx run's
    configuration as W&B config, the run id as name; ``init_kwargs`` go to ``wandb.init`` and win)
    and finishes it at train end. A given ``wandb_run`` is logged to and left open.
    ``WANDB_MODE=offline`` keeps everything in a local run folder (``wandb sync`` uploads it).
    """

    distributed = "writer"
    history_access = "full"

    def __init__(self, project: str | None = None, wandb_run: Any = None, **init_kwargs: Any) -> None:
        self._wandb = require("wandb", "wandb", "WandbCallback")
        self.project = project
        self.wandb_run = wandb_run
        self.init_kwargs: Mapping[str, Any] = dict(init_kwargs)
        self.run: Any = None
        self._owned = False

    def on_train_begin(self, ctx: CallbackContext) -> None:
        if self.wandb_run is not None:
            self.run, self._owned = self.wandb_run, False
            return
        kwargs: dict[str, Any] = {
            "project": self.project,
            "name": str(ctx.run.id),
            "config": {"nnx_run_id": str(ctx.run.id), **dict(ctx.run.config)},
        }
        kwargs.update(self.init_kwargs)
        self.run, self._owned = self._wandb.init(**kwargs), True

    def on_epoch_end(self, ctx: CallbackContext) -> None:
        run, epoch = self.run, ctx.epoch
        row = {"epoch": epoch, **scalars_of(ctx)}
        ctx.deferred_checkpoint_writes.append(lambda: run.log(row, step=epoch))

    def on_train_end(self, ctx: CallbackContext) -> None:
        if self.run is not None and self._owned:
            self.run.finish()
        self.run, self._owned = None, False


__all__ = ["TensorBoardCallback", "WandbCallback", "scalars_of"]
