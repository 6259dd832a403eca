"""NNx path ``nnx.plans``: a re-export module (nnx_api/nnx_paths.py).

Experiment plans (docs/plans-search.md)."""

from nnx_api.experiments.plans import SALT_PREFIX as ATTEMPT_SALT_PREFIX
from nnx_api.experiments.plans import Diagnostic, ExperimentPlan, PlanError, PlanValidation
from nnx_api.experiments.results import FitResult, ProbeResult, SplitMetrics

__all__ = [
    "ATTEMPT_SALT_PREFIX", "Diagnostic", "ExperimentPlan", "FitResult", "PlanError", "PlanValidation", "ProbeResult",
    "SplitMetrics",
]
