"""``ReferenceStore``: what readers of a ``Storage`` must see, as a plain dictionary.

The contract of ``nnx_core.ports.Storage`` written as the simplest thing that keeps it: files
(path → bytes), folders (a set of paths), held leases, and no durability, temporaries or crashes
— every call happens whole or not at all. ``StorageContract`` runs each call against an adapter
and against this model and demands the same result or the same kind of error.
"""

from __future__ import annotations

import errno
import hashlib

from nnx_core.errors import RunLeaseError
from nnx_core.ports import Receipt
from nnx_adapters.storage.paths import LEASE_FOLDER, TMP_PREFIX, check_run_id, is_reserved, split_path


def _error(kind: type[OSError], path: str) -> OSError:
    code = {
        FileNotFoundError: errno.ENOENT,
        IsADirectoryError: errno.EISDIR,
        NotADirectoryError: errno.ENOTDIR,
        FileExistsError: errno.EEXIST,
    }
    return kind(code[kind], kind.__name__, path)


class ReferenceStore:
    """The visible state of a store and the port's rules for changing it (no I/O)."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.folders: set[str] = set()
        self.held: set[str] = set()

    # -- resolution, as POSIX does it ---------------------------------------------------------

    def _resolve(self, parts: tuple[str, ...], path: str) -> str | None:
        """``"file"``, ``"folder"`` or None for ``parts``; NotADirectoryError below a file."""
        for i in range(1, len(parts)):
            if "/".join(parts[:i]) in self.files:
                raise _error(NotADirectoryError, path)
        joined = "/".join(parts)
        if not parts or joined in self.folders:
            return "folder"
        return "file" if joined in self.files else None

    def _make_parents(self, parts: tuple[str, ...], path: str) -> None:
        for i in range(1, len(parts) + 1):
            prefix = "/".join(parts[:i])
            if prefix in self.files:
                raise _error(NotADirectoryError, path)
        for i in range(1, len(parts) + 1):
            self.folders.add("/".join(parts[:i]))

    def _writable(self, parts: tuple[str, ...], path: str) -> None:
        self._make_parents(parts[:-1], path)
        if "/".join(parts) in self.folders:
            raise _error(IsADirectoryError, path)

    # -- the port -----------------------------------------------------------------------------

    def read(self, path: str) -> bytes:
        parts = split_path(path)
        kind = self._resolve(parts, path)
        if kind == "folder":
            raise _error(IsADirectoryError, path)
        if kind is None:
            raise _error(FileNotFoundError, path)
        return self.files[path]

    def exists(self, path: str) -> bool:
        parts = split_path(path, reserved_ok=True)
        if is_reserved(parts):
            return False
        try:
            return self._resolve(parts, path) == "file"
        except NotADirectoryError:
            return False

    def digest(self, path: str) -> Receipt:
        data = self.read(path)
        return Receipt(path, len(data), hashlib.sha256(data).hexdigest())

    def write(self, path: str, data: bytes) -> Receipt:
        parts = split_path(path)
        self._writable(parts, path)
        self.files[path] = bytes(data)
        return Receipt(path, len(data), hashlib.sha256(data).hexdigest())

    def open_blob_folder(self, folder: str) -> None:
        """``write_blob``'s first step: the folder exists before ``produce`` runs."""
        parts = split_path(folder)
        self._make_parents(parts, folder)

    def write_blob(self, folder: str, data: bytes) -> Receipt:
        """``write_blob`` after ``open_blob_folder``: the blob, unless that content is there."""
        digest = hashlib.sha256(data).hexdigest()
        path = f"{folder}/{digest}"
        if path in self.folders:
            raise _error(IsADirectoryError, path)
        self.files[path] = bytes(data)
        return Receipt(path, len(data), digest)

    def append(self, path: str, data: bytes) -> None:
        parts = split_path(path)
        self._writable(parts, path)
        self.files[path] = self.files.get(path, b"") + bytes(data)

    def delete(self, path: str) -> None:
        parts = split_path(path)
        kind = self._resolve(parts, path)
        if kind == "folder":
            raise _error(IsADirectoryError, path)
        self.files.pop(path, None)

    def list(self, folder: str) -> list[str]:
        parts = split_path(folder, root_ok=True)
        kind = self._resolve(parts, folder)
        if kind == "file":
            raise _error(NotADirectoryError, folder)
        if kind is None:
            return []
        prefix = f"{folder}/" if folder else ""
        names = {p[len(prefix):].split("/", 1)[0] for p in (*self.files, *self.folders) if p.startswith(prefix)}
        return sorted(n for n in names if n and (folder or n != LEASE_FOLDER))

    def remove_tree(self, folder: str) -> None:
        parts = split_path(folder)
        kind = self._resolve(parts, folder)
        if kind == "file":
            raise _error(NotADirectoryError, folder)
        if kind is None:
            return
        inside = f"{folder}/"
        self.files = {p: d for p, d in self.files.items() if not p.startswith(inside)}
        self.folders = {p for p in self.folders if p != folder and not p.startswith(inside)}

    def rename_folder(self, source: str, destination: str) -> None:
        """Move every file and folder under ``source`` to ``destination``, a new name beside it."""
        parts, target = split_path(source), split_path(destination)
        if parts[:-1] != target[:-1]:
            raise ValueError(f"rename_folder renames within one folder: {source!r}, {destination!r}")
        kind = self._resolve(parts, source)
        if kind is None:
            raise _error(FileNotFoundError, source)
        if kind == "file":
            raise _error(NotADirectoryError, source)
        if self._resolve(target, destination) is not None:
            raise _error(FileExistsError, destination)
        inside = f"{source}/"

        def moved(path: str) -> str:
            return destination + path[len(source):] if path == source or path.startswith(inside) else path

        self.files = {moved(p): d for p, d in self.files.items()}
        self.folders = {moved(p) for p in self.folders}

    def temporaries(self, folder: str) -> list[str]:
        """Completed calls leave no temporaries; only the folder's kind is checked."""
        parts = split_path(folder, root_ok=True)
        if self._resolve(parts, folder) == "file":
            raise _error(NotADirectoryError, folder)
        return []

    def clean_temporaries(self, folder: str) -> int:
        return len(self.temporaries(folder))

    def take_lease(self, run_id: str) -> None:
        check_run_id(run_id)
        if run_id in self.held:
            raise RunLeaseError(f"run {run_id!r} is leased")
        self.held.add(run_id)

    def release_lease(self, run_id: str) -> None:
        self.held.discard(run_id)

    # -- what readers see ---------------------------------------------------------------------

    def tree(self) -> tuple[dict[str, bytes], set[str]]:
        """Every file (path → bytes) and folder."""
        return dict(self.files), set(self.folders)


def visible_tree(store: object, folder: str = "") -> tuple[dict[str, bytes], set[str]]:
    """Every file (path → bytes) and folder a reader finds walking ``store`` through the port;
    ``AssertionError`` if a listing shows a temporary."""
    files: dict[str, bytes] = {}
    folders: set[str] = set()
    for name in store.list(folder):  # type: ignore[attr-defined]
        path = f"{folder}/{name}" if folder else name
        assert not name.startswith(TMP_PREFIX), f"{store!r}.list({folder!r}) shows the temporary {name!r} to readers"
        if store.exists(path):  # type: ignore[attr-defined]
            files[path] = store.read(path)  # type: ignore[attr-defined]
        else:
            folders.add(path)
            sub_files, sub_folders = visible_tree(store, path)
            files.update(sub_files)
            folders |= sub_folders
    return files, folders


def copy_visible(source: object, target: object) -> None:
    """Write every visible file and folder of ``source`` into the empty store ``target``."""
    files, folders = visible_tree(source)
    for path in sorted(files):
        target.write(path, files[path])  # type: ignore[attr-defined]
    for folder in sorted(folders):
        if not any(p.startswith(f"{folder}/") for p in files):  # an empty folder: made by a write
            marker = f"{folder}/.keep"
            target.write(marker, b"")  # type: ignore[attr-defined]
            target.delete(marker)  # type: ignore[attr-defined]
