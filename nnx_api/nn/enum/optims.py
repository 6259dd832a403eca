"""``nnx.nn.enum.optims``: ``Optims``."""

from nnx_api.config.enums import Optims

__all__ = ["Optims"]
