"""A run's identity: the configuration whose content address (``nnx_core.identity.run_id``) is
the run id, built once for every entry point (``NNModel.run_config``, ``Trainer.run_config``).

The configuration is the model's state, ``train`` (the train params' state), ``trainer`` (a
Trainer's named-optimizer params, only for a Trainer) and ``salt`` (only when given). Nothing
else enters it, so the ids pinned in tests/api/test_run_id_pins.py never change.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nnx_core.errors import ParamsError

__all__ = ["check_salt", "run_config"]


def check_salt(salt: object) -> str:
    """``salt`` if it is a non-blank string (``ParamsError`` naming ``salt`` otherwise)."""
    if not isinstance(salt, str) or not salt.strip():
        raise ParamsError("salt", "must be a non-blank string")
    return salt


def run_config(
    model: Mapping[str, Any], train: Mapping[str, Any], salt: str | None, *, trainer: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The run's configuration from the model's state, the train params' state, a Trainer's
    params' state (None for ``NNModel.train``) and the salt (None: no salt); the salt is checked."""
    config = {**model, "train": train}
    if trainer is not None:
        config["trainer"] = trainer
    if salt is not None:
        config["salt"] = check_salt(salt)
    return config
