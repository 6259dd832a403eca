"""The commit protocol's rules a reader's view cannot show, checked on the bytes in the store.

Readers truncate history to LAST, so a history file left one epoch ahead of LAST looks fine
through them; these tests read the files themselves (``MemoryStorage``, no torch).
"""

from __future__ import annotations

import pytest

from nnx_adapters.storage.memory import MemoryStorage
from nnx_core.commit import BEST, LAST, EpochCommit, RunFiles, commit_epoch

RUN = "c" * 32


class FailingTag:
    """A store whose write of one tag's manifest fails (before its rename: nothing visible)."""

    def __init__(self, store: MemoryStorage, tag: str) -> None:
        self.store, self.tag, self.armed = store, tag, False

    def __getattr__(self, name: str):
        return getattr(self.store, name)

    def write(self, path: str, data, **kwargs):
        if self.armed and path == f"{RUN}/checkpoints/{self.tag}.json":
            raise OSError(28, f"injected: no space left writing {self.tag}")
        return self.store.write(path, data, **kwargs)


def history(epochs: int) -> bytes:
    return b"epoch\n" + b"".join(b"%d\n" % e for e in range(epochs))


def commit(files: RunFiles, epoch: int, tags: tuple[str, ...] = ()) -> None:
    commit_epoch(files, EpochCommit(epoch=epoch, payload=b"state %d" % epoch, history=history(epoch + 1),
                                    previous_history=history(epoch) if epoch else None, tags=tags))


def test_a_failed_last_puts_the_previous_history_bytes_back():
    store = FailingTag(MemoryStorage(), LAST)
    files = RunFiles(store, RUN)
    commit(files, 0)
    commit(files, 1)
    store.armed = True
    with pytest.raises(OSError, match="no space left writing last"):
        commit(files, 2)
    assert store.read(files.history) == history(2)  # the bytes, not a reader's truncated view
    assert files.read_tag(LAST).epoch == 1


def test_a_failed_first_last_removes_the_history_it_wrote():
    store = FailingTag(MemoryStorage(), LAST)
    files = RunFiles(store, RUN)
    store.armed = True
    with pytest.raises(OSError):
        commit(files, 0)
    assert not store.exists(files.history) and files.read_tag(LAST) is None


def test_a_failure_after_last_keeps_the_new_history_with_the_new_last():
    store = FailingTag(MemoryStorage(), BEST)
    files = RunFiles(store, RUN)
    commit(files, 0, tags=(BEST,))
    store.armed = True
    with pytest.raises(OSError, match="writing best"):
        commit(files, 1, tags=(BEST,))
    assert store.read(files.history) == history(2) and files.read_tag(LAST).epoch == 1
    assert files.read_tag(BEST).epoch == 0
