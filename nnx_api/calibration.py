"""NNx path ``nnx.calibration``: placeholders, out of scope here (nnx_api/nnx_paths.py).

NNx's probability calibration (temperature scaling, reliability reports). ``CalibrationError`` and
its subclasses are real error types, so handlers still compile."""

from nnx_core.errors import NNxError
from nnx_api.scope import EXTRAS as SCOPE
from nnx_api.scope import placeholder


class CalibrationError(NNxError, ValueError):
    """NNx's calibration error; never raised here (calibration is out of scope)."""


class CalibrationFitError(CalibrationError):
    """NNx's calibration fitting error; never raised here (calibration is out of scope)."""


class CalibrationMismatchError(CalibrationError):
    """NNx's calibrator / model mismatch error; never raised here (calibration is out of scope)."""


__all__ = [
    "DEFAULT_EPSILON", "FORMAT", "CalibratedPrediction", "CalibrationError", "CalibrationFit", "CalibrationFitError",
    "CalibrationMetrics", "CalibrationMismatchError", "CalibrationReport", "ReliabilityBin", "TemperatureCalibrator",
    "brier_score", "expected_calibration_error", "fit_temperature", "model_fingerprint", "negative_log_likelihood",
    "reliability_bins",
]

DEFAULT_EPSILON = placeholder("nnx.calibration.DEFAULT_EPSILON", SCOPE)
FORMAT = placeholder("nnx.calibration.FORMAT", SCOPE)
CalibratedPrediction = placeholder("nnx.calibration.CalibratedPrediction", SCOPE)
CalibrationFit = placeholder("nnx.calibration.CalibrationFit", SCOPE)
CalibrationMetrics = placeholder("nnx.calibration.CalibrationMetrics", SCOPE)
CalibrationReport = placeholder("nnx.calibration.CalibrationReport", SCOPE)
ReliabilityBin = placeholder("nnx.calibration.ReliabilityBin", SCOPE)
TemperatureCalibrator = placeholder("nnx.calibration.TemperatureCalibrator", SCOPE)
brier_score = placeholder("nnx.calibration.brier_score", SCOPE)
expected_calibration_error = placeholder("nnx.calibration.expected_calibration_error", SCOPE)
fit_temperature = placeholder("nnx.calibration.fit_temperature", SCOPE)
model_fingerprint = placeholder("nnx.calibration.model_fingerprint", SCOPE)
negative_log_likelihood = placeholder("nnx.calibration.negative_log_likelihood", SCOPE)
reliability_bins = placeholder("nnx.calibration.reliability_bins", SCOPE)
