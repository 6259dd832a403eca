"""``nnx runs plot | compare | export``. A re-export module: the code lives in
``nnx_api.commands.runs_extra``."""

from nnx_api.commands.runs_extra import register, render_comparison, store

__all__ = ["register", "render_comparison", "store"]
