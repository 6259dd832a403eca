"""Console progress: a callback the pipeline adds on the writer when progress is on.

On a terminal (stderr is a TTY) one tqdm bar counts the batches of the current epoch —
``run 1a2b3c4d · epoch 2 [3/10] ██████░░░░ 45/100`` (epoch 2, the run's epoch index as records,
``nnx runs show`` and plots number it; the third of the ten this call trains) — with the
previous epoch's mean training loss and its validation loss and accuracy as the postfix. It moves on each committed optimizer update
(``on_optimizer_update``: a batch index, no tensor is read, so no host synchronisation is added),
and at each epoch's end. When stderr is not a terminal (CI logs, ``| tee``) there is no bar and no
``\\r``: one plain line per epoch. Either way a final summary line stays on screen (on stderr, with the
bar and the epoch lines)::

    run 1a2b3c4d: 10 epochs in 4.2s · loss 0.0312 · val_loss 0.0876 · val_acc 0.975 · BEST epoch 7 (val.loss 0.0851)

Its seconds are the wall time of the whole ``train()`` call, from the call's start (``started``,
taken by the pipeline) to its end: the checks, the first-batch probe, admission, every callback
hook, the final LAST refresh and the attempt record included. So the pipeline, not
``on_train_end``, prints it (``summarize``), once the run is finished, just before ``Run saved to``
(after a failure or Ctrl-C: as the error leaves the call).

Switches: ``progress=False`` (``NNTrainParams``) or ``NNX_PROGRESS=0`` turn every line off (the
bar, the summary, ``continuing run`` and ``Run saved to``); ``NNX_TQDM_DISABLE=1`` keeps the lines
and drops the bar; ``NNX_QUIET=1`` sends the two lines that go to stdout (``continuing run``,
``Run saved to``) to stderr, so a program's stdout holds only its own output. Everything with a
clock in it goes to stderr, so two identical trainings print the same stdout (apart from the run id).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from typing import Any, TextIO

from tqdm.auto import tqdm

from nnx_api.callbacks.base import Callback, CallbackContext, UpdateEvent
from nnx_api.runs.curves import epoch_training, monitor_name

_OFF = ("0", "false", "no", "off")


def progress_enabled(flag: bool | None) -> bool:
    """Progress output is on unless ``progress=False`` or ``NNX_PROGRESS=0``."""
    if flag is not None:
        return flag
    return os.environ.get("NNX_PROGRESS", "1").lower() not in _OFF


def message_stream() -> TextIO:
    """Where ``train()``'s own lines go: stdout, or stderr under ``NNX_QUIET=1``."""
    quiet = os.environ.get("NNX_QUIET", "").lower() not in ("", *_OFF)
    return sys.stderr if quiet else sys.stdout


def _bar_wanted(stream: TextIO) -> bool:
    if os.environ.get("NNX_TQDM_DISABLE", "").lower() in ("1", "true", "yes"):
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def epoch_values(idp: Any, idps: Sequence[Any]) -> dict[str, str]:
    """``loss`` (the whole epoch's: ``nnx_api.runs.curves.epoch_training``), ``val_loss`` and ``val_acc`` of an epoch, formatted."""
    out: dict[str, str] = {}
    rows = []
    for r in reversed(idps):  # the epoch's records are the history's tail
        if r.epoch_idx != idp.epoch_idx:
            break
        rows.append(r)
    train = epoch_training(rows[::-1])
    if train is not None and train.loss is not None:
        out["loss"] = f"{train.loss:.4g}"
    val = idp.val_edp
    if val is not None and val.loss is not None:
        out["val_loss"] = f"{val.loss:.4g}"
    if val is not None and val.accuracy is not None:
        out["val_acc"] = f"{val.accuracy:.3f}"
    return out


class ProgressBar(Callback):
    """The console progress of one ``train()`` call (see the module docstring): ``epochs`` this
    call trains, ``batches`` per epoch (None: unknown, the bar counts without a total),
    ``started`` the ``time.monotonic()`` of the call's start (None: ``on_train_begin``'s)."""

    distributed = "writer"

    def __init__(
        self, epochs: int, batches: int | None = None, *, stream: TextIO | None = None, started: float | None = None,
    ) -> None:
        self.epochs, self.batches = epochs, batches
        self.stream = stream if stream is not None else sys.stderr
        self.bar: Any = None
        self.done = 0
        self.last: dict[str, str] = {}
        self.started, self.epoch_started = started, 0.0
        self.best: str | None = None
        self.name = "run"  # "run 1a2b3c4d" once the run is known (on_train_begin)

    def on_train_begin(self, ctx: CallbackContext) -> None:
        if self.started is None:
            self.started = time.monotonic()
        self.name = f"run {ctx.run.id[:8]}"
        if _bar_wanted(self.stream):
            self.bar = tqdm(total=self.batches, desc=self.name, unit="batch", leave=False, file=self.stream,
                            dynamic_ncols=True)

    def on_epoch_begin(self, ctx: CallbackContext) -> None:
        self.epoch_started = time.monotonic()
        if self.bar is not None:
            self.bar.reset(total=self.batches)
            self.bar.set_description(f"{self.name} · epoch {ctx.epoch} [{self.done + 1}/{self.epochs}]", refresh=False)

    def on_optimizer_update(self, ctx: CallbackContext, event: UpdateEvent) -> None:
        if self.bar is not None and event.batch_idx + 1 > self.bar.n:
            self.bar.update(event.batch_idx + 1 - self.bar.n)  # tqdm redraws at most every 0.1 s

    def on_epoch_end(self, ctx: CallbackContext) -> None:
        idp = ctx.idp
        if idp is None:
            return
        self.done += 1
        self.last = epoch_values(idp, ctx.idps)
        sel = idp.selection
        if sel is not None and sel.improved and sel.value is not None:
            self.best = f"BEST epoch {idp.epoch_idx} ({monitor_name(idp)} {sel.value:.4g})"
        if self.bar is not None:
            if self.bar.total is not None:
                self.bar.update(self.bar.total - self.bar.n)
            self.bar.set_postfix(self.last, refresh=True)
            return
        values = "  ".join(f"{k} {v}" for k, v in self.last.items())
        print(f"{self.name} epoch {idp.epoch_idx} [{self.done}/{self.epochs}]  {values}  "
              f"({time.monotonic() - self.epoch_started:.1f}s)",
              file=self.stream, flush=True)

    def on_train_end(self, ctx: CallbackContext) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def summarize(self) -> None:
        """Print the summary line (nothing when no epoch was trained): the pipeline calls it as the
        ``train()`` call ends, so its seconds are the call's wall time (the module docstring)."""
        if not self.done or self.started is None:
            return
        count = f"{self.done} epoch{'s' if self.done != 1 else ''}" + (f" of {self.epochs}" if self.done < self.epochs else "")
        parts = [f"{self.name}: {count} in {time.monotonic() - self.started:.1f}s"]
        parts += [f"{k} {v}" for k, v in self.last.items()]
        if self.best:
            parts.append(self.best)
        print(" · ".join(parts), file=self.stream, flush=True)

