"""NNx path ``nnx.provenance``: placeholders, out of scope here (nnx_api/nnx_paths.py).

NNx's provenance manifests. Every fit keeps its attempt record (``attempt.json``) here, nothing
beyond it."""

from nnx_api.scope import EXTRAS as SCOPE
from nnx_api.scope import placeholder

__all__ = [
    "FORMAT", "Attempt", "ExperimentManifest", "FieldComparison", "IdentityRef", "ProvenanceComparison",
    "ProvenanceRecord", "canonical_bytes", "compare", "hash_bytes", "hash_file", "load_provenance",
]

FORMAT = placeholder("nnx.provenance.FORMAT", SCOPE)
Attempt = placeholder("nnx.provenance.Attempt", SCOPE)
ExperimentManifest = placeholder("nnx.provenance.ExperimentManifest", SCOPE)
FieldComparison = placeholder("nnx.provenance.FieldComparison", SCOPE)
IdentityRef = placeholder("nnx.provenance.IdentityRef", SCOPE)
ProvenanceComparison = placeholder("nnx.provenance.ProvenanceComparison", SCOPE)
ProvenanceRecord = placeholder("nnx.provenance.ProvenanceRecord", SCOPE)
canonical_bytes = placeholder("nnx.provenance.canonical_bytes", SCOPE)
compare = placeholder("nnx.provenance.compare", SCOPE)
hash_bytes = placeholder("nnx.provenance.hash_bytes", SCOPE)
hash_file = placeholder("nnx.provenance.hash_file", SCOPE)
load_provenance = placeholder("nnx.provenance.load_provenance", SCOPE)
