"""NNx path ``nnx.preprocessing``: placeholders, out of scope here (nnx_api/nnx_paths.py).

NNx's fitted preprocessing (standardisation over a split). ``PreprocessingError`` is a real error
type, so handlers still compile."""

from nnx_core.errors import NNxError
from nnx_api.scope import PREPROCESSING as SCOPE
from nnx_api.scope import placeholder


class PreprocessingError(NNxError, ValueError):
    """NNx's preprocessing error; never raised here (preprocessing is out of scope)."""


__all__ = ["FORMAT", "PreprocessingError", "SplitView", "Standardizer", "describe_transform"]

FORMAT = placeholder("nnx.preprocessing.FORMAT", SCOPE)
SplitView = placeholder("nnx.preprocessing.SplitView", SCOPE)
Standardizer = placeholder("nnx.preprocessing.Standardizer", SCOPE)
describe_transform = placeholder("nnx.preprocessing.describe_transform", SCOPE)
