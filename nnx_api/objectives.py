"""NNx path ``nnx.objectives``: a re-export module (nnx_api/nnx_paths.py).

Objectives and loss terms (docs/steps-objectives.md)."""

from nnx_api.training.objectives import (
    KDObjective,
    LossTerm,
    Objective,
    ObjectiveContext,
    ObjectiveResult,
    SupervisedObjective,
    full_precision_only,
    kd_objective,
    softened_kl,
    supervised_objective,
)

__all__ = [
    "KDObjective", "LossTerm", "Objective", "ObjectiveContext", "ObjectiveResult", "SupervisedObjective",
    "full_precision_only", "kd_objective", "softened_kl", "supervised_objective",
]
