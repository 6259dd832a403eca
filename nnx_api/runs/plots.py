"""Plots of a run's committed history (matplotlib, the ``plots`` extra).

``plot_run(run)`` draws one panel per distinct quantity — the loss, each metric (accuracy, f1,
declared metrics...) and the learning rate — per epoch, training (whole epoch) against
validation, each with its y-axis named. A metric whose every point equals the loss (``nll`` for a
cross-entropy run, ``mse`` for an MSE one) is not drawn again: the loss panel names it. The
learning rate has a log axis. The epoch BEST holds is marked on every panel, and the monitored
quantity is named (``val.loss`` — for the default monitor, the quantity it fell back to) and
starred on its curve. F1, precision and recall say how they average (the built-in ones are
macro; a declared metric's ``config={"average": ...}`` is shown). The points are
``nnx_api.runs.curves.epoch_scalars`` — the same numbers the trackers log.

Figures are built with ``matplotlib.figure.Figure`` and rendered by the Agg canvas: no pyplot,
no global backend switch, safe in scripts, servers and notebooks alike.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from nnx_adapters.extras import require
from nnx_api.runs.curves import committed_records, monitor_name, run_series

TRAIN, VAL = "train_epoch", "val"
HIDDEN = ("precision", "recall")
COLORS = {TRAIN: "#1f77b4", VAL: "#d62728"}
BUILTIN_AVERAGE = {"f1": "macro", "precision": "macro", "recall": "macro"}


def image_formats() -> dict[str, str]:
    """The file suffixes ``plot_run`` can write (matplotlib's Agg canvas), suffix → description."""
    require("matplotlib", "plots", "run.plot()")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    return dict(FigureCanvasAgg(Figure()).get_supported_filetypes())


def metric_names(series: dict[str, Any], keep: str | None = None) -> list[str]:
    """Metric panels to draw: every field/metric of either split except loss and extras; error is
    left out when accuracy is there (it is 1 - accuracy) unless it is ``keep`` (the monitored
    metric, which gets its panel and star), and so are the validation-only macro
    precision/recall fields (the trackers and ``nnx runs show`` have them)."""
    names: list[str] = []
    for key in series:
        split, _, name = key.partition("/")
        if split in (TRAIN, VAL) and name != "loss" and "/" not in name and name not in names:
            names.append(name)
    if "accuracy" in names and "error" in names and keep != "error":
        names.remove("error")
    names = [n for n in names if n not in HIDDEN or any(k == f"{TRAIN}/{n}" for k in series)]
    names = [n for n in names if not same_as_loss(series, n)]
    order = {"accuracy": 0, "error": 1, "f1": 2, "precision": 3, "recall": 4}
    return sorted(names, key=lambda n: (order.get(n, 5), n))


def same_as_loss(series: dict[str, Any], name: str) -> bool:
    """Whether metric ``name`` is the loss under another name: on each split it has, every epoch's
    value equals the loss's (to 1e-6, relative)."""
    found = False
    for split in (TRAIN, VAL):
        points, loss = dict(series.get(f"{split}/{name}", ())), dict(series.get(f"{split}/loss", ()))
        if not points:
            continue
        if set(points) - set(loss) or any(abs(v - loss[e]) > 1e-6 * max(1.0, abs(v)) for e, v in points.items()):
            return False
        found = True
    return found


def panel_title(name: str, run: Any) -> str:
    """A panel's name: the quantity, with how it averages for F1 / precision / recall."""
    if name == "lr":
        return "learning rate"
    average = BUILTIN_AVERAGE.get(name)
    for spec in run.config.get("train", {}).get("metrics", ()) or ():
        if isinstance(spec, dict) and (spec.get("name") or spec.get("id")) == name:
            average = (spec.get("config") or {}).get("average", average if spec.get("id") == name else None)
    return f"{name} ({average})" if average and average not in name else name


def _best(run: Any) -> tuple[int | None, str | None, float | None]:
    """BEST's epoch, the monitored quantity's name (``split.metric``) and its value."""
    best = run.best()
    if best is None:
        return None, None, None
    sel = best.selection
    return best.epoch_idx, (monitor_name(best) if sel is not None else None), (sel.value if sel is not None else None)


def _monitored_key(label: str | None) -> str | None:
    """The plotted series of the monitored quantity (``val.loss`` → ``val/loss``)."""
    if label is None:
        return None
    split, _, metric = label.partition(".")
    return f"{VAL if split == 'val' else TRAIN}/{metric}"


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
    monitored = _monitored_key(label) if best_epoch is not None else None
    names = metric_names(series, keep=monitored.partition("/")[2] if monitored else None)
    aliases = sorted({k.partition("/")[2] for k in series if "/" in k and k.partition("/")[2] not in ("loss", *names)
                      and "/" not in k.partition("/")[2] and same_as_loss(series, k.partition("/")[2])})
    panels = ["loss", *names, "lr"]
    cols = min(3, len(panels))
    rows = -(-len(panels) // cols)
    fig = Figure(figsize=(4.4 * cols, 3.3 * rows + 0.5), dpi=dpi, layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax, panel in zip(axes, panels, strict=False):
        if panel == "lr":
            _line(ax, series.get("lr", []), "lr", "#2ca02c")
            if all(v > 0 for _, v in series.get("lr", [])):
                ax.set_yscale("log")
        else:
            _line(ax, series.get(f"{TRAIN}/{panel}", []), "train", COLORS[TRAIN])
            _line(ax, series.get(f"{VAL}/{panel}", []), "validation", COLORS[VAL])
        title = panel_title(panel, run)
        if panel == "loss" and aliases:
            title += f" (= {', '.join(aliases)})"
        ax.set_title(title)
        ax.set_ylabel(title)
        ax.set_xlabel("epoch")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        if best_epoch is not None:
            ax.axvline(best_epoch, color="#555555", linestyle="--", linewidth=1, label=f"BEST (epoch {best_epoch})")
        for key in (f"{TRAIN}/{panel}", f"{VAL}/{panel}"):
            shown = monitored if monitored is None or monitored.partition("/")[2] not in aliases else monitored.partition("/")[0] + "/loss"
            if key == shown and best_value is not None:
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
