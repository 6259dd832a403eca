"""``nnx.nn.enum.devices``: ``Devices``."""

from nnx_api.config.enums import Devices

__all__ = ["Devices"]
