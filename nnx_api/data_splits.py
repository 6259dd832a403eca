"""NNx path ``nnx.data_splits``: placeholders, out of scope here (nnx_api/nnx_paths.py).

NNx's split manifests. ``SplitError`` is a real error type, so handlers still compile. Split data
with your own indices (``torch.utils.data.Subset``)."""

from nnx_core.errors import NNxError
from nnx_api.scope import SPLITS as SCOPE
from nnx_api.scope import placeholder


class SplitError(NNxError, ValueError):
    """NNx's split error; never raised here (splitting is out of scope)."""


__all__ = ["FORMAT", "SPLITS", "STRATEGIES", "SplitError", "SplitIndices", "SplitManifest", "plan_split"]

FORMAT = placeholder("nnx.data_splits.FORMAT", SCOPE)
SPLITS = placeholder("nnx.data_splits.SPLITS", SCOPE)
STRATEGIES = placeholder("nnx.data_splits.STRATEGIES", SCOPE)
SplitIndices = placeholder("nnx.data_splits.SplitIndices", SCOPE)
SplitManifest = placeholder("nnx.data_splits.SplitManifest", SCOPE)
plan_split = placeholder("nnx.data_splits.plan_split", SCOPE)
