"""The contract kit run against SQLiteStorage (docs/adapters.md): three machines, one factory."""

import shutil
import tempfile

from hypothesis.stateful import run_state_machine_as_test

from nnx_adapters.testing import CommitContract, JournalContract, StorageContract, contract_settings

from sqlite_storage import SQLiteStorage


class SQLiteFactory:
    """A fresh database per store, in its own folder; copies through SQLite's backup API."""

    def make_storage(self):
        folder = tempfile.mkdtemp()
        # synchronous=OFF keeps the machines fast: they kill the writer, they never cut the power
        return SQLiteStorage(f"{folder}/runs.db", synchronous="OFF")

    def copy_storage(self, store):
        copy = self.make_storage()
        store.db.backup(copy.db)
        return copy

    def another_handle(self, store):
        return SQLiteStorage(store.path)

    def dispose_storage(self, store):
        store.db.close()
        shutil.rmtree(store.path.rsplit("/", 1)[0], ignore_errors=True)


class SQLiteContract(SQLiteFactory, StorageContract):
    pass


class SQLiteCommits(SQLiteFactory, CommitContract):
    pass


class SQLiteJournal(SQLiteFactory, JournalContract):
    pass


def test_sqlite_storage_keeps_the_storage_contract():
    run_state_machine_as_test(SQLiteContract, settings=contract_settings(examples=30, steps=30))


def test_commits_on_sqlite_survive_every_kill_and_fault():
    run_state_machine_as_test(SQLiteCommits, settings=contract_settings(examples=5, steps=4))


def test_journal_commits_on_sqlite_survive_every_kill_and_fault():
    run_state_machine_as_test(SQLiteJournal, settings=contract_settings(examples=5, steps=4))
