"""``nnx.seeding``: seeding every RNG stream a run draws from."""

from nnx_adapters.pytorch.state import set_seed

__all__ = ["set_seed"]
