"""``nnx.objectives``: objectives and loss terms (the code lives in ``nnx_api.training.objectives``)."""

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
