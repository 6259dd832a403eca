"""Count the ``os`` calls that change or sync a local file system, and the durable steps they form.

``OsTrace`` wraps ``os.open`` (counted only when it creates: ``O_CREAT``), ``os.write``,
``os.fsync`` (told apart as a file's or a folder's), ``os.replace`` / ``os.rename``, ``os.link``,
``os.unlink``, ``os.mkdir`` and ``os.rmdir`` while installed, and keeps the calls in order. Reads
(``open`` without ``O_CREAT``, ``stat``, ``listdir``, ``close``) change nothing and are not counted.
It measures ``FileStorage`` and anything else that reaches the disk through ``os``: the commit
benchmark (``bench/commit.py``) and the test pinning a commit's operation counts
(``tests/adapters/test_commit_ops.py``) share it.

A **durable step** (a dependent fsync round) is a run of consecutive folder fsyncs with no change
between them: it makes every rename and removal before it durable, and nothing after it starts
until it is done. The atomic durable save of one file (temporary, fsync, rename, folder fsync)
is one step.
"""

from __future__ import annotations

import collections
import os
import stat
from collections.abc import Callable
from types import TracebackType
from typing import Any

__all__ = ["OsTrace"]

_CHANGES = {"write": "write", "replace": "rename", "rename": "rename", "link": "link",
            "unlink": "unlink", "mkdir": "mkdir", "rmdir": "rmdir"}


class OsTrace:
    """A context manager recording the file-system changes and syncs made through ``os``.

    ``calls`` is the ordered list of kinds (``create``, ``write``, ``fsync``, ``fsync_dir``,
    ``rename``, ``link``, ``unlink``, ``mkdir``, ``rmdir``); ``counts()`` tallies them and
    ``durable_steps()`` counts the dependent fsync rounds (module docstring). Not thread-safe:
    install it around single-threaded work only.
    """

    def __init__(self) -> None:
        self.calls: list[str] = []
        self._originals: dict[str, Callable[..., Any]] = {}

    def __enter__(self) -> OsTrace:
        self._originals = {name: getattr(os, name) for name in ("open", "fsync", *_CHANGES)}
        real = self._originals

        def opened(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
            fd = real["open"](path, flags, *args, **kwargs)
            if flags & os.O_CREAT:
                self.calls.append("create")
            return fd

        def synced(fd: int) -> None:
            real["fsync"](fd)
            self.calls.append("fsync_dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "fsync")

        def changed(name: str) -> Callable[..., Any]:
            def call(*args: Any, **kwargs: Any) -> Any:
                result = real[name](*args, **kwargs)
                self.calls.append(_CHANGES[name])
                return result

            return call

        os.open, os.fsync = opened, synced  # type: ignore[assignment]
        for name in _CHANGES:
            setattr(os, name, changed(name))
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        for name, fn in self._originals.items():
            setattr(os, name, fn)

    def counts(self) -> collections.Counter[str]:
        """How many calls of each kind."""
        return collections.Counter(self.calls)

    def total(self) -> int:
        """Every counted call."""
        return len(self.calls)

    def durable_steps(self) -> int:
        """The dependent fsync rounds: runs of consecutive folder fsyncs."""
        return sum(1 for i, kind in enumerate(self.calls) if kind == "fsync_dir" and (i == 0 or self.calls[i - 1] != "fsync_dir"))
