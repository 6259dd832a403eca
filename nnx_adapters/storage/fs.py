"""``FileStorage``: the ``Storage`` port on a real POSIX file system.

Every mutation follows the classic durable-replace protocol (create an owned temporary in the
same folder, write, fsync, rename, fsync the folder) and counts the file-system operations it
makes in ``FileStorage.ops``. ``nnx_adapters.storage.memory.MemoryStorage`` models exactly the
same sequence of operations so crash tests on the model say something about this adapter.
"""

from __future__ import annotations

import collections
import errno
import fcntl
import hashlib
import mmap
import os
import queue
import stat
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, suppress
from typing import Any

import portalocker

from nnx_core.errors import RunLeaseError
from nnx_core.ports import BackgroundProducer, Receipt, SizedProducer
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

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
# link(2) errors that mean "this file system has no hard links here": copy the bytes instead
_NO_HARD_LINKS = {errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EXDEV, errno.EMLINK, errno.ENOSYS}

# (resolved root, run id) of every lease held by a FileStorage in this process → its locked file.
_HELD: dict[tuple[str, str], Any] = {}
_HELD_GUARD = threading.Lock()


def _drop_leases_in_child() -> None:
    """In a forked child (a DataLoader's worker): close its copies of the locked lease files and
    forget them. A ``flock`` belongs to the open file, which a fork shares, so a child that kept its
    copy would hold the run's lease after its parent died (workers outlive a SIGKILLed parent by
    seconds). Closing a copy never unlocks the parent's: only the last copy's close, or an
    explicit unlock, does."""
    global _HELD_GUARD
    _HELD_GUARD = threading.Lock()  # a thread of the parent may have held it at the fork
    for handle in _HELD.values():
        if handle is not None:
            with suppress(OSError):
                handle.close()
    _HELD.clear()


os.register_at_fork(after_in_child=_drop_leases_in_child)


# errno values of a lease file that cannot be created or opened for writing: a read-only root
_NOT_WRITABLE = frozenset({errno.EROFS, errno.EACCES, errno.EPERM})


@contextmanager
def flock_lease(root: str, run_id: str, *, run_folder: str | None = None) -> Iterator[None]:
    """The run lease of every store on a local folder ``root``: ``<root>/.leases/<run_id>.lock``
    held with ``flock`` (other processes) and a registry of this process's held leases (other
    handles in this process). ``RunLeaseError`` at once if either says it is taken.

    On a read-only root an existing lease file is locked through a read-only handle (``flock``
    needs no write access), so a finished run can be returned from an archive; without one the
    lease cannot be taken (``RunLeaseError`` naming the read-only root). Given the run's folder
    ``run_folder``, a lease file this lease created — and the root's folders it created — are
    removed again on release when that folder does not exist then: a call refused under the lease
    leaves nothing behind. A holder verifies after locking that its file is still the one the path
    names (one removed meanwhile is taken afresh)."""
    check_run_id(run_id)
    key = (os.path.realpath(root), run_id)
    with _HELD_GUARD:
        if key in _HELD:
            raise RunLeaseError(lease_conflict_message(run_id))
        _HELD[key] = None
    try:
        handle, made = _take_lease_file(root, run_id)
        with _HELD_GUARD:
            _HELD[key] = handle
        try:
            yield
        finally:
            try:
                if made and run_folder is not None and not os.path.lexists(run_folder):  # nothing of the run written
                    _remove_made(made)
            finally:
                if not handle.closed:  # closed: this is a forked child, which never held it
                    try:
                        portalocker.unlock(handle)
                    finally:
                        handle.close()
    finally:
        with _HELD_GUARD:
            _HELD.pop(key, None)


def _take_lease_file(root: str, run_id: str) -> tuple[Any, list[str]]:
    """The lease file, open and ``flock``ed, and what taking it created (the file, then the lease
    folder and the root's folders when the root did not exist), to remove on release."""
    folder = os.path.join(root, LEASE_FOLDER)
    path = os.path.join(folder, f"{run_id}.lock")
    for _ in range(16):  # a releasing holder may remove the file (or the folders) between our steps
        made = [folder, *_missing_folders(root)] if not os.path.isdir(root) else []
        try:
            os.makedirs(folder, exist_ok=True)
            handle, created = _open_lease_file(path)
        except FileNotFoundError:
            continue
        except OSError as exc:
            if exc.errno not in _NOT_WRITABLE:
                raise
            raise RunLeaseError(
                f"run {run_id!r}: its lease file {path} cannot be created ({exc.strerror}): the runs root is read-only "
                f"(or not writable by this user), so this call cannot hold the run's lease. Nothing was written. Read "
                f"the run with nnx.NNRun.load({run_id!r}, root) (readers take no lease); to train, make the root "
                "writable or pass another root"
            ) from exc
        try:
            portalocker.lock(handle, portalocker.LOCK_EX | portalocker.LOCK_NB)
        except portalocker.LockException:
            handle.close()
            raise RunLeaseError(lease_conflict_message(run_id)) from None
        if _names(path, handle):
            return handle, [path, *made] if created else []
        portalocker.unlock(handle)  # its holder removed it before we locked it: take the file the path names now
        handle.close()
    raise RunLeaseError(lease_conflict_message(run_id))


def _missing_folders(folder: str) -> list[str]:
    """``folder`` and those of its parents that do not exist, deepest first."""
    missing = []
    while folder and not os.path.lexists(folder) and os.path.dirname(folder) != folder:
        missing.append(folder)
        folder = os.path.dirname(folder)
    return missing


def _open_lease_file(path: str) -> tuple[Any, bool]:
    """``(handle, created)``: an existing lease file for writing (read-only when the root cannot be
    written), else a new one. One open in the common cases, none that fails on purpose: every
    open is a file event a crash test can stop the process at."""
    if os.path.exists(path):
        try:
            return open(path, "a+b"), False  # noqa: SIM115
        except FileNotFoundError:
            pass  # removed by its releasing holder meanwhile: create it
        except OSError as exc:
            if exc.errno not in _NOT_WRITABLE:
                raise
            return open(path, "rb"), False  # noqa: SIM115  # a read-only root: flock needs no write access
    try:
        return open(path, "xb"), True  # noqa: SIM115
    except FileExistsError:
        return open(path, "a+b"), False  # noqa: SIM115  # created by another taker meanwhile


def _names(path: str, handle: Any) -> bool:
    """Whether ``path`` still names the open file ``handle``."""
    try:
        here, there = os.stat(path), os.fstat(handle.fileno())
    except FileNotFoundError:
        return False
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


def _remove_made(made: list[str]) -> None:
    """Remove the lease file, then the folders, this lease created (a folder another lease uses
    meanwhile is not empty and stays)."""
    for path in made:
        with suppress(OSError):
            if path == made[0]:
                os.unlink(path)
            else:
                os.rmdir(path)


def _write_all(fd: int, view: memoryview) -> None:
    while view:
        written = os.write(fd, view)
        view = view[written:]


_CHUNK_BYTES = 1 << 20


class _HashingWriter:
    """A write-only sink onto a file descriptor that also yields the SHA-256 of what it wrote.

    Small writes are gathered into one buffer (torch.save makes hundreds of them). A payload
    under ``_CHUNK_BYTES`` is hashed on the calling thread. A larger one is hashed by a helper
    thread that reads the file's bytes back from the page cache behind the writes (its own
    descriptor, ``pread``): writing never waits for hashing, and the hash keeps running while
    the caller fsyncs the file. ``hexdigest`` waits for it. What is hashed is what the file holds.
    """

    def __init__(self) -> None:
        self.fd = -1
        self.size = 0
        self._buffer = bytearray()
        self._sha = hashlib.sha256()
        self._digest: str | None = None
        self._trail: _TrailingHash | None = None
        self._inline = 0  # bytes hashed on the calling thread (the head of the file)

    def _emit(self, view: memoryview) -> None:
        if self._trail is None:
            self._trail = _TrailingHash(self.fd, self._sha, start=self._inline)
        _write_all(self.fd, view)
        self._trail.advance(view.nbytes)

    def write(self, data: Any) -> int:
        view = byte_view(data)
        if view.nbytes >= _CHUNK_BYTES:
            self.flush()
            self._emit(view)
        else:
            self._buffer += view
            if len(self._buffer) >= _CHUNK_BYTES:
                self.flush()
        self.size += view.nbytes
        return view.nbytes

    def flush(self) -> None:
        """Write out the gathered small writes."""
        if not self._buffer:
            return
        if self._trail is None and self.size < _CHUNK_BYTES:  # the whole payload is small so far
            self._sha.update(self._buffer)
            _write_all(self.fd, memoryview(self._buffer))
            self._inline += len(self._buffer)
        else:
            self._emit(memoryview(self._buffer))
        self._buffer = bytearray()

    def hexdigest(self) -> str:
        """The SHA-256 of everything written (waits for the helper thread)."""
        if self._digest is None:
            self.flush()
            if self._trail is not None:
                self._trail.finish()
            self._digest = self._sha.hexdigest()
        return self._digest

    def close(self) -> None:
        """Stop the helper thread (after a failure); idempotent."""
        if self._trail is not None:
            self._trail.finish(check=False)


class _LeanWriter:
    """The sink of a background commit's blob (``BackgroundProducer``): written while training
    goes on, so with the least of the machine rather than in the least time.

    One thread: the bytes are gathered into a page-aligned chunk, each full chunk is hashed there
    (while it is in the cache) and written straight to the device (``O_DIRECT``), around the page
    cache: no page-cache copy, no page allocation, almost no kernel time per byte. A file system
    that refuses ``O_DIRECT``, or a write that ends off the alignment (the last chunk, a
    producer's ``flush``), goes through the page cache from then on. The caller's fsync makes it
    durable either way (the file's size and the tail). What is hashed is what is written.
    """

    def __init__(self) -> None:
        self.fd = -1
        self.size = 0
        self._sha = hashlib.sha256()
        self._view = memoryview(mmap.mmap(-1, _CHUNK_BYTES))  # page-aligned, as O_DIRECT needs
        self._used = 0
        self._direct: bool | None = None  # None: not tried yet

    def write(self, data: Any) -> int:
        view = byte_view(data)
        n = view.nbytes
        while view:
            take = min(view.nbytes, _CHUNK_BYTES - self._used)
            self._view[self._used : self._used + take] = view[:take]
            self._used += take
            view = view[take:]
            if self._used == _CHUNK_BYTES:
                self._emit()
        self.size += n
        return n

    def flush(self) -> None:
        """Hash and write the gathered bytes."""
        self._emit()

    def _emit(self) -> None:
        if not self._used:
            return
        chunk = self._view[: self._used]
        self._sha.update(chunk)
        self._put(chunk)
        self._used = 0

    def _put(self, chunk: memoryview) -> None:
        """Write one gathered chunk (direct while it keeps the alignment)."""
        if self._direct is None:
            self._direct = _set_direct(self.fd, True)
        if self._direct and chunk.nbytes % _DIRECT_ALIGN:  # off the alignment: the page cache from here on
            self._direct = not _set_direct(self.fd, False)
        while chunk:
            try:
                written = os.write(self.fd, chunk)
            except OSError as exc:
                if not self._direct or exc.errno != errno.EINVAL:
                    raise
                self._direct = not _set_direct(self.fd, False)  # the device wants another alignment
                continue
            chunk = chunk[written:]

    def hexdigest(self) -> str:
        """The SHA-256 of everything written."""
        self.flush()
        return self._sha.hexdigest()

    def close(self) -> None:
        """Nothing to stop (no helper thread): the chunk is freed with the writer, not closed here,
        since a failed write's traceback may still hold a view of it."""


class _PipelinedWriter(_LeanWriter):
    """The sink of a large blob written while training waits (a synchronous commit of a state of
    ``_DIRECT_BLOB_BYTES`` or more): ``_LeanWriter``'s chunks, hashed and written around the page
    cache, but each full chunk is written by a helper thread while the next one is gathered and
    hashed (two chunks, swapped): the least time. Measured inside ``train()`` on the 2-vCPU VM:
    a 500 MB commit 0.45–0.71 s, against 1.0–1.5 s through the page cache with a helper hashing
    behind the writes, which stays the faster below about 100 MB. A write's failure is raised by
    the next ``flush`` or ``hexdigest``; ``close`` stops the helper, whatever happened.
    """

    def __init__(self) -> None:
        super().__init__()
        self._spare: memoryview | None = None  # the other chunk, once a second one is needed
        self._helper: threading.Thread | None = None
        self._todo: queue.SimpleQueue[memoryview | None] = queue.SimpleQueue()
        self._done: queue.SimpleQueue[BaseException | None] = queue.SimpleQueue()
        self._in_flight = False

    def flush(self) -> None:
        """Hash and write the gathered bytes; return once every chunk handed over is written."""
        self._emit()
        self._settle()

    def _emit(self) -> None:
        """Hash the gathered bytes and hand them to the helper (a blob's only chunk, shorter than
        a chunk, is written here: no helper for a small blob)."""
        if not self._used:
            return
        chunk = self._view[: self._used]
        self._sha.update(chunk)
        if self._spare is None and self._used < _CHUNK_BYTES:
            self._put(chunk)
            self._used = 0
            return
        if self._spare is None:
            self._spare = memoryview(mmap.mmap(-1, _CHUNK_BYTES))
            self._helper = threading.Thread(target=self._write_handed, name="nnx-blob-write", daemon=True)
            self._helper.start()
        self._settle()  # the chunk before is written: its buffer is free for the next bytes
        self._todo.put(chunk)
        self._in_flight = True
        self._view, self._spare = self._spare, self._view
        self._used = 0

    def _write_handed(self) -> None:
        while (chunk := self._todo.get()) is not None:
            try:
                self._put(chunk)
            except BaseException as exc:  # raised on the caller's thread by _settle
                self._done.put(exc)
            else:
                self._done.put(None)

    def _settle(self) -> None:
        """Wait for the chunk in flight; raise its write's failure."""
        if self._in_flight:
            self._in_flight = False
            error = self._done.get()
            if error is not None:
                raise error

    def hexdigest(self) -> str:
        """The SHA-256 of everything written (every chunk's write ended)."""
        self.flush()
        return self._sha.hexdigest()

    def close(self) -> None:
        """Wait for the chunk in flight (its failure already raised or dropped) and stop the helper."""
        if self._helper is not None:
            try:
                with suppress(Exception):
                    self._settle()
            finally:
                self._todo.put(None)
                self._helper.join()
                self._helper = None


_DIRECT_ALIGN = 4096  # O_DIRECT's offsets and lengths: a multiple of the device's logical block size
_DIRECT_BLOB_BYTES = 100_000_000  # a synchronous blob this large is written by _PipelinedWriter (measured: 80 MB
# still faster through the page cache, 120 MB 2.7 x faster around it)


def _set_direct(fd: int, on: bool) -> bool:
    """Turn ``O_DIRECT`` on or off for ``fd``; whether that was done (False where the platform or
    the file system has no direct I/O)."""
    direct = getattr(os, "O_DIRECT", 0)
    if not direct:
        return False
    try:
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        fcntl.fcntl(fd, fcntl.F_SETFL, flags | direct if on else flags & ~direct)
    except OSError:
        return False
    return True


class _TrailingHash:
    """Hashes a file's bytes ``[start, written)`` on a helper thread as the writer advances."""

    def __init__(self, fd: int, sha: Any, *, start: int) -> None:
        self._fd = os.dup(fd)
        self._sha = sha
        self._start = start
        self._written = start
        self._final = False
        self._error: BaseException | None = None
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="nnx-sha256", daemon=True)
        self._thread.start()

    def advance(self, nbytes: int) -> None:
        with self._cond:
            self._written += nbytes
            self._cond.notify()

    def finish(self, *, check: bool = True) -> None:
        with self._cond:
            self._final = True
            self._cond.notify()
        self._thread.join()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        if check and self._error is not None:
            raise self._error

    def _run(self) -> None:
        buffer = memoryview(bytearray(_CHUNK_BYTES))
        hashed = self._start
        try:
            while True:
                with self._cond:
                    while hashed >= self._written and not self._final:
                        self._cond.wait()
                    target = self._written
                if hashed >= target:
                    return
                while hashed < target:
                    n = os.preadv(self._fd, [buffer[: min(_CHUNK_BYTES, target - hashed)]], hashed)
                    if n <= 0:
                        raise OSError(errno.EIO, f"short read while hashing a blob at byte {hashed}")
                    self._sha.update(buffer[:n])
                    hashed += n
        except BaseException as exc:  # noqa: BLE001 — reported by finish()
            self._error = exc


class FileStorage:
    """A run store rooted at a folder on a local POSIX file system.

    ``ops`` counts the file-system operations performed: ``create``, ``write``, ``fsync`` (files
    and folders), ``rename`` (files and folders), ``link``, ``unlink``, ``mkdir`` and ``rmdir``. The root folder is created on
    the first mutation.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = os.path.abspath(os.fspath(root))
        self.ops: collections.Counter[str] = collections.Counter()
        self._root_ready = False
        self._syncs = FolderSyncs(self._fsync_dir)  # type: ignore[arg-type]

    def __repr__(self) -> str:
        return f"FileStorage({self.root!r})"

    # -- reading -----------------------------------------------------------------------------

    def read(self, path: str) -> bytes:
        """Return the file's bytes; ``FileNotFoundError`` when absent."""
        with open(self._abs(split_path(path)), "rb") as f:
            return f.read()

    def digest(self, path: str) -> Receipt:
        """Size and SHA-256 of a file, hashed through a read-only memory map (no copy)."""
        with open(self._abs(split_path(path)), "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size == 0:
                return Receipt(path, 0, hashlib.sha256(b"").hexdigest())
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
                return Receipt(path, size, hashlib.sha256(mapped).hexdigest())

    def exists(self, path: str) -> bool:
        """Whether a regular, non-temporary file exists at ``path`` (folders: ``False``)."""
        parts = split_path(path, reserved_ok=True)
        return not is_reserved(parts) and os.path.isfile(self._abs(parts))

    def list(self, folder: str) -> list[str]:
        """Sorted names directly in ``folder`` (``""``: the root), temporaries skipped."""
        parts = split_path(folder, root_ok=True)
        try:
            names = os.listdir(self._abs(parts))
        except FileNotFoundError:
            return []
        return sorted(
            n for n in names if not n.startswith(TMP_PREFIX) and (parts or n != LEASE_FOLDER)
        )

    # -- writing -----------------------------------------------------------------------------

    def write(self, path: str, data: bytes | bytearray | memoryview, *, sha256: str | None = None) -> Receipt:
        """Atomically and durably replace ``path`` with ``data``; return its receipt.

        On failure the temporary is removed and the original error re-raised; the destination
        keeps its previous bytes (unless only the final folder fsync failed: then the new bytes
        are visible but not known durable). ``sha256``, when the caller already hashed ``data``,
        is used for the receipt instead of hashing again.
        """
        parts = split_path(path)
        view = byte_view(data)
        digest = sha256 if sha256 is not None else hashlib.sha256(view).hexdigest()
        folder = self._make_parents(parts[:-1])
        self._durable_replace(folder, temporary_name(parts[-1]), lambda fd: _write_all(fd, view), lambda: self._abs(parts))
        return Receipt(path, view.nbytes, digest)

    def write_stream(self, path: str, produce: Callable[[Any], None]) -> Receipt:
        """Atomically and durably replace ``path`` with what ``produce(writer)`` writes, streamed
        (bounded memory): the protocol of :meth:`write` — owned temporary, fsync, rename, fsync the
        folder. Not part of the ``Storage`` port: exports to a file of the user's choosing use it."""
        parts = split_path(path)
        folder = self._make_parents(parts[:-1])
        writer = _HashingWriter()

        def fill(fd: int) -> None:
            writer.fd = fd
            produce(writer)
            writer.flush()

        try:
            self._durable_replace(folder, temporary_name(parts[-1]), fill, lambda: self._abs(parts), readable=True)
        finally:
            writer.close()
        return Receipt(path, writer.size, writer.hexdigest())

    def write_blob(self, folder: str, produce: Callable[[Any], None]) -> Receipt:
        """Stream ``produce(writer)`` into ``folder/<sha256>``: hashed alongside the write
        (``_HashingWriter``), a background commit's blob with the least of the machine
        (``_LeanWriter``), or a large one (a ``SizedProducer`` of ``_DIRECT_BLOB_BYTES`` or more)
        in the least time (``_PipelinedWriter``).

        Same protocol as :meth:`write`: owned temporary, fsync, rename onto the digest name, fsync
        the folder. A blob already present under that digest is kept; the temporary is dropped.
        """
        directory = self._make_parents(split_path(folder))
        writer: _HashingWriter | _LeanWriter
        if isinstance(produce, BackgroundProducer):
            writer = _LeanWriter()
        elif isinstance(produce, SizedProducer) and produce.size >= _DIRECT_BLOB_BYTES:
            writer = _PipelinedWriter()
        else:
            writer = _HashingWriter()

        def fill(fd: int) -> None:
            writer.fd = fd
            produce(writer)
            writer.flush()

        def target() -> str | None:
            path = os.path.join(directory, writer.hexdigest())
            return None if os.path.isfile(path) else path

        try:
            self._durable_replace(directory, temporary_name("blob"), fill, target, readable=True)
        finally:
            writer.close()
        digest = writer.hexdigest()
        return Receipt(f"{folder}/{digest}", writer.size, digest)

    def _durable_replace(
        self,
        directory: str,
        tmp_name: str,
        fill: Callable[[int], None],
        target: Callable[[], str | None],
        *,
        readable: bool = False,
    ) -> None:
        """The durable-replace protocol of every write: create an owned temporary in ``directory``,
        ``fill`` it, fsync it, rename it onto ``target()`` (None: identical content is already
        there, drop the temporary), fsync the folder. On failure the temporary is removed and the
        original error re-raised."""
        tmp = os.path.join(directory, tmp_name)
        mode = os.O_RDWR if readable else os.O_WRONLY  # readable: the blob hasher reads it back
        fd = os.open(tmp, os.O_CREAT | os.O_EXCL | mode | _O_CLOEXEC, 0o644)
        self.ops["create"] += 1
        settled = False
        try:
            self._fill_sync_close(fd, fill)
            destination = target()
            if destination is None:
                os.unlink(tmp)
                self.ops["unlink"] += 1
                settled = True
            else:
                os.replace(tmp, destination)
                self.ops["rename"] += 1
                settled = True
                self._syncs.after_change(directory)
        except BaseException:
            if not settled:
                with suppress(OSError):
                    os.unlink(tmp)
                    self.ops["unlink"] += 1
            raise

    def append(self, path: str, data: bytes | bytearray | memoryview) -> None:
        """Append ``data`` to ``path`` (created, with its folders, if absent) and fsync it. A file
        sharing its bytes with a :meth:`copy` is replaced instead (:meth:`write`), leaving the copy."""
        parts = split_path(path)
        view = byte_view(data)
        folder = self._make_parents(parts[:-1])
        target = self._abs(parts)
        flags = os.O_WRONLY | os.O_APPEND | _O_CLOEXEC
        try:  # the common case first: one open of the existing file
            fd = os.open(target, flags)
            created = False
        except FileNotFoundError:
            fd = os.open(target, flags | os.O_CREAT | os.O_EXCL, 0o644)
            created = True
            self.ops["create"] += 1
        if not created and os.fstat(fd).st_nlink > 1:  # shares its bytes with a copy: replaced, the copy kept
            os.close(fd)
            self.write(path, self.read(path) + view)
            return
        self._fill_sync_close(fd, lambda fd: _write_all(fd, view))
        if created:
            self._fsync_dir(folder)

    def copy(self, source: str, destination: str) -> None:
        """Durably replace ``destination`` with ``source``'s bytes by a hard link (the ``Storage``
        port's optional ``copy``): link ``source`` to an owned temporary beside ``destination``,
        rename it over ``destination``, fsync the folder (deferred inside a ``sync_group``). No
        byte is written again: ``source`` must be durable already, as every ``write`` leaves it.
        The two names then share one file until either is replaced or appended to (:meth:`append`
        replaces a shared file). Where the file system has no hard links, the bytes
        are read and written (:meth:`write`). Errors come in the order of
        ``write(destination, read(source))``: a missing source raises before anything is touched."""
        origin = self._abs(split_path(source))
        found = os.stat(origin)
        if stat.S_ISDIR(found.st_mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), origin)
        parts = split_path(destination)
        folder = self._make_parents(parts[:-1])
        target = self._abs(parts)
        with suppress(OSError):
            if os.path.samestat(found, os.stat(target)):
                return  # already the same file (a rename between two links of it would do nothing)
        tmp = os.path.join(folder, temporary_name(parts[-1]))
        try:
            os.link(origin, tmp)
        except OSError as exc:
            if exc.errno not in _NO_HARD_LINKS:
                raise
            self.write(destination, self.read(source))
            return
        self.ops["link"] += 1
        try:
            os.replace(tmp, target)
        except BaseException:
            with suppress(OSError):
                os.unlink(tmp)
                self.ops["unlink"] += 1
            raise
        self.ops["rename"] += 1
        self._syncs.after_change(folder)

    def delete(self, path: str) -> None:
        """Remove a file if it exists, then fsync its folder; a missing file is fine."""
        target = self._abs(split_path(path))
        try:
            os.unlink(target)
        except FileNotFoundError:
            return
        self.ops["unlink"] += 1
        self._syncs.after_change(os.path.dirname(target))

    def sync_group(self) -> AbstractContextManager[None]:
        """Defer the folder fsyncs of the ``write`` / ``write_blob`` / ``delete`` calls inside to one
        fsync per folder when the group exits (the contract: ``nnx_core.ports.Storage.sync_group``)."""
        return self._syncs.group()

    def remove_tree(self, folder: str) -> None:
        """Remove ``folder`` and everything under it, then fsync its parent; missing is fine."""
        target = self._abs(split_path(folder))
        try:
            st = os.lstat(target)
        except FileNotFoundError:
            return
        if not stat.S_ISDIR(st.st_mode):
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), target)
        self._rmtree(target)
        self._fsync_dir(os.path.dirname(target))

    def rename_folder(self, source: str, destination: str) -> None:
        """Rename the folder ``source`` to ``destination`` in the same parent (one ``rename(2)``),
        then fsync the parent. ``os.rename`` would silently replace an empty destination folder,
        so any existing ``destination`` is refused first (``FileExistsError``)."""
        parts, target_parts = split_path(source), split_path(destination)
        if parts[:-1] != target_parts[:-1]:
            raise ValueError(
                f"rename_folder renames within one folder: {source!r} and {destination!r} have different parents"
            )
        origin, target = self._abs(parts), self._abs(target_parts)
        if not stat.S_ISDIR(os.lstat(origin).st_mode):
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), origin)
        if os.path.lexists(target):
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), target)
        os.rename(origin, target)
        self.ops["rename"] += 1
        self._fsync_dir(os.path.dirname(target))

    def temporaries(self, folder: str) -> list[str]:
        """Store paths of every ``.tmp-*`` file under ``folder`` (``""``: the root), sorted."""
        return sorted(path for _, paths in self._temporaries(folder) for path in paths)

    def clean_temporaries(self, folder: str) -> int:
        """Delete every ``.tmp-*`` file under ``folder`` (``""``: the root); return the count."""
        removed = 0
        for directory, paths in self._temporaries(folder):
            for path in paths:
                os.unlink(self._abs(split_path(path, reserved_ok=True)))
                self.ops["unlink"] += 1
            self._fsync_dir(directory)
            removed += len(paths)
        return removed

    # -- lease -------------------------------------------------------------------------------

    def lease(self, run_id: str) -> AbstractContextManager[None]:
        """Hold ``<root>/.leases/<run_id>.lock`` exclusively; ``RunLeaseError`` at once if taken.

        Conflicts are detected across processes (``flock``) and within this process (a registry
        of held leases), so a second lease on the same run always fails immediately.
        """
        return flock_lease(self.root, run_id, run_folder=self._abs((check_run_id(run_id),)))

    # -- helpers -----------------------------------------------------------------------------

    def _abs(self, parts: tuple[str, ...]) -> str:
        return os.path.join(self.root, *parts)

    def _fill_sync_close(self, fd: int, fill: Callable[[int], None]) -> None:
        """``fill(fd)``, fsync and close ``fd``; on failure the descriptor is closed and the error re-raised."""
        try:
            fill(fd)
            self.ops["write"] += 1
            os.fsync(fd)
            self.ops["fsync"] += 1
        except BaseException:
            with suppress(OSError):
                os.close(fd)
            raise
        os.close(fd)

    def _fsync_dir(self, folder: str) -> None:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | _O_CLOEXEC)
        try:
            os.fsync(fd)
            self.ops["fsync"] += 1
        finally:
            os.close(fd)

    def _make_parents(self, parts: tuple[str, ...]) -> str:
        """Create the folders ``parts`` as needed, each made durable in its parent."""
        target = self._abs(parts)
        if os.path.isdir(target):
            return target
        if not self._root_ready or not os.path.isdir(self.root):  # a lease that made the root removes it unused
            os.makedirs(self.root, exist_ok=True)
            self._root_ready = True
        folder = self.root
        for name in parts:
            child = os.path.join(folder, name)
            try:
                os.mkdir(child)
            except FileExistsError:
                if not os.path.isdir(child):
                    raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), child) from None
            else:
                self.ops["mkdir"] += 1
                self._fsync_dir(folder)
            folder = child
        return folder

    def _rmtree(self, folder: str) -> None:
        with os.scandir(folder) as it:
            entries = sorted(it, key=lambda e: e.name)
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                self._rmtree(entry.path)
            else:
                os.unlink(entry.path)
                self.ops["unlink"] += 1
        os.rmdir(folder)
        self.ops["rmdir"] += 1

    def _temporaries(self, folder: str) -> list[tuple[str, list[str]]]:
        """``(folder on disk, store paths of its temporaries)`` for each folder under ``folder``
        holding any (the lease folder skipped)."""
        parts = split_path(folder, root_ok=True)
        target = self._abs(parts)
        try:
            st = os.stat(target)
        except FileNotFoundError:
            return []
        if not stat.S_ISDIR(st.st_mode):
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), target)
        found: list[tuple[str, list[str]]] = []
        stack = [parts]
        while stack:
            here = stack.pop()
            directory = self._abs(here)
            with os.scandir(directory) as it:
                entries = sorted(it, key=lambda e: e.name)
            paths = []
            for entry in entries:
                if not here and entry.name == LEASE_FOLDER:
                    continue
                if entry.is_dir(follow_symlinks=False):
                    stack.append((*here, entry.name))
                elif entry.name.startswith(TMP_PREFIX):
                    paths.append("/".join((*here, entry.name)))
            if paths:
                found.append((directory, paths))
        return found
