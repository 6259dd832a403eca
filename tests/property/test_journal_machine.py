"""The epoch commit protocol with a history journal, under every crash and every fault.

The kit's ``nnx_adapters.testing.JournalContract`` (read its docstring): the commit machine with
the journal as the "run history" step (a small random ``retention`` and chunk size so chunks split
epochs and the window evicts), replayed at every failure point the store allows, after which a
reader sees a committed state and a restarted writer cuts the uncommitted tail. Driven against
``MemoryStorage`` (power cuts and in-call faults), ``FileStorage`` (OS-level faults and kills)
and ``FsspecStorage`` on fsspec's memory filesystem (port-level kills and faults).

``NNX_DEEP=1`` runs 300 examples instead of 25 (15 for the file-system stores).
"""

from __future__ import annotations

import os

import pytest
from hypothesis.stateful import run_state_machine_as_test

from nnx_adapters.testing import EXERCISED, JournalContract, contract_settings

from kit_stores import File, FsspecMemory, Memory, no_fsync

DEEP = os.environ.get("NNX_DEEP") == "1"


class MemoryJournal(Memory, JournalContract):
    pass


class FileJournal(File, JournalContract):
    pass


class FsspecMemoryJournal(FsspecMemory, JournalContract):
    pass


@pytest.mark.timeout(1800 if DEEP else 300)
def test_journal_commits_survive_every_crash_and_fault():
    before = EXERCISED["MemoryStorage: power cuts (metadata flushed)"]
    run_state_machine_as_test(MemoryJournal, settings=contract_settings(steps=4))
    assert EXERCISED["MemoryStorage: power cuts (metadata flushed)"] > before


@pytest.mark.timeout(3600 if DEEP else 300)
def test_journal_commits_survive_every_fault_and_kill_on_the_file_system(tmp_path, monkeypatch):
    FileJournal.base_dir = str(tmp_path)
    no_fsync(monkeypatch)
    before = EXERCISED["FileStorage: process kills"]
    run_state_machine_as_test(FileJournal, settings=contract_settings(examples=15, steps=4))
    assert EXERCISED["FileStorage: process kills"] > before


@pytest.mark.timeout(1800 if DEEP else 300)
def test_journal_commits_on_fsspec_memory_survive_every_port_kill_and_fault():
    before = EXERCISED["FsspecStorage: port kills"]
    run_state_machine_as_test(FsspecMemoryJournal, settings=contract_settings(examples=15, steps=4))
    assert EXERCISED["FsspecStorage: port kills"] > before

