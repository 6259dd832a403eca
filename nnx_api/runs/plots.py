"""Plots of a run's committed history (matplotlib, the ``plots`` extra).

``plot_run(run)`` draws one panel for the loss, one per metric (accuracy, f1, declared
metrics...) and one for the learning rate, each per epoch, training (whole epoch) against
validation; the epoch BEST holds is marked on every panel and starred on the monitored curve.
The points are ``nnx_api.runs.curves.epoch_scalars`` — the same numbers the trackers log.

Figures are built with ``matplotlib.figure.Figure`` and rendered by the Agg canvas: no pyplot,
no global backend switch, safe in scripts, servers and notebooks alike.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from nnx_adapters.extras import require
from nnx_api.runs.curves import committed_records, monitor_label, run_series

TRAIN, VAL = "train_epoch", "val"
FALLBACK_ORDER = ("val/error", "val/loss", "train_epoch/error", "train_epoch/loss")
HIDDEN = ("precision", "recall")
COLORS = {TRAIN: "#1f77b4", VAL: "#d62728"}


def metric_names(series: dict[str, Any]) -> list[str]:
    """Metric panels to draw: every field/metric of either split except loss and extras; error is
    left out when accuracy is there (it is 1 - accuracy), and so are the validation-only macro
    precision/recall fields (the trackers and ``nnx runs show`` have them)."""
    names: list[str] = []
    for key in series:
        split, _, name = key.partition("/")
        if split in (TRAIN, VAL) and name != "loss" and "/" not in name and name not in names:
            names.append(name)
    if "accuracy" in names and "error" in names:
        names.remove("error")
    names = [n for n in names if n not in HIDDEN or any(k == f"{TRAIN}/{n}" for k in series)]
    order = {"accuracy": 0, "error": 1, "f1": 2, "precision": 3, "recall": 4}
    return sorted(names, key=lambda n: (order.get(n, 5), n))


def _best(run: Any) -> tuple[int | None, str | None, float | None]:
    best = run.best()
    if best is None:
        return None, None, None
    sel = best.selection
    return best.epoch_idx, (monitor_label(best) if sel is not None else None), (sel.value if sel is not None else None)


def _monitored_key(
    label: str | None, series: dict[str, list[tuple[int, float]]], epoch: int, value: float | None
) -> str | None:
    """The plotted series the monitor read (a named monitor's, or the fallback's first finite)."""
    if label is None or value is None:
        return None
    if label != "fallback":
        split, _, metric = label.partition(".")
        return f"{VAL if split == 'val' else TRAIN}/{metric}"
    for key in FALLBACK_ORDER:
        if any(e == epoch and v == value for e, v in series.get(key, ())):
            return key
    return None


def plot_run(run: Any, path: str | os.PathLike[str] | None = None, *, dpi: int = 110) -> Any:
    """Draw ``run``'s curves. With ``path``: write a PNG (or any format matplotlib knows from the
    suffix) and return its ``Path``; without: return the ``matplotlib.figure.Figure``."""
    require("matplotlib", "plots", "run.plot()")
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    series = run_series(committed_records(run))
    if not series:
        raise ValueError(f"run {run.id} has no committed epoch to plot")
    best_epoch, label, best_value = _best(run)
    panels = ["loss", *metric_names(series), "lr"]
    cols = min(3, len(panels))
    rows = -(-len(panels) // cols)
    fig = Figure(figsize=(4.4 * cols, 3.3 * rows + 0.5), dpi=dpi, layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    monitored = _monitored_key(label, series, best_epoch, best_value) if best_epoch is not None else None
    for ax, panel in zip(axes, panels, strict=False):
        if panel == "lr":
            _line(ax, series.get("lr", []), "lr", "#2ca02c")
            values = [v for _, v in series.get("lr", []) if v > 0]
            if values and max(values) / min(values) > 20:
                ax.set_yscale("log")
            else:
                ax.ticklabel_format(axis="y", useOffset=False, style="sci", scilimits=(-3, 3))
        else:
            _line(ax, series.get(f"{TRAIN}/{panel}", []), "train", COLORS[TRAIN])
            _line(ax, series.get(f"{VAL}/{panel}", []), "validation", COLORS[VAL])
        ax.set_title(panel if panel != "lr" else "learning rate")
        ax.set_xlabel("epoch")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        if best_epoch is not None:
            ax.axvline(best_epoch, color="#555555", linestyle="--", linewidth=1, label=f"BEST (epoch {best_epoch})")
        for key in (f"{TRAIN}/{panel}", f"{VAL}/{panel}"):
            if key == monitored and best_value is not None:
                ax.plot([best_epoch], [best_value], marker="*", markersize=14, color="#ff7f0e", linestyle="none",
                        label=f"monitor {label} = {best_value:.4g}", zorder=5)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize="small")
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    epochs = len({e for points in series.values() for e, _ in points})
    title = f"run {run.id}  ·  {epochs} epoch{'s' if epochs != 1 else ''}"
    if best_epoch is not None:
        title += f"  ·  BEST epoch {best_epoch}"
        if best_value is not None:
            title += f" ({label} = {best_value:.4g})"
    fig.suptitle(title, fontsize="medium")
    if path is None:
        return fig
    target = Path(path)
    if target.parent != Path(""):
        target.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(target)
    return target


def _line(ax: Any, points: list[tuple[int, float]], label: str, color: str) -> None:
    if not points:
        return
    xs, ys = zip(*points, strict=True)
    ax.plot(xs, ys, label=label, color=color, marker="o" if len(xs) <= 30 else None, markersize=3, linewidth=1.5)


__all__ = ["metric_names", "plot_run"]
