"""``nnx.finetune.param_groups``: parameter-group specs and how optimizer groups are built."""

from nnx_api.finetune import NNParamGroupSpec, build_param_groups

__all__ = ["NNParamGroupSpec", "build_param_groups"]
