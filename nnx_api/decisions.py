"""NNx path ``nnx.decisions``: a re-export module (nnx_api/nnx_paths.py).

Typed decisions (docs/decisions.md): questions, results, ``FixedHeadProvider`` and deferred
``DecisionJob`` s; NNx's NLI and Jev providers import as placeholders that refuse to be used."""

from nnx_api.decide.provider import (
    PRIMITIVES,
    PROBABILITY_TOLERANCE,
    Boolean,
    BooleanResult,
    Capabilities,
    Choice,
    ChoiceResult,
    DecisionError,
    DecisionJob,
    DecisionProvider,
    DecisionResult,
    FixedHeadProvider,
    Follow,
    InvalidDecisionRequest,
    InvalidDecisionResponse,
    InvalidJob,
    JobError,
    JobFailed,
    JobLimitExceeded,
    JobResult,
    JobTimeout,
    Limits,
    Option,
    ProviderFailure,
    Question,
    QuestionOutcome,
    RowOutcome,
    Score,
    ScoreResult,
    UnsupportedCapability,
    question_from_state,
    validate_response,
)
from nnx_api.decide.provider import __getattr__ as __getattr__  # NNx's NLI and Jev providers: placeholders

__all__ = [
    "Boolean", "BooleanResult", "Capabilities", "Choice", "ChoiceResult", "DecisionError", "DecisionJob",
    "DecisionProvider", "DecisionResult", "FixedHeadProvider", "Follow", "InvalidDecisionRequest",
    "InvalidDecisionResponse", "InvalidJob", "JobError", "JobFailed", "JobLimitExceeded", "JobResult", "JobTimeout",
    "Limits", "Option", "PRIMITIVES", "PROBABILITY_TOLERANCE", "ProviderFailure", "Question", "QuestionOutcome",
    "RowOutcome", "Score", "ScoreResult", "UnsupportedCapability", "question_from_state", "validate_response",
]
