"""``NNRun._repr_html_``: the run as a notebook shows it — its configuration (what the run id is
the content address of) and one row per committed epoch (training and validation loss and error,
the learning rate, BEST marked). Plain HTML, no plotting dependency; values are escaped."""

from __future__ import annotations

import contextlib
import html
from typing import Any

from nnx_core.errors import CorruptRunError
from nnx_api.runs.curves import epoch_scalars, flatten_config, iter_epochs

COLUMNS = ("train_epoch/loss", "train_epoch/error", "val/loss", "val/error", "lr")
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
    epochs = list(iter_epochs(run.idps))
    if epochs:
        best = None
        with contextlib.suppress(OSError, CorruptRunError):  # a display never raises: no BEST is shown
            best = run.best()
        head = "".join(_cell(c, head=True) for c in ("epoch", *COLUMNS, "best"))
        body = []
        for epoch, records in epochs:
            scalars = epoch_scalars(records)
            cells = "".join(_cell(scalars.get(c, "")) for c in COLUMNS)
            mark = "★" if best is not None and best.epoch_idx == epoch else ""
            body.append(f"<tr>{_cell(epoch)}{cells}{_cell(mark)}</tr>")
        parts.append(_table([f"<tr>{head}</tr>", *body]))
    return f'<div style="font-family:sans-serif;">{"".join(parts)}</div>'


__all__ = ["COLUMNS", "run_html"]
