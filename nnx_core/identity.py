"""Run identity: a run's id is the content address of its configuration.

``run_id(state) = sha256(canonical_json(state))[:32]``. Canonical JSON sorts keys, uses no
whitespace, writes floats with Python's shortest round-tripping ``repr`` and refuses NaN and
infinities, so the same configuration gives the same id in every process, whatever the hash seed.
Fields added after a class first shipped are left out of ``state()`` while they hold their default
("omit when default"), so existing ids never drift.

Also here: validation of run ids and tags before any path is built from them.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

from nnx_core.errors import InvalidRunIdError

ID_HEX_DIGITS = 32
_TAG_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_FORBIDDEN = set("/\\*?[]\x00")


def canonical_json(state: Mapping[str, Any]) -> str:
    """The one canonical text of a plain configuration mapping."""
    return json.dumps(state, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def run_id(state: Mapping[str, Any]) -> str:
    """Content address of a configuration: 32 hex digits of SHA-256 over its canonical JSON."""
    return text_id(canonical_json(state))


def text_id(canonical: str) -> str:
    """The run id of a configuration's canonical JSON text (``run_id`` without the dump)."""
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:ID_HEX_DIGITS]


def validate_run_id(value: object) -> str:
    """Return ``value`` if it is a safe run id, else raise :class:`InvalidRunIdError`.

    A safe id is a non-empty string without path separators, NUL, glob characters, ``.`` or ``..``
    and without leading dots — it can never name anything outside the runs root.
    """
    if not isinstance(value, str) or not value:
        raise InvalidRunIdError(f"run id must be a non-empty string, got {value!r}")
    if value in (".", "..") or value.startswith(".") or _FORBIDDEN.intersection(value):
        raise InvalidRunIdError(
            f"run id {value!r} is not allowed: ids never contain '/', '\\', '..', NUL or glob characters; "
            "use the id printed by `nnx runs list`"
        )
    return value


def validate_tag(value: object) -> str:
    """Return ``value`` if it is a safe checkpoint tag (``[A-Za-z0-9][A-Za-z0-9._-]*``)."""
    if not isinstance(value, str) or not _TAG_RE.match(value) or ".." in value:
        raise InvalidRunIdError(
            f"checkpoint tag {value!r} is not allowed: use letters, digits, '.', '_' or '-', "
            "starting with a letter or digit (e.g. 'last', 'best', 'q1', 'epoch5')"
        )
    return value
