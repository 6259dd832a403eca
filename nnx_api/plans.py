"""``nnx.plans``: experiment plans (the code lives in ``nnx_api.experiments.plans``)."""

from nnx_api.experiments.plans import (
    Diagnostic,
    ExperimentPlan,
    FitResult,
    PlanData,
    PlanError,
    PlanValidation,
    ProbeResult,
    SplitMetrics,
)

__all__ = ["Diagnostic", "ExperimentPlan", "FitResult", "PlanData", "PlanError", "PlanValidation", "ProbeResult", "SplitMetrics"]
