"""The API's hooks on the one converter (``nnx_core.convert.converter``).

Enums are written as their values and handed to the class as given (the class accepts any case
and says which values are allowed); an indexed :class:`Device` is written as its name. Importing
this module registers the hooks; the params modules (``nnx_api.config.params``,
``nnx_api.config.optim_params``) do so before any class is built.
"""

from __future__ import annotations

import re
from typing import Any

from nnx_core.convert import as_given, converter
from nnx_api.config.enums import Device, Devices, ValueEnum

__all__ = ["Momentum", "converter"]

Momentum = float | tuple[float, float]
"""An optimizer's momentum: a float (SGD family) or ``(beta1, beta2)`` (Adam family)."""

converter.register_unstructure_hook(ValueEnum, str)
converter.register_structure_hook(ValueEnum, as_given)
converter.register_unstructure_hook(Device, str)
converter.register_structure_hook(Devices | Device, as_given)
_SAVED_BETAS = re.compile(r"\(\s*([-+0-9.eE]+)\s*,\s*([-+0-9.eE]+)\s*\)")


def _saved_momentum(value: Any, _type: Any) -> Any:
    """A saved momentum as the class takes it. NNx 0.4's ``run.yaml`` wrote Adam's betas as the
    text ``"(0.9, 0.999)"``: read as the pair of numbers (matched, never evaluated); anything else
    is handed on as given (None: the optimizer's default), for the class to check."""
    if isinstance(value, str):
        found = _SAVED_BETAS.fullmatch(value.strip())
        if found is not None:
            try:
                return float(found.group(1)), float(found.group(2))
            except ValueError:
                return value
    return value


converter.register_structure_hook(Momentum | None, _saved_momentum)
