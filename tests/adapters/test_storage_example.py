"""The worked example of docs/adapters.md runs here: SQLiteStorage and its kit test file.

``examples/sqlite_storage.py`` is the adapter and ``examples/test_sqlite_storage.py`` the test file
a user would write; the document shows both files whole, and this test checks it still does.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
FILES = ("sqlite_storage.py", "test_sqlite_storage.py")


@pytest.fixture(scope="module")
def kit_tests():
    sys.path.insert(0, str(EXAMPLES))
    try:
        import test_sqlite_storage

        yield test_sqlite_storage
    finally:
        sys.path.remove(str(EXAMPLES))


@pytest.mark.parametrize(
    "name",
    ["test_sqlite_storage_keeps_the_storage_contract", "test_commits_on_sqlite_survive_every_kill_and_fault",
     "test_journal_commits_on_sqlite_survive_every_kill_and_fault"],
)
def test_the_worked_example_passes_the_kit(kit_tests, name):
    getattr(kit_tests, name)()


@pytest.mark.parametrize("name", FILES)
def test_docs_show_the_example_files_whole(name):
    doc = (ROOT / "docs" / "adapters.md").read_text()
    assert f"```python\n{(EXAMPLES / name).read_text()}```" in doc, f"docs/adapters.md no longer shows examples/{name}"
