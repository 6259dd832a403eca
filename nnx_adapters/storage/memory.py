"""``MemoryStorage``: an in-memory model of a POSIX file system with crash and fault injection.

In the style of SQLite's crash tests, every public call is modelled as the same sequence of
primitive operations ``FileStorage`` performs (``mkdir``, ``create``, ``write``, ``append``,
``fsync``, ``rename``, ``link``, ``fsync_dir``, ``unlink``, ``rmdir``), each logged in ``log``.

The model keeps, per inode, a volatile and a durable state: file bytes become durable on
``fsync``; a folder's entries (name → inode) become durable on ``fsync_dir`` of that folder.
``crash_after(n)`` cuts the power after the n-th primitive operation: everything not durable
is lost (an unsynced append may leave a zero-filled tail), the store freezes and ``reopen()`` shows what a restarted machine would find.
``fail_on(n, error)`` makes the n-th operation raise ``error`` instead of happening.
"""

from __future__ import annotations

import collections
import errno
import hashlib
import io
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import attrs

from nnx_core.errors import RunLeaseError
from nnx_core.ports import Receipt
from nnx_adapters.storage.paths import (
    TMP_PREFIX,
    FolderSyncs,
    byte_view,
    check_run_id,
    is_reserved,
    lease_conflict_message,
    split_path,
    temporary_name,
)

# Log kinds as ``FileStorage.ops`` counts them.
_FS_OP_NAMES = {"fsync_dir": "fsync", "append": "write"}


class SimulatedCrash(BaseException):
    """The simulated machine lost power; a ``BaseException`` so ``except Exception`` can't eat it."""


@attrs.define
class _Inode:
    is_dir: bool
    data: bytes | dict[str, int]  # volatile: file bytes, or a folder's name -> inode entries
    durable: bytes | dict[str, int] | None  # None: file bytes never fsynced


@attrs.define
class _Injection:
    remaining: int
    error: BaseException | None  # None: a crash
    metadata_flushed: bool = False


def _join(parts: tuple[str, ...]) -> str:
    return "/".join(parts)


def _enoent(path: str) -> FileNotFoundError:
    return FileNotFoundError(errno.ENOENT, "No such file or directory", path)


def _enotdir(path: str) -> NotADirectoryError:
    return NotADirectoryError(errno.ENOTDIR, "Not a directory", path)


def _eisdir(path: str) -> IsADirectoryError:
    return IsADirectoryError(errno.EISDIR, "Is a directory", path)


class MemoryStorage:
    """The ``Storage`` port in memory, behaving like ``FileStorage`` on a POSIX file system.

    Test hooks: ``log`` (``(index, kind, path)`` per primitive operation), ``count_ops()``,
    ``crash_after(n)``, ``fail_on(n, error)``, ``disarm()``, ``crashed``, ``reopen()``,
    ``snapshot()``, ``durable_snapshot()`` and ``ops`` (the log counted as ``FileStorage.ops``).
    """

    def __init__(self) -> None:
        self._inodes: dict[int, _Inode] = {0: _Inode(is_dir=True, data={}, durable={})}
        self._next_ino = 1
        self._held: set[str] = set()
        self._crashed = False
        self._armed: _Injection | None = None
        self.log: list[tuple[int, str, str]] = []
        self._syncs = FolderSyncs(self._fsync_folder)  # type: ignore[arg-type]

    def __repr__(self) -> str:
        return f"{type(self).__name__}(<{len(self._inodes)} inodes{', crashed' if self._crashed else ''}>)"

    # -- test hooks --------------------------------------------------------------------------

    @property
    def crashed(self) -> bool:
        """Whether a simulated crash happened; every Storage call then raises ``SimulatedCrash``."""
        return self._crashed

    @property
    def ops(self) -> collections.Counter[str]:
        """The operations logged so far, counted under ``FileStorage.ops``' names."""
        return collections.Counter(_FS_OP_NAMES.get(kind, kind) for _, kind, _ in self.log)

    def count_ops(self) -> int:
        """How many primitive operations have happened (the length of ``log``)."""
        return len(self.log)

    def crash_after(self, n: int, *, metadata_flushed: bool = False) -> None:
        """Cut the power right after the n-th primitive operation from now (``0``: now).

        With ``metadata_flushed`` every folder's entries and file sizes are made durable first
        (as a journal commit just before the cut would): renames, creates and unlinks survive,
        file bytes that were never fsynced still do not — an unsynced append to a synced file
        keeps its length as zeros (a torn tail, as a ``data=writeback`` file system can leave it).
        """
        if n < 0:
            raise ValueError("crash_after needs n >= 0")
        if n == 0:
            self._power_cut(metadata_flushed)
            return
        self._armed = _Injection(n, None, metadata_flushed)

    def fail_on(self, n: int, error: BaseException) -> None:
        """Make the n-th primitive operation from now (1-based) raise ``error`` instead of happening."""
        if n < 1:
            raise ValueError("fail_on needs n >= 1")
        self._armed = _Injection(n, error)

    def disarm(self) -> None:
        """Clear a pending ``crash_after`` / ``fail_on``."""
        self._armed = None

    def reopen(self) -> MemoryStorage:
        """A fresh store holding only the durable state (what a restarted machine finds)."""
        other = MemoryStorage()
        other._inodes = {
            ino: _Inode(
                node.is_dir,
                dict(node.durable) if node.is_dir else (node.durable or b""),  # type: ignore[arg-type]
                dict(node.durable) if node.is_dir else (node.durable or b""),  # type: ignore[arg-type]
            )
            for ino, node in self._inodes.items()
        }
        other._next_ino = self._next_ino
        other._collect_garbage()
        return other

    def snapshot(self, *, include_temporaries: bool = False) -> dict[str, bytes]:
        """Path → bytes of every visible file (the volatile view)."""
        return self._walk(durable=False, include_temporaries=include_temporaries)

    def durable_snapshot(self, *, include_temporaries: bool = False) -> dict[str, bytes]:
        """Path → bytes of every file a crash now would leave (never-fsynced bytes read ``b""``)."""
        return self._walk(durable=True, include_temporaries=include_temporaries)

    # -- reading -----------------------------------------------------------------------------

    def read(self, path: str) -> bytes:
        """Return the file's bytes; ``FileNotFoundError`` when absent."""
        parts = split_path(path)
        self._check_alive()
        ino = self._lookup(parts)
        if ino is None:
            raise _enoent(path)
        node = self._inodes[ino]
        if node.is_dir:
            raise _eisdir(path)
        return node.data  # type: ignore[return-value]

    def exists(self, path: str) -> bool:
        """Whether a regular, non-temporary file exists at ``path`` (folders: ``False``)."""
        parts = split_path(path, reserved_ok=True)
        self._check_alive()
        if is_reserved(parts):
            return False
        try:
            ino = self._lookup(parts)
        except NotADirectoryError:
            return False
        return ino is not None and not self._inodes[ino].is_dir

    def list(self, folder: str) -> list[str]:
        """Sorted names directly in ``folder`` (``""``: the root), temporaries skipped."""
        parts = split_path(folder, root_ok=True)
        self._check_alive()
        ino = self._lookup(parts)
        if ino is None:
            return []
        entries = self._dir(ino, folder)
        return sorted(n for n in entries if not n.startswith(TMP_PREFIX))

    # -- writing -----------------------------------------------------------------------------

    def write(self, path: str, data: bytes | bytearray | memoryview, *, sha256: str | None = None) -> Receipt:
        """Atomically and durably replace ``path`` with ``data``; return its receipt."""
        parts = split_path(path)
        view = byte_view(data)
        digest = sha256 if sha256 is not None else hashlib.sha256(view).hexdigest()
        payload = bytes(view)
        self._check_alive()
        parent = self._make_parents(parts[:-1])
        self._durable_replace(parent, parts[:-1], temporary_name(parts[-1]), lambda: payload, lambda _: parts[-1])
        return Receipt(path, len(payload), digest)

    def digest(self, path: str) -> Receipt:
        """Size and SHA-256 of a file."""
        data = self.read(path)
        return Receipt(path, len(data), hashlib.sha256(data).hexdigest())

    def write_blob(self, folder: str, produce: Callable[[Any], None]) -> Receipt:
        """Stream ``produce(writer)`` into ``folder/<sha256>``; an existing blob is kept.

        The operations of ``FileStorage.write_blob``: the folder, then an owned temporary, filled
        by ``produce``, fsynced, then renamed onto its digest (or dropped when that blob exists).
        """
        parts = split_path(folder)
        self._check_alive()
        parent = self._make_parents(parts)
        produced: list[tuple[bytes, str]] = []  # (bytes, SHA-256) once produce returned

        def fill() -> bytes:
            buffer = io.BytesIO()
            produce(buffer)
            data = buffer.getvalue()
            produced.append((data, hashlib.sha256(data).hexdigest()))
            return data

        def target(_: bytes) -> str | None:
            name = produced[0][1]
            existing = self._dir(parent).get(name)
            return None if existing is not None and not self._inodes[existing].is_dir else name

        self._durable_replace(parent, parts, temporary_name("blob"), fill, target)
        data, digest = produced[0]
        return Receipt(f"{folder}/{digest}", len(data), digest)

    def _durable_replace(
        self,
        parent: int,
        folder: tuple[str, ...],
        tmp_name: str,
        fill: Callable[[], bytes],
        target: Callable[[bytes], str | None],
    ) -> None:
        """``FileStorage``'s durable-replace protocol: create an owned temporary in ``parent``,
        ``fill`` it, fsync it, rename it onto ``target(bytes)`` (None: that content is already
        there, drop the temporary), fsync the folder. On failure the temporary is removed."""
        tmp_path = _join((*folder, tmp_name))
        tmp = self._create(parent, tmp_name, tmp_path)
        settled = False
        try:
            payload = fill()
            self._op("write", tmp_path, lambda: self._set_bytes(tmp, payload))
            self._op("fsync", tmp_path, lambda: self._fsync(tmp))
            name = target(payload)
            if name is None:
                self._op("unlink", tmp_path, lambda: self._dir(parent).pop(tmp_name))
                settled = True
            else:
                path = _join((*folder, name))
                self._op("rename", path, lambda: self._rename(parent, tmp_name, name, path))
                settled = True
                self._syncs.after_change((parent, folder))
        except BaseException:
            if not settled and not self._crashed:
                try:
                    self._op("unlink", tmp_path, lambda: self._dir(parent).pop(tmp_name))
                except Exception:  # best effort, like FileStorage
                    pass
            raise

    def append(self, path: str, data: bytes | bytearray | memoryview) -> None:
        """Append ``data`` to ``path`` (created, with its folders, if absent) and fsync it."""
        parts = split_path(path)
        payload = bytes(byte_view(data))
        self._check_alive()
        parent = self._make_parents(parts[:-1])
        ino = self._dir(parent).get(parts[-1])
        created = ino is None
        if ino is None:
            ino = self._create(parent, parts[-1], path)
        elif self._inodes[ino].is_dir:
            raise _eisdir(path)
        elif self._links(ino) > 1:  # shares its bytes with a copy: replaced, the copy kept as it was
            self.write(path, self._inodes[ino].data + payload)  # type: ignore[operator]
            return
        target = ino
        self._op("append", path, lambda: self._set_bytes(target, self._inodes[target].data + payload))  # type: ignore[operator]
        self._op("fsync", path, lambda: self._fsync(target))
        if created:
            self._op("fsync_dir", _join(parts[:-1]), lambda: self._fsync(parent))

    def copy(self, source: str, destination: str) -> None:
        """``FileStorage.copy``: a hard link of ``source``'s inode to an owned temporary beside
        ``destination``, renamed over it; the folder fsync as in ``write`` (deferred in a group)."""
        source_parts = split_path(source)
        self._check_alive()
        origin = self._lookup(source_parts)
        if origin is None:
            raise _enoent(source)
        if self._inodes[origin].is_dir:
            raise _eisdir(source)
        parts = split_path(destination)
        parent = self._make_parents(parts[:-1])
        if self._dir(parent).get(parts[-1]) == origin:
            return  # already the same file
        tmp_name = temporary_name(parts[-1])
        tmp_path = _join((*parts[:-1], tmp_name))
        self._op("link", tmp_path, lambda: self._dir(parent).__setitem__(tmp_name, origin))
        try:
            self._op("rename", destination, lambda: self._rename(parent, tmp_name, parts[-1], destination))
        except BaseException:
            if not self._crashed:
                try:
                    self._op("unlink", tmp_path, lambda: self._dir(parent).pop(tmp_name))
                except Exception:  # best effort, like FileStorage
                    pass
            raise
        self._syncs.after_change((parent, parts[:-1]))

    def delete(self, path: str) -> None:
        """Remove a file if it exists, then fsync its folder; a missing file is fine."""
        parts = split_path(path)
        self._check_alive()
        ino = self._lookup(parts)
        if ino is None:
            return
        if self._inodes[ino].is_dir:
            raise _eisdir(path)
        parent = self._lookup(parts[:-1])
        assert parent is not None
        self._op("unlink", path, lambda: self._dir(parent).pop(parts[-1]))
        self._syncs.after_change((parent, parts[:-1]))

    def sync_group(self) -> AbstractContextManager[None]:
        """``FileStorage.sync_group``: the folder fsyncs of the writes and removals inside happen
        once per folder, in the order first changed, when the group exits normally."""
        return self._syncs.group()

    def _fsync_folder(self, folder: tuple[int, tuple[str, ...]]) -> None:
        ino, parts = folder
        self._op("fsync_dir", _join(parts), lambda ino=ino: self._fsync(ino))

    def remove_tree(self, folder: str) -> None:
        """Remove ``folder`` and everything under it, then fsync its parent; missing is fine."""
        parts = split_path(folder)
        self._check_alive()
        ino = self._lookup(parts)
        if ino is None:
            return
        if not self._inodes[ino].is_dir:
            raise _enotdir(folder)
        parent = self._lookup(parts[:-1])
        assert parent is not None
        self._rmtree(parent, parts)
        self._op("fsync_dir", _join(parts[:-1]), lambda: self._fsync(parent))

    def rename_folder(self, source: str, destination: str) -> None:
        """``FileStorage.rename_folder``: one ``rename`` moving the folder's entry to its new name in
        the parent, then ``fsync_dir`` of the parent. A power cut between the two loses the rename
        (the parent's entries become durable on its fsync): the folder is found under its old name."""
        parts, target = split_path(source), split_path(destination)
        if parts[:-1] != target[:-1]:
            raise ValueError(
                f"rename_folder renames within one folder: {source!r} and {destination!r} have different parents"
            )
        self._check_alive()
        ino = self._lookup(parts)
        if ino is None:
            raise _enoent(source)
        if not self._inodes[ino].is_dir:
            raise _enotdir(source)
        parent = self._lookup(parts[:-1])
        assert parent is not None
        entries = self._dir(parent)
        if target[-1] in entries:
            raise FileExistsError(errno.EEXIST, "File exists", destination)

        def move() -> None:
            entries[target[-1]] = entries.pop(parts[-1])

        self._op("rename", destination, move)
        self._op("fsync_dir", _join(parts[:-1]), lambda: self._fsync(parent))

    def temporaries(self, folder: str) -> list[str]:
        """Store paths of every ``.tmp-*`` file under ``folder`` (``""``: the root), sorted."""
        return sorted(path for _, paths in self._temporaries(folder) for _, path in paths)

    def clean_temporaries(self, folder: str) -> int:
        """Delete every ``.tmp-*`` file under ``folder`` (``""``: the root); return the count."""
        removed = 0
        for (ino, parts), paths in self._temporaries(folder):
            for name, path in paths:
                self._op("unlink", path, lambda n=name, ino=ino: self._dir(ino).pop(n))
            self._op("fsync_dir", _join(parts), lambda ino=ino: self._fsync(ino))
            removed += len(paths)
        return removed

    # -- lease -------------------------------------------------------------------------------

    @contextmanager
    def lease(self, run_id: str) -> Iterator[None]:
        """Hold the run's lease in this store; ``RunLeaseError`` at once if already held."""
        check_run_id(run_id)
        self._check_alive()
        if run_id in self._held:
            raise RunLeaseError(lease_conflict_message(run_id))
        self._held.add(run_id)
        try:
            yield
        finally:
            self._held.discard(run_id)

    # -- primitive operations ----------------------------------------------------------------

    def _op(self, kind: str, path: str, action: Callable[[], object]) -> None:
        """Run one primitive operation under the armed injection and log it."""
        self._check_alive()
        injection = self._armed
        if injection is not None:
            injection.remaining -= 1
            if injection.remaining == 0 and injection.error is not None:
                self._armed = None
                raise injection.error
        try:
            action()
            self.log.append((len(self.log) + 1, kind, path))
        finally:
            if injection is not None and injection.error is None and injection.remaining == 0:
                self._power_cut(injection.metadata_flushed)
                raise SimulatedCrash(f"simulated crash after operation {len(self.log)}: {kind} {path}")

    def _create(self, parent: int, name: str, path: str) -> int:
        ino = self._next_ino

        def action() -> None:
            self._next_ino += 1
            self._inodes[ino] = _Inode(is_dir=False, data=b"", durable=None)
            self._dir(parent)[name] = ino

        self._op("create", path, action)
        return ino

    def _mkdir(self, parent: int, name: str, path: str) -> int:
        ino = self._next_ino

        def action() -> None:
            self._next_ino += 1
            self._inodes[ino] = _Inode(is_dir=True, data={}, durable={})
            self._dir(parent)[name] = ino

        self._op("mkdir", path, action)
        return ino

    def _links(self, ino: int) -> int:
        """How many folder entries name ``ino`` (its link count)."""
        folders = (node.data for node in self._inodes.values() if node.is_dir)
        return sum(1 for entries in folders for child in entries.values() if child == ino)  # type: ignore[union-attr]

    def _set_bytes(self, ino: int, data: bytes) -> None:
        self._inodes[ino].data = data

    def _fsync(self, ino: int) -> None:
        node = self._inodes[ino]
        node.durable = dict(node.data) if node.is_dir else node.data  # type: ignore[arg-type]

    def _rename(self, parent: int, old: str, new: str, path: str) -> None:
        entries = self._dir(parent)
        existing = entries.get(new)
        if existing is not None and self._inodes[existing].is_dir:
            raise _eisdir(path)
        entries[new] = entries.pop(old)

    # -- helpers -----------------------------------------------------------------------------

    def _check_alive(self) -> None:
        if self._crashed:
            raise SimulatedCrash("the store crashed; call reopen() for what survived")

    def _dir(self, ino: int, path: str = "") -> dict[str, int]:
        node = self._inodes[ino]
        if not node.is_dir:
            raise _enotdir(path)
        return node.data  # type: ignore[return-value]

    def _lookup(self, parts: tuple[str, ...]) -> int | None:
        """Inode at ``parts`` (volatile view); ``None`` if missing, ``NotADirectoryError``
        when a leading component is a file — as POSIX path resolution does."""
        ino = 0
        for i, name in enumerate(parts):
            child = self._dir(ino, _join(parts[:i])).get(name)
            if child is None:
                return None
            ino = child
        return ino

    def _make_parents(self, parts: tuple[str, ...]) -> int:
        """Create the folders ``parts`` as needed, each made durable in its parent."""
        ino = 0
        for i, name in enumerate(parts):
            child = self._dir(ino).get(name)
            if child is None:
                child = self._mkdir(ino, name, _join(parts[: i + 1]))
                parent = ino
                self._op("fsync_dir", _join(parts[:i]), lambda parent=parent: self._fsync(parent))
            elif not self._inodes[child].is_dir:
                raise _enotdir(_join(parts[: i + 1]))
            ino = child
        return ino

    def _rmtree(self, parent: int, parts: tuple[str, ...]) -> None:
        ino = self._dir(parent)[parts[-1]]
        for name in sorted(self._dir(ino)):
            child = self._dir(ino)[name]
            if self._inodes[child].is_dir:
                self._rmtree(ino, (*parts, name))
            else:
                self._op("unlink", _join((*parts, name)), lambda n=name: self._dir(ino).pop(n))
        self._op("rmdir", _join(parts), lambda: self._dir(parent).pop(parts[-1]))

    def _temporaries(self, folder: str) -> list[tuple[tuple[int, tuple[str, ...]], list[tuple[str, str]]]]:
        """``((folder inode, its parts), [(name, store path) of its temporaries])`` for each
        folder under ``folder`` holding any."""
        parts = split_path(folder, root_ok=True)
        self._check_alive()
        ino = self._lookup(parts)
        if ino is None:
            return []
        self._dir(ino, folder)  # NotADirectoryError for a file
        found = []
        stack = [(ino, parts)]
        while stack:
            here, here_parts = stack.pop()
            names = []
            for name, child in sorted(self._dir(here).items()):
                if self._inodes[child].is_dir:
                    stack.append((child, (*here_parts, name)))
                elif name.startswith(TMP_PREFIX):
                    names.append((name, _join((*here_parts, name))))
            if names:
                found.append(((here, here_parts), names))
        return found

    def _power_cut(self, metadata_flushed: bool) -> None:
        """Drop everything not durable and freeze the store."""
        for node in self._inodes.values():
            if node.is_dir:
                if metadata_flushed:
                    node.durable = dict(node.data)  # type: ignore[arg-type]
                node.data = dict(node.durable)  # type: ignore[arg-type]
            else:
                if node.durable is None:
                    node.durable = b""  # a torn, never-fsynced file
                elif metadata_flushed and len(node.data) > len(node.durable) and node.data.startswith(node.durable):  # type: ignore[arg-type,union-attr]
                    node.durable += b"\0" * (len(node.data) - len(node.durable))  # type: ignore[arg-type,operator]  # an unsynced append: its size, not its bytes
                node.data = node.durable
        self._collect_garbage()
        self._armed = None
        self._crashed = True

    def _collect_garbage(self) -> None:
        """Forget inodes no durable folder entry reaches."""
        reachable, stack = set(), [0]
        while stack:
            ino = stack.pop()
            reachable.add(ino)
            node = self._inodes[ino]
            if node.is_dir:
                stack.extend(node.durable.values())  # type: ignore[union-attr]
        self._inodes = {i: n for i, n in self._inodes.items() if i in reachable}

    def _walk(self, *, durable: bool, include_temporaries: bool) -> dict[str, bytes]:
        files: dict[str, bytes] = {}
        stack: list[tuple[int, tuple[str, ...]]] = [(0, ())]
        while stack:
            ino, parts = stack.pop()
            node = self._inodes[ino]
            entries = node.durable if durable else node.data
            for name, child in entries.items():  # type: ignore[union-attr]
                if name.startswith(TMP_PREFIX) and not include_temporaries:
                    continue
                sub = self._inodes[child]
                if sub.is_dir:
                    stack.append((child, (*parts, name)))
                else:
                    content = sub.durable if durable else sub.data
                    files[_join((*parts, name))] = content or b""  # type: ignore[assignment]
        return dict(sorted(files.items()))
