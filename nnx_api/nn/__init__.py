"""NNx path ``nnx.nn``: the package of the NNx paths below it (nnx_api/nnx_paths.py).

Every module below re-exports names whose code lives elsewhere, or refuses an out-of-scope one,
so code written for NNx's import paths runs after ``nnx`` → ``nnx_api``; the top-level
``nnx_api`` names are the preferred spelling (docs/nnx-compat.md)."""

__all__ = []
