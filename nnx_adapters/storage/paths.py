"""Store paths every ``Storage`` adapter shares: validation, reserved names, temporaries.

A store path is relative and ``/``-separated. Owned temporaries are named ``.tmp-*`` and the
root-level ``.leases`` folder holds lease files; readers never see either.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager

from nnx_core.errors import InvalidRunIdError

TMP_PREFIX = ".tmp-"
"""Name prefix of owned temporaries; readers never see such names."""

LEASE_FOLDER = ".leases"
"""Root-level folder holding the lease lock files; reserved, hidden from ``list("")``."""

_MAX_NAME_BYTES = 255



def split_path(path: str, *, root_ok: bool = False, reserved_ok: bool = False) -> tuple[str, ...]:
    """Validate a store-relative ``/``-separated path and return its segments.

    Raises ``ValueError`` for absolute paths, ``..`` / ``.``, empty segments, NUL, backslashes,
    over-long names and (unless ``reserved_ok``) reserved names: any ``.tmp-*`` segment or a
    leading ``.leases``. ``""`` is the store root, accepted only with ``root_ok``.
    """
    if not isinstance(path, str):
        raise TypeError(f"store path must be a str, not {type(path).__name__}")
    if path == "":
        if root_ok:
            return ()
        raise ValueError("store path must not be empty")
    if "\x00" in path:
        raise ValueError(f"store path contains NUL: {path!r}")
    if "\\" in path:
        raise ValueError(f"store path must use '/' separators, not '\\': {path!r}")
    if path.startswith("/"):
        raise ValueError(f"store path must be relative: {path!r}")
    parts = tuple(path.split("/"))
    for part in parts:
        if part in ("", ".", ".."):
            raise ValueError(f"store path has an empty, '.' or '..' segment: {path!r}")
        if len(part.encode("utf-8", "surrogateescape")) > _MAX_NAME_BYTES:
            raise ValueError(f"store path segment longer than {_MAX_NAME_BYTES} bytes: {path!r}")
    if not reserved_ok and is_reserved(parts):
        raise ValueError(f"store path uses a reserved name ({TMP_PREFIX}* or {LEASE_FOLDER}): {path!r}")
    return parts


def is_reserved(parts: tuple[str, ...]) -> bool:
    """Whether validated ``parts`` name a temporary or the lease folder."""
    return bool(parts) and (parts[0] == LEASE_FOLDER or any(p.startswith(TMP_PREFIX) for p in parts))


def check_run_id(run_id: str) -> str:
    """Return ``run_id`` if it is a safe single file-name segment, else ``InvalidRunIdError``."""
    if (
        not isinstance(run_id, str)
        or run_id in ("", ".", "..")
        or any(c in run_id for c in "/\\\x00")
        or len(run_id.encode("utf-8", "surrogateescape")) > 200
    ):
        raise InvalidRunIdError(f"invalid run id for a lease: {run_id!r}")
    return run_id


def lease_conflict_message(run_id: str) -> str:
    """The ``RunLeaseError`` message shared by every Storage adapter."""
    return (
        f"another process is training or overwriting run {run_id!r}; wait for it to finish, then run the same "
        "command again: an interrupted run is continued (resume='auto'). A different salt would start another run"
    )


def temporary_name(name: str) -> str:
    """A fresh owned-temporary name for destination file ``name``."""
    return f"{TMP_PREFIX}{name[:200]}-{secrets.token_hex(8)}"


def byte_view(data: bytes | bytearray | memoryview) -> memoryview:
    """A flat byte view of ``data`` without copying it."""
    return memoryview(data).cast("B")


class FolderSyncs:
    """The folder syncs of an adapter's ``Storage.sync_group`` (``nnx_core.ports.Storage``).

    An adapter calls ``after_change(folder)`` where its protocol syncs a folder after a rename or
    a removal: outside a group ``sync(folder)`` runs at once; inside one the folder is noted (once,
    in the order first changed) and synced when the outermost group exits normally. A group left
    by an exception syncs nothing: the writes inside are visible, and none of them is known to
    be durable. A group is its thread's: a background commit's group never takes in a write made
    meanwhile by the training thread (which syncs its folder at once).
    """

    def __init__(self, sync: Callable[[Hashable], None]) -> None:
        self._sync = sync
        self._local = threading.local()  # .pending: this thread's open group's folders

    def after_change(self, folder: Hashable) -> None:
        pending = getattr(self._local, "pending", None)
        if pending is None:
            self._sync(folder)
        elif folder not in pending:
            pending.append(folder)

    @contextmanager
    def group(self) -> Iterator[None]:
        if getattr(self._local, "pending", None) is not None:  # nested: joins the outer group
            yield
            return
        self._local.pending = []
        try:
            yield
        except BaseException:
            self._local.pending = None
            raise
        folders, self._local.pending = self._local.pending, None
        for folder in folders:
            self._sync(folder)
