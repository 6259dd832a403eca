"""``nnx.viz``: NNx's model-visualisation helpers (torchinfo / captum / netron extras). Out of scope
here: each name can be imported, and using one raises ``OutOfScopeError``."""

from nnx_api.scope import placeholder

SCOPE = "the visualisation helpers of NNx's viz extras (torchinfo, captum, netron)"
__all__ = ["activation_map", "attribute", "gradient_flow", "netron_export", "summary", "weight_histogram"]

activation_map = placeholder("nnx.viz.activation_map", SCOPE)
attribute = placeholder("nnx.viz.attribute", SCOPE)
gradient_flow = placeholder("nnx.viz.gradient_flow", SCOPE)
netron_export = placeholder("nnx.viz.netron_export", SCOPE)
summary = placeholder("nnx.viz.summary", SCOPE)
weight_histogram = placeholder("nnx.viz.weight_histogram", SCOPE)
