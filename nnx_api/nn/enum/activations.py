"""``nnx.nn.enum.activations``: ``Activations``."""

from nnx_api.config.enums import Activations

__all__ = ["Activations"]
