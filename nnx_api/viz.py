"""NNx path ``nnx.viz``: placeholders, out of scope here (nnx_api/nnx_paths.py).

NNx's model-visualisation helpers (the torchinfo / captum / netron extras)."""

from nnx_api.scope import VIZ as SCOPE
from nnx_api.scope import placeholder

__all__ = ["activation_map", "attribute", "gradient_flow", "netron_export", "summary", "weight_histogram"]

activation_map = placeholder("nnx.viz.activation_map", SCOPE)
attribute = placeholder("nnx.viz.attribute", SCOPE)
gradient_flow = placeholder("nnx.viz.gradient_flow", SCOPE)
netron_export = placeholder("nnx.viz.netron_export", SCOPE)
summary = placeholder("nnx.viz.summary", SCOPE)
weight_histogram = placeholder("nnx.viz.weight_histogram", SCOPE)
