"""NNx path ``nnx.models``: a re-export module (nnx_api/nnx_paths.py).

Networks from registered factories, and batch adapters."""

from nnx_api.config.params import ModelSpec, RuntimeModule
from nnx_api.parts.models import (
    BatchAdapter,
    KeywordInputs,
    MissingModelFactoryError,
    PositionalInputs,
    build_module,
    register_model_factory,
    registered_model_factories,
    unregister_model_factory,
)

__all__ = [
    "BatchAdapter", "KeywordInputs", "MissingModelFactoryError", "ModelSpec", "PositionalInputs", "RuntimeModule",
    "build_module", "register_model_factory", "registered_model_factories", "unregister_model_factory",
]
