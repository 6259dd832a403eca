"""``NNRun._repr_html_``: the run as a notebook shows it — its configuration (what the run id is
the content address of) and one row per committed epoch (training and validation loss and error,
the learning rate, BEST marked). Plain HTML, no plotting dependency; values are escaped."""

from __future__ import annotations

import contextlib
import html
from collections.abc import Iterable
from typing import Any

from nnx_core.commit import LAST
from nnx_core.errors import CorruptRunError
from nnx_api.runs.curves import epoch_scalars, flatten_config, iter_epochs
from nnx_api.runs.partial import committed_journal

COLUMNS = ("train_epoch/loss", "train_epoch/error", "val/loss", "val/error", "lr")
_JOURNAL_ROW = {"train_epoch/loss": "train_loss", "train_epoch/error": "train_err", "val/loss": "val_loss", "val/error": "val_err"}
_CELL = 'style="padding:2px 8px;border:1px solid #ddd;{}"'


def _cell(value: Any, *, head: bool = False, mono: bool = False) -> str:
    tag = "th" if head else "td"
    text = f"{value:.6g}" if isinstance(value, float) else str(value)
    return f"<{tag} {_CELL.format('font-family:monospace;' if mono else '')}>{html.escape(text)}</{tag}>"


def _table(rows: list[str]) -> str:
    return f'<table style="border-collapse:collapse;margin-bottom:8px;">{"".join(rows)}</table>'


def run_html(run: Any) -> str:
    """The HTML of ``run`` (module docstring)."""
    config = [f"<tr>{_cell('run.id', head=True)}{_cell(run.id, mono=True)}</tr>"]
    config += [f"<tr>{_cell(k, head=True)}{_cell(v, mono=True)}</tr>" for k, v in flatten_config(run.config).items()]
    parts = [_table(config)]
    rows: Iterable[tuple[int, dict[str, float]]] | None = _journal_rows(run)
    if rows is None:
        rows = ((epoch, epoch_scalars(records)) for epoch, records in iter_epochs(run.idps))
    body: list[str] = []
    best = None
    for epoch, scalars in rows:
        if not body:
            with contextlib.suppress(OSError, CorruptRunError):  # a display never raises: no BEST is shown
                best = run.best()
        cells = "".join(_cell(scalars.get(c, "")) for c in COLUMNS)
        mark = "★" if best is not None and best.epoch_idx == epoch else ""
        body.append(f"<tr>{_cell(epoch)}{cells}{_cell(mark)}</tr>")
    if body:
        head = "".join(_cell(c, head=True) for c in ("epoch", *COLUMNS, "best"))
        parts.append(_table([f"<tr>{head}</tr>", *body]))
    return f'<div style="font-family:sans-serif;">{"".join(parts)}</div>'


def _journal_rows(run: Any) -> list[tuple[int, dict[str, float]]] | None:
    """A journal run's committed epochs from its per-epoch rows (``history/epochs.jsonl``: no chunk
    is read; the learning rate of the epochs still in memory), as ``(epoch, scalars)``. None for an
    eager run, or a journal that cannot be read (the display then shows the records in memory)."""
    with contextlib.suppress(OSError, CorruptRunError):
        files = run.files()
        reader = committed_journal(files.storage, run.id, files.read_tag(LAST), files.root)
        if reader is not None:
            lrs = {epoch: float(idp.lr) for epoch, idp in run.epochs.items()}  # the retained window's epochs
            out = []
            for row in reader.epoch_rows():
                scalars = {c: float(row[k]) for c, k in _JOURNAL_ROW.items() if row.get(k) is not None}
                if row["epoch"] in lrs:
                    scalars["lr"] = lrs[row["epoch"]]
                out.append((row["epoch"], scalars))
            return out
    return None


__all__ = ["COLUMNS", "run_html"]
