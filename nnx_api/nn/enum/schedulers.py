"""``nnx.nn.enum.schedulers``: ``Schedulers``."""

from nnx_api.config.enums import Schedulers

__all__ = ["Schedulers"]
