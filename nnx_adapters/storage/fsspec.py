"""``FsspecStorage``: the ``Storage`` port over an ``fsspec`` filesystem (the ``nnx[fsspec]`` extra).

The commit protocol needs three things of a backend, and fsspec's API promises none of them in
general (an object store's ``mv`` is a copy then a delete; nothing in ``AbstractFileSystem``
syncs or locks):

* **atomic replace** — renaming the owned temporary onto the destination shows readers the old
  bytes or the new ones, never a mix, never nothing;
* **durability** — after ``write`` returns its bytes and the folder entry survive power loss
  (fsync of the file, then of its folder), and a failed fsync is an error;
* **an exclusive run lease** — a second writer of the same run is refused at once.

So the adapter knows its backends by class and refuses any other at construction with
:class:`StorageGuaranteeError`, naming what it cannot promise there:

==================  ==========================================  ================================
backend             how each guarantee is kept                  kit results (``nnx_adapters.testing``)
==================  ==========================================  ================================
``file`` / local    replace: ``fs.mv`` → ``os.rename`` in the   agreement with the reference
(``LocalFileSystem``) same folder (atomic on POSIX local file    model, blobs and digests, lease
                    systems; on NFS/SMB only what the mount     exclusivity (also against a
                    gives); durable: ``os.fsync`` of the file   ``FileStorage`` on the same
                    (``fileno()``) and of its folder (the path  root); the commit protocol and
                    is a local one); lease: ``flock`` on        the journal under a kill or an
                    ``<root>/.leases/<run>.lock``, shared with  ENOSPC/EIO at every port call:
                    ``FileStorage``; ``rename_folder``: one     all pass
                    ``os.rename``, then the parent's fsync
``memory``          replace: the temporary is copied onto the   the same contracts: all pass
(``MemoryFileSystem``) destination in one dict assignment, then
                    deleted (atomic for readers in this
                    process); durable: **no** — the store lives
                    in this process and is gone when it ends
                    (``durable`` is False; fine for notebooks
                    and tests, never for runs you keep); lease:
                    a registry in this process;
                    ``rename_folder``: **not atomic** — every
                    file copied, then the old folder deleted
                    (another thread may see both names)
==================  ==========================================  ================================

Neither backend offers crash injection, so the kit's power-cut and in-call fault machines (which
need ``MemoryStorage``'s hooks) do not run against this adapter; what a power cut does to the
local backend is what it does to ``FileStorage``, whose operation sequence this adapter repeats.

fsspec itself is imported when a ``FsspecStorage`` is made, so importing this module needs no
extra installed.
"""

from __future__ import annotations

import errno
import hashlib
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, suppress
from typing import Any

import attrs

from nnx_core.errors import NNxError, RunLeaseError
from nnx_core.ports import Receipt
from nnx_adapters.extras import require
from nnx_adapters.storage.fs import flock_lease
from nnx_adapters.storage.paths import (
    LEASE_FOLDER,
    TMP_PREFIX,
    FolderSyncs,
    byte_view,
    check_run_id,
    is_reserved,
    lease_conflict_message,
    split_path,
    temporary_name,
)

_CHUNK_BYTES = 1 << 20

# (id of a MemoryFileSystem store, root, run id) of every lease held in this process.
_MEMORY_HELD: set[tuple[int, str, str]] = set()
_MEMORY_GUARD = threading.Lock()


class StorageGuaranteeError(NNxError, ValueError):
    """A storage backend cannot keep a guarantee NNx's commit protocol needs; ``missing`` names them."""

    def __init__(self, backend: str, missing: tuple[str, ...]) -> None:
        self.backend = backend
        self.missing = missing
        super().__init__(
            f"FsspecStorage cannot keep NNx's commit protocol on {backend}: it does not guarantee "
            + "; ".join(missing)
            + ". Use fsspec's 'file' or 'memory' filesystem, FileStorage on a POSIX file system, or write "
            "a Storage adapter for this backend and prove it with nnx_adapters.testing (docs/adapters.md)"
        )


@attrs.frozen
class BackendGuarantees:
    """How a backend keeps each guarantee (module docstring); ``durable`` False: volatile."""

    backend: str
    local: bool  # paths are local OS paths: fsync and flock apply
    durable: bool


GUARANTEES_NEEDED = (
    "atomic replace (renaming a temporary onto the destination in one step)",
    "durability (fsync of a file and of its folder, errors raised)",
    "an exclusive run lease",
)


def backend_guarantees(fs: Any) -> BackendGuarantees:
    """What ``fs`` guarantees; ``StorageGuaranteeError`` for a backend FsspecStorage does not know."""
    local = require("fsspec.implementations.local", "fsspec", "FsspecStorage").LocalFileSystem
    memory = require("fsspec.implementations.memory", "fsspec", "FsspecStorage").MemoryFileSystem
    kind = type(fs)
    if kind is local:
        return BackendGuarantees("fsspec 'file' (LocalFileSystem)", local=True, durable=True)
    if kind is memory:
        return BackendGuarantees("fsspec 'memory' (MemoryFileSystem)", local=False, durable=False)
    protocol = getattr(fs, "protocol", "?")
    name = protocol if isinstance(protocol, str) else "/".join(protocol)
    raise StorageGuaranteeError(f"fsspec {name!r} ({kind.__name__})", GUARANTEES_NEEDED)


class FsspecStorage:
    """A run store under ``root`` on an fsspec filesystem: ``fs`` an instance or a protocol name
    (``"file"``, ``"memory"``; ``storage_options`` go to ``fsspec.filesystem``).

    ``guarantees`` says how the backend keeps the protocol's guarantees; ``durable`` is False on
    the memory backend (nothing survives the process). Refuses other backends with
    :class:`StorageGuaranteeError`.
    """

    def __init__(self, fs: Any, root: str, **storage_options: Any) -> None:
        if isinstance(fs, str):
            fs = require("fsspec", "fsspec", "FsspecStorage").filesystem(fs, **storage_options)
        self.guarantees = backend_guarantees(fs)
        self.fs = fs
        self.root = fs._strip_protocol(str(root)).rstrip("/")
        self._syncs = FolderSyncs(self._sync_folder)  # type: ignore[arg-type]

    def __repr__(self) -> str:
        return f"FsspecStorage({self.guarantees.backend}, {self.root!r})"

    @property
    def durable(self) -> bool:
        """Whether what ``write`` returned from survives the process and power loss."""
        return self.guarantees.durable

    # -- reading -----------------------------------------------------------------------------

    def read(self, path: str) -> bytes:
        """Return the file's bytes; ``FileNotFoundError`` when absent."""
        parts = split_path(path)
        try:
            return self.fs.cat_file(self._full(parts))
        except FileNotFoundError:
            raise self._missing(parts, path) from None

    def exists(self, path: str) -> bool:
        """Whether a regular, non-temporary file exists at ``path`` (folders: ``False``)."""
        parts = split_path(path, reserved_ok=True)
        return not is_reserved(parts) and self.fs.isfile(self._full(parts))

    def digest(self, path: str) -> Receipt:
        """Size and SHA-256 of a file, read in 1 MiB chunks."""
        parts = split_path(path)
        sha, size = hashlib.sha256(), 0
        try:
            with self.fs.open(self._full(parts), "rb") as f:
                while chunk := f.read(_CHUNK_BYTES):
                    sha.update(chunk)
                    size += len(chunk)
        except (FileNotFoundError, FileExistsError):  # memory: FileExistsError opening below a file
            raise self._missing(parts, path) from None
        return Receipt(path, size, sha.hexdigest())

    def list(self, folder: str) -> list[str]:
        """Sorted names directly in ``folder`` (``""``: the root), temporaries skipped."""
        parts = split_path(folder, root_ok=True)
        full = self._full(parts)
        if parts and self.fs.isfile(full):
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), folder)
        try:
            entries = self.fs.ls(full, detail=False)
        except FileNotFoundError:
            self._check_ancestors(parts, folder)
            return []
        names = (entry.rstrip("/").rsplit("/", 1)[-1] for entry in entries)
        return sorted(n for n in names if not n.startswith(TMP_PREFIX) and (parts or n != LEASE_FOLDER))

    # -- writing -----------------------------------------------------------------------------

    def write(self, path: str, data: bytes | bytearray | memoryview, *, sha256: str | None = None) -> Receipt:
        """Atomically (and, where the backend is durable, durably) replace ``path`` with ``data``."""
        parts = split_path(path)
        view = byte_view(data)
        digest = sha256 if sha256 is not None else hashlib.sha256(view).hexdigest()
        folder = self._make_parents(parts[:-1])
        destination = self._full(parts)
        if self.fs.isdir(destination):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
        self._replace(folder, temporary_name(parts[-1]), lambda f: f.write(view), lambda: destination)
        return Receipt(path, view.nbytes, digest)

    def write_blob(self, folder: str, produce: Callable[[Any], None]) -> Receipt:
        """Stream ``produce(writer)`` into ``folder/<sha256>``; an existing blob is kept."""
        directory = self._make_parents(split_path(folder))
        writer = _HashingSink()

        def fill(f: Any) -> None:
            writer.file = f
            produce(writer)

        def target() -> str | None:
            destination = f"{directory}/{writer.sha.hexdigest()}"
            if self.fs.isdir(destination):
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), destination)
            return None if self.fs.isfile(destination) else destination

        self._replace(directory, temporary_name("blob"), fill, target)
        digest = writer.sha.hexdigest()
        return Receipt(f"{folder}/{digest}", writer.size, digest)

    def append(self, path: str, data: bytes | bytearray | memoryview) -> None:
        """Append ``data`` to ``path`` (created, with its folders, if absent) and sync it."""
        parts = split_path(path)
        view = byte_view(data)
        folder = self._make_parents(parts[:-1])
        target = self._full(parts)
        if self.fs.isdir(target):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
        created = not self.fs.isfile(target)
        with self.fs.open(target, "ab") as f:
            f.write(view)
            self._sync_file(f)
        if created:
            self._sync_folder(folder)

    def delete(self, path: str) -> None:
        """Remove a file if it exists, then sync its folder; a missing file is fine."""
        parts = split_path(path)
        target = self._full(parts)
        if self.fs.isdir(target):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
        if not self.fs.isfile(target):
            self._check_ancestors(parts[:-1], path)
            return
        self.fs.rm_file(target)
        self._syncs.after_change(self._full(parts[:-1]))

    def sync_group(self) -> AbstractContextManager[None]:
        """Defer the folder syncs of the writes and removals inside to one per folder at the group's
        exit (local backends; elsewhere there is no folder sync to defer)."""
        return self._syncs.group()

    def remove_tree(self, folder: str) -> None:
        """Remove ``folder`` and everything under it, then sync its parent; missing is fine."""
        parts = split_path(folder)
        target = self._full(parts)
        if self.fs.isfile(target):
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), folder)
        if not self.fs.isdir(target):
            self._check_ancestors(parts[:-1], folder)
            return
        self.fs.rm(target, recursive=True)
        self._sync_folder(self._full(parts[:-1]))

    def rename_folder(self, source: str, destination: str) -> None:
        """Rename the folder ``source`` to ``destination`` in the same parent (``fs.mv``), then sync
        the parent. Any existing ``destination`` is refused first (``FileExistsError``): the local
        backend's ``mv`` would move ``source`` inside an existing folder. Atomic on the local
        backend (one ``os.rename``); the memory backend copies then deletes (module docstring)."""
        parts, target_parts = split_path(source), split_path(destination)
        if parts[:-1] != target_parts[:-1]:
            raise ValueError(
                f"rename_folder renames within one folder: {source!r} and {destination!r} have different parents"
            )
        origin, target = self._full(parts), self._full(target_parts)
        if self.fs.isfile(origin):
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), source)
        if not self.fs.isdir(origin):
            self._check_ancestors(parts[:-1], source)
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), source)
        if self.fs.exists(target):
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), destination)
        self.fs.mv(origin, target, recursive=True)
        self._sync_folder(self._full(parts[:-1]))

    def temporaries(self, folder: str) -> list[str]:
        """Store paths of every ``.tmp-*`` file under ``folder`` (``""``: the root), sorted."""
        parts = split_path(folder, root_ok=True)
        full = self._full(parts)
        if parts and self.fs.isfile(full):
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), folder)
        if not self.fs.isdir(full):
            self._check_ancestors(parts, folder)
            return []
        found = []
        for entry in self.fs.find(full):
            relative = entry[len(self.root) + 1 :]
            names = relative.split("/")
            if names[-1].startswith(TMP_PREFIX) and names[0] != LEASE_FOLDER:
                found.append(relative)
        return sorted(found)

    def clean_temporaries(self, folder: str) -> int:
        """Delete every ``.tmp-*`` file under ``folder`` (``""``: the root); return the count."""
        stale = self.temporaries(folder)
        for path in stale:
            self.fs.rm_file(self._full(tuple(path.split("/"))))
        for parent in sorted({path.rpartition("/")[0] for path in stale}):
            self._sync_folder(self._full(tuple(parent.split("/")) if parent else ()))
        return len(stale)

    # -- lease -------------------------------------------------------------------------------

    def lease(self, run_id: str) -> AbstractContextManager[None]:
        """Hold the run's lease: ``flock`` on the local backend (shared with ``FileStorage`` on the
        same root), a registry of this process on the memory backend; ``RunLeaseError`` at once if
        another holds it."""
        if self.guarantees.local:
            return flock_lease(self.root, run_id)
        return self._memory_lease(run_id)

    @contextmanager
    def _memory_lease(self, run_id: str) -> Iterator[None]:
        check_run_id(run_id)
        key = (id(self.fs.store), self.root, run_id)
        with _MEMORY_GUARD:
            if key in _MEMORY_HELD:
                raise RunLeaseError(lease_conflict_message(run_id))
            _MEMORY_HELD.add(key)
        try:
            yield
        finally:
            with _MEMORY_GUARD:
                _MEMORY_HELD.discard(key)

    # -- helpers -----------------------------------------------------------------------------

    def _full(self, parts: tuple[str, ...]) -> str:
        return "/".join((self.root, *parts))

    def _replace(self, folder: str, tmp_name: str, fill: Callable[[Any], None], target: Callable[[], str | None]) -> None:
        """The durable-replace protocol: an owned temporary in ``folder``, filled, synced, closed,
        then moved onto ``target()`` (None: identical content is there, drop it) and the folder
        synced. On failure the temporary is removed and the original error re-raised."""
        tmp = f"{folder}/{tmp_name}"
        settled = False
        try:
            f = self.fs.open(tmp, "wb")
            try:
                fill(f)
                self._sync_file(f)
            except BaseException:
                with suppress(Exception):
                    f.close()
                raise
            f.close()
            destination = target()
            if destination is None:
                self.fs.rm_file(tmp)
                settled = True
            else:
                self.fs.mv(tmp, destination)
                settled = True
                self._syncs.after_change(folder)
        except BaseException:
            if not settled:
                with suppress(Exception):
                    self.fs.rm_file(tmp)
            raise

    def _sync_file(self, f: Any) -> None:
        f.flush()
        if self.guarantees.local:
            os.fsync(f.fileno())

    def _sync_folder(self, folder: str) -> None:
        if not self.guarantees.local:
            return
        fd = os.open(folder or "/", os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def _make_parents(self, parts: tuple[str, ...]) -> str:
        """Create the folders ``parts`` (and the root) as needed, each synced in its parent."""
        target = self._full(parts)
        if self.fs.isdir(target):
            return target
        folder = self.root
        if not self.fs.isdir(folder):
            self.fs.makedirs(folder, exist_ok=True)
        for name in parts:
            child = f"{folder}/{name}"
            if self.fs.isfile(child):
                raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), child)
            if not self.fs.isdir(child):
                self.fs.mkdir(child, create_parents=False)
                self._sync_folder(folder)
            folder = child
        return folder

    def _check_ancestors(self, parts: tuple[str, ...], path: str) -> None:
        """``NotADirectoryError`` if a leading component of ``path`` is a file (POSIX resolution)."""
        for i in range(1, len(parts) + 1):
            if self.fs.isfile(self._full(parts[:i])):
                raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), path)

    def _missing(self, parts: tuple[str, ...], path: str) -> OSError:
        """The error a POSIX read of a missing ``path`` raises: folder, below a file, or absent."""
        if self.fs.isdir(self._full(parts)):
            return IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
        try:
            self._check_ancestors(parts[:-1], path)
        except NotADirectoryError as exc:
            return exc
        return FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)


class _HashingSink:
    """What ``write_blob`` hands a producer: writes go to the temporary and into a SHA-256."""

    def __init__(self) -> None:
        self.file: Any = None
        self.sha = hashlib.sha256()
        self.size = 0

    def write(self, data: Any) -> int:
        view = byte_view(data)
        self.file.write(view)
        self.sha.update(view)
        self.size += view.nbytes
        return view.nbytes

    def flush(self) -> None:
        """Nothing is gathered here; the temporary is synced before its rename."""
