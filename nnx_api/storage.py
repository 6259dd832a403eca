"""``nnx_api.storage`` (this project's, no NNx path): a re-export module (nnx_api/nnx_paths.py).

Where runs live — the ``Storage`` port and the adapters NNx ships.

* ``FileStorage(root)`` — a folder on a local POSIX file system (the default under ``root`` /
  ``$NNX_RUNS`` / ``./runs``): every write durable (fsync of the file and its folder).
* ``MemoryStorage()`` — runs in this process's memory: train, resume and inspect a run in a
  notebook or a test; nothing survives the process. It also models a file system's crashes
  (``crash_after``, ``fail_on``, ``reopen``) for tests.
* ``FsspecStorage(fs, root)`` — over an fsspec filesystem (``pip install "nnx[fsspec]"``):
  fsspec's local and memory filesystems; any other backend is refused with
  ``StorageGuaranteeError`` naming the guarantee it cannot keep.
* ``Storage`` — the port itself, to write your own adapter (``docs/adapters.md``) and prove it
  with the kit in ``nnx_adapters.testing`` (``pip install "nnx[testing]"``)."""

from nnx_core.ports import Receipt, Storage
from nnx_adapters.storage.fs import FileStorage
from nnx_adapters.storage.fsspec import FsspecStorage, StorageGuaranteeError
from nnx_adapters.storage.memory import MemoryStorage

__all__ = ["FileStorage", "FsspecStorage", "MemoryStorage", "Receipt", "Storage", "StorageGuaranteeError"]
