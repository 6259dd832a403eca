"""NNx path ``nnx.seeding``: a re-export module (nnx_api/nnx_paths.py).

Seeding every RNG stream a run draws from."""

from nnx_adapters.pytorch.state import dataloader_worker_init_fn, set_seed
from nnx_api.runs.store import env_snapshot

__all__ = ["dataloader_worker_init_fn", "env_snapshot", "set_seed"]
