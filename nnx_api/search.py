"""NNx path ``nnx.search``: a re-export module (nnx_api/nnx_paths.py).

Hyper-parameter search over experiment plans (docs/plans-search.md)."""

from nnx_api.experiments.search import (
    CategoricalParam,
    FloatParam,
    IntParam,
    SearchBudget,
    SearchError,
    SearchResult,
    SearchSpace,
    TrialControl,
    TrialOutcome,
    apply_params,
    search,
)

__all__ = [
    "CategoricalParam", "FloatParam", "IntParam", "SearchBudget", "SearchError", "SearchResult", "SearchSpace",
    "TrialControl", "TrialOutcome", "apply_params", "search",
]
