"""Optional dependencies: imported on first use, with the extra that installs them named.

Trackers, plots, search and exporters wrap well-kept libraries (TensorBoard, W&B, matplotlib,
Optuna, ONNX, safetensors). None of them is needed to train, so none is imported by
``import nnx_api``; each is loaded here when a feature first needs it.
"""

from __future__ import annotations

import importlib
from types import ModuleType


def require(module: str, extra: str, feature: str, package: str | None = None) -> ModuleType:
    """Import ``module``; if it (or ``package`` behind it) is missing, an ImportError that says
    which extra to install."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        name = package or module.split(".")[0]
        raise ImportError(f'{feature} needs {name!r}, which is not installed: pip install "nnx[{extra}]"') from exc
