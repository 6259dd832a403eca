"""``nnx.decisions``: typed decisions (docs/decisions.md). A re-export module: the code lives in
``nnx_api.decide.provider`` (``FixedHeadProvider`` and the rest of its ``__all__``) and ``nnx_api.decide.jobs``
(``DecisionJob``); NNx's NLI and Jev providers import as placeholders that refuse to be used."""

from nnx_api.decide.provider import *  # noqa: F403  (its public names: exactly its __all__)
from nnx_api.decide.provider import __all__ as __all__
from nnx_api.decide.provider import __getattr__ as __getattr__  # NLI / Jev providers: placeholders
