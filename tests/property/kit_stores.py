"""The project's stores for the contract kit's commit machines (``nnx_adapters.testing``).

Factories as mixins: ``Memory`` (crash injection: the kit adds power cuts and in-call faults),
``File`` (``FileStorage``; adds ENOSPC at every ``os.write``, EIO at every ``os.fsync`` and a
process kill at every ``os`` call through ``OsFaults``), ``FsspecLocal`` and ``FsspecMemory``
(``FsspecStorage``: the kit's port-level kills and faults only). File-system stores copy a state
with ``shutil.copytree``; the tests using them make ``os.fsync`` a no-op (durability across power
loss is the crash model's job; here the real adapters' error and kill paths are exercised).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import fsspec

from nnx_core.ports import Storage
from nnx_adapters.storage.fs import FileStorage
from nnx_adapters.storage.fsspec import FsspecStorage
from nnx_adapters.storage.memory import MemoryStorage
from nnx_adapters.testing import EXERCISED, Outcome, Trial


class Memory:
    def make_storage(self) -> Storage:
        return MemoryStorage()


class FsspecMemory:
    def make_storage(self) -> Storage:
        return FsspecStorage(fsspec.filesystem("memory", global_store=False, skip_instance_cache=True), "/runs")


class _OnDisk:
    """Each store in its own folder under ``base_dir`` (pytest's ``tmp_path``), removed when done."""

    base_dir = ""

    def new_root(self) -> str:
        return tempfile.mkdtemp(dir=self.base_dir or None)

    def copy_storage(self, store: Any) -> Storage:
        copy: Any = self.make_storage()  # type: ignore[attr-defined]
        shutil.copytree(store.root, copy.root, dirs_exist_ok=True)
        return copy

    def dispose_storage(self, store: Any) -> None:
        shutil.rmtree(store.root, ignore_errors=True)


class FsspecLocal(_OnDisk):
    def make_storage(self) -> Storage:
        return FsspecStorage("file", self.new_root())


class ProcessKilled(BaseException):
    """The writer process died at a file-system call."""


OS_CALLS = ("open", "write", "fsync", "replace", "rename", "unlink", "mkdir")  # rename: a run moved aside


class OsFaults:
    """Replace the ``os`` calls FileStorage makes: count them; fail or kill at one of them.

    ``fsync`` is counted but not performed. After a kill every later call fails too, so the dead
    process runs no cleanup and its temporaries stay on disk.
    """

    def __init__(self, fail: tuple[str, int, OSError] | None = None, kill_at: int | None = None) -> None:
        self.fail, self.kill_at = fail, kill_at
        self.calls = dict.fromkeys(OS_CALLS, 0)
        self.total = 0
        self.dead = False

    @contextlib.contextmanager
    def installed(self) -> Iterator[OsFaults]:
        originals = {name: getattr(os, name) for name in OS_CALLS}
        for name in OS_CALLS:
            setattr(os, name, self._wrap(name, originals[name]))
        try:
            yield self
        finally:
            for name, fn in originals.items():
                setattr(os, name, fn)

    def _wrap(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            if self.dead:
                raise ProcessKilled(f"os.{name} after the kill")
            self.calls[name] += 1
            self.total += 1
            if self.kill_at == self.total:
                self.dead = True
                raise ProcessKilled(f"killed at os call {self.total} (os.{name})")
            if self.fail is not None and self.fail[:2] == (name, self.calls[name]):
                raise self.fail[2]
            return None if name == "fsync" else original(*args, **kwargs)

        return call


def _run(replay: Callable[[Storage], None], store: Storage, faults: OsFaults) -> BaseException | None:
    with faults.installed():
        try:
            replay(store)
        except BaseException as exc:  # noqa: BLE001 — the outcome the kit checks
            return exc
    return None


class File(_OnDisk):
    """``FileStorage`` with OS-level faults and kills inside its calls (a kill at every ``os`` call
    covers a kill between port calls, so the kit's port-level failures are off)."""

    port_failures = False

    def make_storage(self) -> Storage:
        return FileStorage(self.new_root())

    def adapter_trials(self, replay: Callable[[Storage], None]) -> list[Trial]:
        probe: Any = self.copy_storage(self.store)  # type: ignore[attr-defined]
        counter = OsFaults()
        assert _run(replay, probe, counter) is None
        self.dispose_storage(probe)
        faults = [("write", k, errno.ENOSPC) for k in range(1, counter.calls["write"] + 1)]
        faults += [("fsync", k, errno.EIO) for k in range(1, counter.calls["fsync"] + 1)]

        def fault(fn: str, k: int, code: int) -> Trial:
            label = f"{errno.errorcode[code]} at os.{fn} #{k}"

            def run() -> Outcome:
                store = self.copy_storage(self.store)  # type: ignore[attr-defined]
                injected = OSError(code, f"injected {errno.errorcode[code]}")
                raised = _run(replay, store, OsFaults(fail=(fn, k, injected)))
                EXERCISED["FileStorage: " + ("ENOSPC at os.write" if fn == "write" else "EIO at os.fsync")] += 1
                return Outcome(label, store, raised, injected)

            return Trial(label, run)

        def kill(k: int) -> Trial:
            label = f"kill at os call {k}/{counter.total}"

            def run() -> Outcome:
                store: Any = self.copy_storage(self.store)  # type: ignore[attr-defined]
                raised = _run(replay, store, OsFaults(kill_at=k))
                assert isinstance(raised, ProcessKilled), f"{label}: {raised!r}"
                EXERCISED["FileStorage: process kills"] += 1
                return Outcome(label, FileStorage(store.root), raised)  # the next process's handle

            return Trial(label, run)

        return [fault(*f) for f in faults] + [kill(k) for k in range(1, counter.total + 1)]


def no_fsync(monkeypatch: Any) -> None:
    """Make ``os.fsync`` a no-op for a machine on a real file system (see the module docstring)."""
    monkeypatch.setattr(os, "fsync", lambda fd: None)
