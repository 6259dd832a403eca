"""``nnx.search``: hyper-parameter search over experiment plans (``nnx_api.experiments.search``)."""

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
