"""The progress bar: a callback the pipeline adds on the writer when progress is on.

A tqdm bar over epochs, advanced at each epoch's end with the epoch's training loss, validation
loss and accuracy. Off with ``progress=False`` or ``NNX_PROGRESS=0``.
"""

from __future__ import annotations

import os
from typing import Any

from tqdm.auto import tqdm

from nnx_api.callbacks.base import Callback, CallbackContext


def progress_enabled(flag: bool | None) -> bool:
    """The progress bar is on unless ``progress=False`` or ``NNX_PROGRESS=0``."""
    if flag is not None:
        return flag
    return os.environ.get("NNX_PROGRESS", "1").lower() not in ("0", "false", "no", "off")


class ProgressBar(Callback):
    """One bar for the epochs of a ``train()`` call."""

    distributed = "writer"

    def __init__(self, epochs: int) -> None:
        self.epochs = epochs
        self.bar: Any = None

    def on_train_begin(self, ctx: CallbackContext) -> None:
        self.bar = tqdm(total=self.epochs, desc=f"run {ctx.run.id[:8]}", unit="epoch", leave=False)

    def on_epoch_end(self, ctx: CallbackContext) -> None:
        idp = ctx.idp
        if self.bar is None or idp is None:
            return
        train = idp.train_summary or idp.train_edp
        post = {"loss": f"{train.loss:.4g}" if train.loss is not None else "-"}
        if idp.val_edp is not None and idp.val_edp.loss is not None:
            post["val_loss"] = f"{idp.val_edp.loss:.4g}"
        if idp.val_edp is not None and idp.val_edp.accuracy is not None:
            post["val_acc"] = f"{idp.val_edp.accuracy:.3f}"
        self.bar.set_postfix(post, refresh=False)
        self.bar.update(1)

    def on_train_end(self, ctx: CallbackContext) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
