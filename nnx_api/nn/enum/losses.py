"""``nnx.nn.enum.losses``: ``Losses``."""

from nnx_api.config.enums import Losses

__all__ = ["Losses"]
