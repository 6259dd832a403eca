"""``nnx.VisUtils``: NNx's plotting helpers. ``confusion_matrix`` is here (a plotly heatmap; plotly
is optional and imported on use); NNx's other plots are out of scope and raise
``OutOfScopeError``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from nnx_api.scope import refusing_method

__all__ = [
    "VisUtils", "classification_report", "confusion_matrix", "generate_colors", "get_scatter_plot_vm",
    "multi_line_plot", "scatter_plot", "two_dim_tsne_checkpoint_logits",
]

_SCOPE = "NNx's plotting helpers other than VisUtils.confusion_matrix"


def _plotly() -> Any:
    try:
        import plotly.graph_objects as go
    except ImportError as exc:
        raise ImportError("VisUtils needs plotly, which is not installed (it is optional): pip install plotly") from exc
    return go


def _labels(values: Any) -> np.ndarray:
    array = values.detach().cpu().numpy() if hasattr(values, "detach") else np.asarray(values)
    return array.reshape(-1)


class VisUtils:
    """Plots (static methods)."""

    @staticmethod
    def confusion_matrix(y_true: Any, y_pred: Any, class_names: Sequence[str] | None = None, title: str = "Confusion Matrix") -> Any:
        """A plotly heatmap of the counts (rows: true class, columns: predicted); ``data[0].z``
        holds the matrix. Needs the optional ``plotly`` package."""
        go = _plotly()
        truth, pred = _labels(y_true).astype(int), _labels(y_pred).astype(int)
        n = max(len(class_names or ()), int(truth.max(initial=-1)) + 1, int(pred.max(initial=-1)) + 1)
        matrix = np.zeros((n, n), dtype=int)
        np.add.at(matrix, (truth, pred), 1)
        names = list(class_names) if class_names else [str(i) for i in range(n)]
        fig = go.Figure(go.Heatmap(z=matrix, x=names, y=names, colorscale="Blues", text=matrix, texttemplate="%{text}"))
        fig.update_layout(title=title, xaxis_title="predicted", yaxis_title="true")
        return fig


for _name in ("classification_report", "generate_colors", "get_scatter_plot_vm", "multi_line_plot", "scatter_plot",
              "two_dim_tsne_checkpoint_logits"):
    setattr(VisUtils, _name, staticmethod(refusing_method(f"VisUtils.{_name}", _SCOPE)))

# NNx's module-level names: each is the very static method of VisUtils
confusion_matrix = VisUtils.confusion_matrix
classification_report = VisUtils.classification_report
generate_colors = VisUtils.generate_colors
get_scatter_plot_vm = VisUtils.get_scatter_plot_vm
multi_line_plot = VisUtils.multi_line_plot
scatter_plot = VisUtils.scatter_plot
two_dim_tsne_checkpoint_logits = VisUtils.two_dim_tsne_checkpoint_logits
