"""NNx path ``nnx.bundles``: placeholders, out of scope here (nnx_api/nnx_paths.py).

NNx's portable run bundles. ``BundleError`` and its subclasses are real error types, so handlers
still compile. A run folder here is copied as it is (its files are content-addressed and verified)."""

from nnx_core.errors import NNxError
from nnx_api.scope import EXTRAS as SCOPE
from nnx_api.scope import placeholder


class BundleError(NNxError, ValueError):
    """NNx's run-bundle error; never raised here (bundles are out of scope)."""


class BundleIntegrityError(BundleError):
    """NNx's bundle integrity error; never raised here (bundles are out of scope)."""


class BundleCapabilityError(BundleError):
    """NNx's bundle capability error; never raised here (bundles are out of scope)."""


class BundleReconstructionError(BundleError):
    """NNx's bundle reconstruction error; never raised here (bundles are out of scope)."""


__all__ = [
    "BUNDLE_FORMAT", "BUNDLE_VERSION", "BundleCapabilityError", "BundleError", "BundleInfo", "BundleIntegrityError",
    "BundleReconstructionError", "ReconstructedBundle", "export_bundle", "inspect_bundle", "reconstruct_bundle",
    "validate_bundle",
]

BUNDLE_FORMAT = placeholder("nnx.bundles.BUNDLE_FORMAT", SCOPE)
BUNDLE_VERSION = placeholder("nnx.bundles.BUNDLE_VERSION", SCOPE)
BundleInfo = placeholder("nnx.bundles.BundleInfo", SCOPE)
ReconstructedBundle = placeholder("nnx.bundles.ReconstructedBundle", SCOPE)
export_bundle = placeholder("nnx.bundles.export_bundle", SCOPE)
inspect_bundle = placeholder("nnx.bundles.inspect_bundle", SCOPE)
reconstruct_bundle = placeholder("nnx.bundles.reconstruct_bundle", SCOPE)
validate_bundle = placeholder("nnx.bundles.validate_bundle", SCOPE)
