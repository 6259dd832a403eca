"""``nnx.precision``: the precision policy."""

from nnx_core.errors import PrecisionUnsupportedError
from nnx_core.precision import ResolvedPrecision
from nnx_api.config.params import PrecisionPolicy

__all__ = ["PrecisionPolicy", "PrecisionUnsupportedError", "ResolvedPrecision"]
