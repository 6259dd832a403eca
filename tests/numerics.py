"""Tolerances derived from the dtype, for results computed through different batchings, thread
counts or kernels (BLAS picks its code path from the processor and the shape, so the order of a
sum is not the same on every machine).

Any order of ``n`` floating-point roundings of values whose magnitudes add up to ``scale`` is
within ``gamma(n) * scale`` of the exact result (Higham, *Accuracy and Stability of Numerical
Algorithms*, §3.1: γ_n = n·u / (1 − n·u), u the unit roundoff). Two such computations are
within twice that of each other. Tests use it where the product computes in float32 and the two
sides differ in batching; they compare bit for bit only the same batching on both sides.
"""

from __future__ import annotations

UNIT_ROUNDOFF = {"float32": 2.0**-24, "float64": 2.0**-53}


def gamma(n: int, dtype: str = "float32") -> float:
    """γ_n for ``dtype``: the relative error bound of ``n`` roundings in any order."""
    u = UNIT_ROUNDOFF[dtype]
    assert n * u < 1, "too many roundings for a meaningful bound"
    return n * u / (1 - n * u)


def across_orders(n: int, scale: float, dtype: str = "float32") -> float:
    """How far apart two evaluations of the same ``n``-rounding computation of magnitude
    ``scale`` may be when their summation orders differ (2 · γ_n · scale)."""
    return 2 * gamma(n, dtype) * scale
