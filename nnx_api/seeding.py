"""NNx path ``nnx.seeding``: a re-export module (nnx_api/nnx_paths.py).

Seeding every RNG stream a run draws from."""

from nnx_adapters.pytorch.state import set_seed

__all__ = ["set_seed"]
