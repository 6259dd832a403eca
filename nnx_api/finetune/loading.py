"""NNx path ``nnx.finetune.loading``: a re-export module (nnx_api/nnx_paths.py).

Loading pretrained weights (read with torch's safe loader only)."""

from nnx_api.finetune import LoadPretrainedResult, load_pretrained

__all__ = ["LoadPretrainedResult", "load_pretrained"]
