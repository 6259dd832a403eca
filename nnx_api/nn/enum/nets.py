"""``nnx.nn.enum.nets``: ``Nets``."""

from nnx_api.config.enums import Nets

__all__ = ["Nets"]
