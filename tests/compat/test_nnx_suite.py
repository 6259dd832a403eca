"""NNx 0.4.1's own test suite, the in-scope files, run against nnx_api (bench/nnx_suite/,
docs/nnx-compat.md "NNx's own test suite").

The in-scope files but the slow ones (``SLOW``: torchrun scenarios; ``make nnx-suite`` runs them)
run live — the sdist is downloaded once into ``build/nnx-suite/`` — and are held to the last full
run, ``bench/nnx_suite/recorded.json``, and to ``kept.py``: an item recorded passing that
fails now goes red, so does a failing public item with no reason, pass rates under the recorded
ones, and docs tables that are not the recorded ones.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

SUITE = Path(__file__).resolve().parents[2] / "bench" / "nnx_suite"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "nnx-compat.md"
sys.path.insert(0, str(SUITE))
import run  # noqa: E402
import run_examples as examples  # noqa: E402
import scope  # noqa: E402

SLOW = ("test_ddp_adapter.py", "test_ddp_resume.py")
"""Files whose items start torchrun groups (minutes on two cores): ``make nnx-suite`` runs them."""
FILES = [name for name in scope.in_scope() if name not in SLOW]


@pytest.fixture(scope="module")
def recorded() -> dict:
    return json.loads(run.RECORDED.read_text())


@pytest.fixture(scope="module")
def live() -> tuple[dict, set]:
    tree = run.fetch()
    report = run.run_pytest(tree, FILES, [], workers="1", log=run.WORK / "test-run.log")
    items = run.uncollected(tree, run.outcomes(report), FILES)
    report.unlink()
    return items, run.private_items(tree, FILES)


def _ours(items: dict) -> dict:
    return {key: item for key, item in items.items() if key.split("::")[0] in FILES}


@pytest.mark.timeout(1200)
def test_no_item_recorded_passing_fails_now(live, recorded):
    items, _ = live
    back = sorted(key for key, item in _ours(recorded["items"]).items()
                  if item["outcome"] == "passed" and items.get(key, {}).get("outcome") != "passed")
    assert back == [], "items recorded passing that fail now (fix them, or re-record with run.py --record)"


@pytest.mark.timeout(1200)
def test_every_failing_item_is_kept_with_a_reason(live):
    items, private = live
    unexplained = [line for line in run.problems(items, private) if not line.startswith("entry ")]
    assert unexplained == []


@pytest.mark.timeout(1200)
def test_public_items_pass_at_the_recorded_rates(live, recorded):
    items, private = live
    now = run.rates(run.summarise(items, private)["public"])
    before = run.rates(run.summarise(_ours(recorded["items"]), set(recorded["private"]))["public"])
    assert now[3] >= before[3] and now[4] >= before[4], (now, before)


def test_the_recorded_run_covers_every_in_scope_file_and_keeps_every_failure(recorded):
    assert recorded["files"] == scope.in_scope()
    assert {key.split("::")[0] for key in recorded["items"]} == set(scope.in_scope())
    assert run.problems(recorded["items"], set(recorded["private"])) == []


def test_the_docs_tables_are_the_recorded_ones(recorded):
    text = DOCS.read_text()
    assert run.markdown(recorded["items"], set(recorded["private"])) in text, (
        "docs/nnx-compat.md does not hold the recorded tables: `.venv/bin/python bench/nnx_suite/run.py --record "
        "--markdown /tmp/t.md` and paste /tmp/t.md into the section \"NNx's own test suite\"")
    assert run.scope_table() in text


def test_every_file_of_the_sdist_and_every_example_is_in_or_out_with_a_reason():
    tree = run.fetch()
    assert sorted(path.name for path in (tree / "tests").glob("test_*.py")) == sorted(scope.FILES)
    assert all(where in (scope.IN, scope.OUT) and reason.strip() for where, reason in scope.FILES.values())
    assert all(where in (examples.IN, examples.OUT) and reason.strip() for where, reason in examples.EXAMPLES.values())
    inside = {name for name, (where, _) in examples.EXAMPLES.items() if where == examples.IN}
    assert set(examples.COMMITS) == inside and set(examples.KEPT) <= inside


def test_the_counting_can_fail(tmp_path):
    """A private reach, a collection failure and an unexplained failure are each seen."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text(
        "from nnx import history\nimport torch\n\n"
        "def test_private():\n    history._reader()\n\n"
        "def test_patched(monkeypatch):\n    monkeypatch.setattr(history, 'os', None)\n\n"
        "def test_torch_private():\n    torch._dynamo.reset()\n\n"
        "def test_public():\n    history.HistoryJournal()\n")
    private = run.private_items(tmp_path, ["test_x.py"])
    assert private == {"test_x.py::test_private", "test_x.py::test_patched"}
    items = run.uncollected(tmp_path, {".py::tests.test_x": {"outcome": "failed", "message": "boom"}}, ["test_x.py"])
    assert set(items) == {f"test_x.py::test_{name}" for name in ("private", "patched", "torch_private", "public")}
    assert any(line.startswith("test_x.py::test_public") for line in run.problems(items, private))
    assert not any(line.startswith("test_x.py::test_private") for line in run.problems(items, private))
