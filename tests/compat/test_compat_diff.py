"""The cheap half of the differential oracle (bench/compat/, docs/nnx-compat.md "The differential oracle").

Every scenario of ``bench/compat/scenarios/`` runs under ``nnx_api`` (one subprocess, each scenario
with its own time limit) and what it observed is compared with NNx 0.4.1's recorded observations
(``bench/compat/recorded_nnx.json``, written by ``bench/compat/diff.py --record``). Every difference
must be listed in ``bench/compat/dispositions.py`` as "kept" with a reason: a new difference or a
regression goes red here, and so does a "kept" entry that no longer differs (remove it).
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import pytest

COMPAT = Path(__file__).resolve().parents[2] / "bench" / "compat"
sys.path.insert(0, str(COMPAT))
import diff  # noqa: E402
from dispositions import DISPOSITIONS  # noqa: E402

SCENARIO_TIMEOUT_S = 30.0


@pytest.fixture(scope="module")
def recorded() -> dict:
    return json.loads(diff.RECORDED.read_text())["scenarios"]


@pytest.fixture(scope="module")
def ours() -> dict:
    return diff.run_scenarios(sys.executable, "nnx_api", diff.scenario_names(), SCENARIO_TIMEOUT_S, batch=True)


def test_every_scenario_is_recorded(recorded):
    assert sorted(recorded) == diff.scenario_names(), (
        "bench/compat/recorded_nnx.json does not hold the scenarios on disk: re-record NNx's observations "
        "with `.venv/bin/python bench/compat/diff.py --record` (needs .venv-nnx: `make compat-diff`)")


def test_every_difference_from_nnx_is_kept_with_a_reason(recorded, ours):
    _, _, diffs = diff.compare(recorded, ours)
    problems = []
    for scen, key, theirs, mine in diffs:
        d = diff.disposition(scen, key)
        if d is None:
            problems.append(f"new difference {scen}/{key}: NNx {diff.short(theirs, 80)} vs ours "
                            f"{diff.short(mine, 80)} — fix it, or add it to dispositions.py with a reason")
        elif d[0] != "kept":
            problems.append(f"regression {scen}/{key} (marked {d[0]}: {d[1]}): NNx {diff.short(theirs, 80)} "
                            f"vs ours {diff.short(mine, 80)}")
    for key in diff.unused_kept(diffs):
        problems.append(f"{key} no longer differs from NNx: remove it from bench/compat/dispositions.py "
                        "(and from the table in docs/nnx-compat.md)")
    assert not problems, "\n".join(problems)


def test_no_scenario_aborted_where_nnx_did_not(recorded, ours):
    aborted = [n for n, obs in ours.items() if "_aborted" in obs and "_aborted" not in recorded.get(n, {})]
    assert not aborted, {n: ours[n]["_aborted"] for n in aborted}


def test_dispositions_are_well_formed():
    for key, (status, reason) in DISPOSITIONS.items():
        assert "/" in key and status in ("kept", "fixed") and reason.strip(), key


def test_a_changed_observation_is_reported(recorded, ours):
    """The oracle can fail: NNx's recorded weights nudged beyond float32 tolerance are a new difference."""
    altered = copy.deepcopy(recorded)
    weights = altered["s01_train_accumulate"]["weights"]
    name = sorted(weights)[0]
    weights[name][0] += 1e-3
    key = ("s01_train_accumulate", f"weights.{name}")
    before = [(s, k) for s, k, _, _ in diff.compare(recorded, ours)[2]]
    after = [(s, k) for s, k, _, _ in diff.compare(altered, ours)[2]]
    assert key not in before and key in after and diff.disposition(*key) is None
