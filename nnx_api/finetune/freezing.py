"""NNx path ``nnx.finetune.freezing``: a re-export module (nnx_api/nnx_paths.py).

Freezing and unfreezing parameters by name pattern."""

from nnx_api.finetune import freeze, frozen, unfreeze

__all__ = ["freeze", "frozen", "unfreeze"]
