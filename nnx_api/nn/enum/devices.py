"""NNx path ``nnx.nn.enum.devices``: a re-export module (nnx_api/nnx_paths.py)."""

from nnx_api.config.enums import Devices

__all__ = ["Devices"]
