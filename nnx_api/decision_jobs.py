"""Deferred decision jobs (``DecisionJob``). A re-export module: the code lives in
``nnx_api.decide.jobs``; users import these names from ``nnx_api.decisions``."""

from nnx_api.decide.jobs import (
    DecisionJob,
    Follow,
    InvalidJob,
    JobError,
    JobFailed,
    JobLimitExceeded,
    JobResult,
    JobTimeout,
    Limits,
    QuestionOutcome,
    RowOutcome,
)

__all__ = [
    "DecisionJob",
    "Follow",
    "InvalidJob",
    "JobError",
    "JobFailed",
    "JobLimitExceeded",
    "JobResult",
    "JobTimeout",
    "Limits",
    "QuestionOutcome",
    "RowOutcome",
]
