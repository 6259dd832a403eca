"""NNx path ``nnx.transforms``: placeholders, out of scope here (nnx_api/nnx_paths.py).

NNx's replayable transform recipes (LoRA, low-rank factorisation). ``RecipeError`` is a real error
type, so handlers still compile."""

from nnx_core.errors import NNxError
from nnx_api.scope import TRANSFORMS as SCOPE
from nnx_api.scope import placeholder


class RecipeError(NNxError, ValueError):
    """NNx's transform-recipe error; never raised here (transform recipes are out of scope)."""


__all__ = ["RecipeError", "TransformOp", "TransformRecipe", "check_optimizer", "lora", "low_rank"]

TransformOp = placeholder("nnx.transforms.TransformOp", SCOPE)
TransformRecipe = placeholder("nnx.transforms.TransformRecipe", SCOPE)
check_optimizer = placeholder("nnx.transforms.check_optimizer", SCOPE)
lora = placeholder("nnx.transforms.lora", SCOPE)
low_rank = placeholder("nnx.transforms.low_rank", SCOPE)
