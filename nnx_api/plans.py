"""``nnx.plans``: experiment plans (the code lives in ``nnx_api.experiments.plans``)."""

from nnx_api.experiments.plans import SALT_PREFIX as ATTEMPT_SALT_PREFIX
from nnx_api.experiments.plans import Diagnostic, ExperimentPlan, FitResult, PlanError, PlanValidation, ProbeResult, SplitMetrics

__all__ = [  # PlanData is importable from here but, as in NNx, not part of the listed names
    "ATTEMPT_SALT_PREFIX", "Diagnostic", "ExperimentPlan", "FitResult", "PlanError", "PlanValidation", "ProbeResult",
    "SplitMetrics",
]
