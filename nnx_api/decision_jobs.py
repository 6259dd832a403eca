"""Deferred decision jobs (``DecisionJob``). A re-export module: the code lives in
``nnx_api.decide.jobs``; users import these names from ``nnx_api.decisions``."""

from nnx_api.decide.jobs import *  # noqa: F403  (its public names: exactly its __all__)
from nnx_api.decide.jobs import __all__ as __all__
