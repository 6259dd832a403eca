"""NNx path ``nnx.abstention``: placeholders, out of scope here (nnx_api/nnx_paths.py).

NNx's selective prediction (abstention policies, risk-coverage curves). ``AbstentionError`` and
``AbstentionSchemaError`` are real error types, so handlers still compile."""

from nnx_core.errors import NNxError
from nnx_api.scope import EXTRAS as SCOPE
from nnx_api.scope import placeholder


class AbstentionError(NNxError, ValueError):
    """NNx's abstention error; never raised here (abstention is out of scope)."""


class AbstentionSchemaError(AbstentionError):
    """NNx's abstention input-schema error; never raised here (abstention is out of scope)."""


__all__ = [
    "FORMAT", "INPUT_FIELDS", "MAX_DEFAULT_CANDIDATES", "POLICY_KINDS", "REASONS", "AbstentionError",
    "AbstentionPolicy", "AbstentionResult", "AbstentionSchemaError", "AcceptedRows", "CoverageAccumulator",
    "CoverageReport", "CurvePoint", "Outcome", "SelectiveDecision", "ThresholdSelection", "decide",
    "risk_coverage_curve", "scores", "select_threshold",
]

FORMAT = placeholder("nnx.abstention.FORMAT", SCOPE)
INPUT_FIELDS = placeholder("nnx.abstention.INPUT_FIELDS", SCOPE)
MAX_DEFAULT_CANDIDATES = placeholder("nnx.abstention.MAX_DEFAULT_CANDIDATES", SCOPE)
POLICY_KINDS = placeholder("nnx.abstention.POLICY_KINDS", SCOPE)
REASONS = placeholder("nnx.abstention.REASONS", SCOPE)
AbstentionPolicy = placeholder("nnx.abstention.AbstentionPolicy", SCOPE)
AbstentionResult = placeholder("nnx.abstention.AbstentionResult", SCOPE)
AcceptedRows = placeholder("nnx.abstention.AcceptedRows", SCOPE)
CoverageAccumulator = placeholder("nnx.abstention.CoverageAccumulator", SCOPE)
CoverageReport = placeholder("nnx.abstention.CoverageReport", SCOPE)
CurvePoint = placeholder("nnx.abstention.CurvePoint", SCOPE)
Outcome = placeholder("nnx.abstention.Outcome", SCOPE)
SelectiveDecision = placeholder("nnx.abstention.SelectiveDecision", SCOPE)
ThresholdSelection = placeholder("nnx.abstention.ThresholdSelection", SCOPE)
decide = placeholder("nnx.abstention.decide", SCOPE)
risk_coverage_curve = placeholder("nnx.abstention.risk_coverage_curve", SCOPE)
scores = placeholder("nnx.abstention.scores", SCOPE)
select_threshold = placeholder("nnx.abstention.select_threshold", SCOPE)
