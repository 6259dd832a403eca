"""NNx path ``nnx.finetune.param_groups``: a re-export module (nnx_api/nnx_paths.py).

Parameter-group specs, and how optimizer groups are built."""

from nnx_api.finetune import NNParamGroupSpec, build_param_groups

__all__ = ["NNParamGroupSpec", "build_param_groups"]
