"""A Storage adapter that keeps every run in one SQLite database file (docs/adapters.md).

Each call is one transaction, so a write is atomic without temporaries and durable once it
returns (``synchronous=FULL``); folders are rows of their own, as the port's contract wants.
"""

from __future__ import annotations

import errno
import hashlib
import io
import os
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

from nnx_core.ports import Receipt
from nnx_adapters.storage.fs import flock_lease
from nnx_adapters.storage.paths import is_reserved, split_path


def _error(kind: type[OSError], code: int, path: str) -> OSError:
    return kind(code, os.strerror(code), path)


class SQLiteStorage:
    """Runs in the SQLite file ``path``; leases are lock files beside it (``<path>-leases``)."""

    def __init__(self, path: str, *, synchronous: str = "FULL") -> None:
        self.path = os.fspath(path)
        self.db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute(f"PRAGMA synchronous={synchronous}")
        self.db.execute("CREATE TABLE IF NOT EXISTS files (path TEXT PRIMARY KEY, data BLOB NOT NULL)")
        self.db.execute("CREATE TABLE IF NOT EXISTS folders (path TEXT PRIMARY KEY)")

    def __repr__(self) -> str:
        return f"SQLiteStorage({self.path!r})"

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """One transaction: everything in it happens, or nothing does."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield self.db
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    # -- kinds, resolved as POSIX does -------------------------------------------------------

    def _is_file(self, path: str) -> bool:
        return self.db.execute("SELECT 1 FROM files WHERE path = ?", (path,)).fetchone() is not None

    def _is_folder(self, path: str) -> bool:
        return path == "" or self.db.execute("SELECT 1 FROM folders WHERE path = ?", (path,)).fetchone() is not None

    def _no_file_above(self, parts: tuple[str, ...], path: str) -> None:
        for i in range(1, len(parts)):
            if self._is_file("/".join(parts[:i])):
                raise _error(NotADirectoryError, errno.ENOTDIR, path)

    def _make_parents(self, parts: tuple[str, ...], path: str) -> None:
        self._no_file_above((*parts, ""), path)
        for i in range(1, len(parts) + 1):
            self.db.execute("INSERT OR IGNORE INTO folders VALUES (?)", ("/".join(parts[:i]),))

    # -- reading -----------------------------------------------------------------------------

    def read(self, path: str) -> bytes:
        parts = split_path(path)
        self._no_file_above(parts, path)
        row = self.db.execute("SELECT data FROM files WHERE path = ?", (path,)).fetchone()
        if row is not None:
            return bytes(row[0])
        if self._is_folder(path):
            raise _error(IsADirectoryError, errno.EISDIR, path)
        raise _error(FileNotFoundError, errno.ENOENT, path)

    def exists(self, path: str) -> bool:
        parts = split_path(path, reserved_ok=True)
        return not is_reserved(parts) and self._is_file(path)

    def digest(self, path: str) -> Receipt:
        data = self.read(path)
        return Receipt(path, len(data), hashlib.sha256(data).hexdigest())

    def list(self, folder: str) -> list[str]:
        parts = split_path(folder, root_ok=True)
        self._no_file_above((*parts, ""), folder)
        if not self._is_folder(folder):
            return []
        prefix = f"{folder}/" if folder else ""
        rows = self.db.execute(
            "SELECT path FROM files WHERE substr(path, 1, ?) = ? UNION SELECT path FROM folders WHERE substr(path, 1, ?) = ?",
            (len(prefix), prefix, len(prefix), prefix),
        )
        return sorted({path[len(prefix):].split("/", 1)[0] for (path,) in rows})

    # -- writing -----------------------------------------------------------------------------

    def write(self, path: str, data: bytes, *, sha256: str | None = None) -> Receipt:
        parts = split_path(path)
        payload = bytes(data)
        with self._tx():
            self._make_parents(parts[:-1], path)
            if self._is_folder(path):
                raise _error(IsADirectoryError, errno.EISDIR, path)
            self.db.execute("INSERT OR REPLACE INTO files VALUES (?, ?)", (path, payload))
        return Receipt(path, len(payload), sha256 or hashlib.sha256(payload).hexdigest())

    def write_blob(self, folder: str, produce: Callable[[Any], None]) -> Receipt:
        parts = split_path(folder)
        with self._tx():
            self._make_parents(parts, folder)
        sink = io.BytesIO()  # this adapter gathers the blob; a large-blob store would stream it
        produce(sink)
        data = sink.getvalue()
        digest = hashlib.sha256(data).hexdigest()
        path = f"{folder}/{digest}"
        with self._tx():
            if self._is_folder(path):
                raise _error(IsADirectoryError, errno.EISDIR, path)
            self.db.execute("INSERT OR IGNORE INTO files VALUES (?, ?)", (path, data))
        return Receipt(path, len(data), digest)

    def append(self, path: str, data: bytes) -> None:
        parts = split_path(path)
        with self._tx():
            self._make_parents(parts[:-1], path)
            if self._is_folder(path):
                raise _error(IsADirectoryError, errno.EISDIR, path)
            self.db.execute("INSERT OR IGNORE INTO files VALUES (?, x'')", (path,))
            self.db.execute("UPDATE files SET data = CAST(data || ? AS BLOB) WHERE path = ?", (bytes(data), path))

    def delete(self, path: str) -> None:
        parts = split_path(path)
        with self._tx():
            self._no_file_above(parts, path)
            if self._is_folder(path):
                raise _error(IsADirectoryError, errno.EISDIR, path)
            self.db.execute("DELETE FROM files WHERE path = ?", (path,))

    def sync_group(self) -> AbstractContextManager[None]:
        return nullcontext()  # every call is its own durable transaction: nothing to defer

    def remove_tree(self, folder: str) -> None:
        parts = split_path(folder)
        with self._tx():
            self._no_file_above((*parts, ""), folder)
            inside = f"{folder}/"
            for table in ("files", "folders"):
                self.db.execute(
                    f"DELETE FROM {table} WHERE path = ? OR substr(path, 1, ?) = ?", (folder, len(inside), inside)
                )

    def rename_folder(self, source: str, destination: str) -> None:
        parts, target = split_path(source), split_path(destination)
        if parts[:-1] != target[:-1]:
            raise ValueError(f"rename_folder renames within one folder: {source!r}, {destination!r}")
        with self._tx():  # one transaction: readers find the old name or the new one
            self._no_file_above(parts, source)
            if self._is_file(source):
                raise _error(NotADirectoryError, errno.ENOTDIR, source)
            if not self._is_folder(source):
                raise _error(FileNotFoundError, errno.ENOENT, source)
            if self._is_file(destination) or self._is_folder(destination):
                raise _error(FileExistsError, errno.EEXIST, destination)
            inside = f"{source}/"
            for table in ("files", "folders"):
                self.db.execute(
                    f"UPDATE {table} SET path = ? || substr(path, ?) WHERE path = ? OR substr(path, 1, ?) = ?",
                    (destination, len(source) + 1, source, len(inside), inside),
                )

    def temporaries(self, folder: str) -> list[str]:
        """A transaction leaves no temporaries: always ``[]`` (once ``folder`` is checked)."""
        parts = split_path(folder, root_ok=True)
        self._no_file_above((*parts, ""), folder)
        return []

    def clean_temporaries(self, folder: str) -> int:
        return len(self.temporaries(folder))

    def lease(self, run_id: str) -> AbstractContextManager[None]:
        """``flock`` on ``<path>-leases/.leases/<run_id>.lock``: exclusive across processes."""
        return flock_lease(f"{self.path}-leases", run_id)
