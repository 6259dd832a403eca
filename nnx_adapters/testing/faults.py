"""Ways the kit makes a writer fail: at the port (any adapter) or inside the adapter (with its help).

* ``PortFaults`` wraps **any** ``Storage``: it kills the writer just before its k-th port call
  (that call and every later one raise ``WriterKilled``, as if the process died there), or makes
  the k-th call raise an injected ``OSError`` instead of happening (ENOSPC/EIO reported by the
  store before it touched anything). ``before_each`` lets a reader look at the store between
  two calls.
* ``CrashInjection`` is what an adapter offers to be tested *inside* its calls, as
  ``nnx_adapters.storage.memory.MemoryStorage`` does: count its primitive operations, cut the
  power after the n-th (losing what was not made durable) or fail the n-th with an error.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Protocol, runtime_checkable

from nnx_core.ports import Receipt, Storage, copy_file


class WriterKilled(BaseException):
    """The writer process died at a port call; a ``BaseException`` so ``except Exception`` can't eat it."""


@runtime_checkable
class CrashInjection(Protocol):
    """The hooks an adapter offers so the kit can fail it inside its calls (``MemoryStorage`` has them)."""

    @property
    def crashed(self) -> bool:
        """Whether a simulated power cut happened (every call then raises)."""

    def count_ops(self) -> int:
        """How many primitive operations have happened so far."""

    def crash_after(self, n: int, *, metadata_flushed: bool = False) -> None:
        """Cut the power right after the n-th primitive operation from now; raise a BaseException there."""

    def fail_on(self, n: int, error: BaseException) -> None:
        """Make the n-th primitive operation from now raise ``error`` instead of happening."""

    def reopen(self) -> Storage:
        """A new store holding only what survived the power cut."""


class PortFaults:
    """A ``Storage`` that passes calls to ``inner`` and fails the writer at one of them.

    ``kill_at=k``: calls k, k+1, ... raise ``WriterKilled``. ``fail_at=(k, error)``: call k raises
    ``error`` without reaching ``inner``. ``before_each(k, name)`` runs before call k reaches
    ``inner``. ``calls`` counts the calls made.
    """

    def __init__(
        self,
        inner: Storage,
        *,
        kill_at: int | None = None,
        fail_at: tuple[int, BaseException] | None = None,
        before_each: Callable[[int, str], None] | None = None,
    ) -> None:
        self.inner = inner
        self.kill_at = kill_at
        self.fail_at = fail_at
        self.before_each = before_each
        self.calls = 0

    def __repr__(self) -> str:
        return f"PortFaults({self.inner!r})"

    def _gate(self, name: str) -> None:
        self.calls += 1
        if self.kill_at is not None and self.calls >= self.kill_at:
            raise WriterKilled(f"the writer was killed at port call {self.calls} ({name})")
        if self.fail_at is not None and self.fail_at[0] == self.calls:
            raise self.fail_at[1]
        if self.before_each is not None:
            self.before_each(self.calls, name)

    def read(self, path: str) -> bytes:
        self._gate("read")
        return self.inner.read(path)

    def exists(self, path: str) -> bool:
        self._gate("exists")
        return self.inner.exists(path)

    def digest(self, path: str) -> Receipt:
        self._gate("digest")
        return self.inner.digest(path)

    def write(self, path: str, data: bytes, *, sha256: str | None = None) -> Receipt:
        self._gate("write")
        return self.inner.write(path, data, sha256=sha256)

    def write_blob(self, folder: str, produce: Callable[[Any], None]) -> Receipt:
        self._gate("write_blob")
        return self.inner.write_blob(folder, produce)

    def append(self, path: str, data: bytes) -> None:
        self._gate("append")
        self.inner.append(path, data)

    def copy(self, source: str, destination: str) -> None:
        self._gate("copy")
        copy_file(self.inner, source, destination)

    def delete(self, path: str) -> None:
        self._gate("delete")
        self.inner.delete(path)

    def sync_group(self) -> AbstractContextManager[None]:
        self._gate("sync_group")
        return self.inner.sync_group()

    def list(self, folder: str) -> list[str]:
        self._gate("list")
        return self.inner.list(folder)

    def remove_tree(self, folder: str) -> None:
        self._gate("remove_tree")
        self.inner.remove_tree(folder)

    def rename_folder(self, source: str, destination: str) -> None:
        self._gate("rename_folder")
        self.inner.rename_folder(source, destination)

    def temporaries(self, folder: str) -> list[str]:
        self._gate("temporaries")
        return self.inner.temporaries(folder)

    def clean_temporaries(self, folder: str) -> int:
        self._gate("clean_temporaries")
        return self.inner.clean_temporaries(folder)

    def lease(self, run_id: str) -> AbstractContextManager[None]:
        self._gate("lease")
        return self.inner.lease(run_id)
