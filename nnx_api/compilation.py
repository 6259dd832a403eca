"""NNx path ``nnx.compilation``: a re-export module (nnx_api/nnx_paths.py).
"""

from nnx_core.compilation import CompileRecord
from nnx_core.errors import CompileError as CompileFailed
from nnx_api.config.compilation import COMPILE_MODES, CompileSpec

__all__ = ["COMPILE_MODES", "CompileFailed", "CompileRecord", "CompileSpec"]
