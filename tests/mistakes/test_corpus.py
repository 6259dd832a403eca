"""The mistakes corpus (tests/mistakes/corpus.py): each case, run against the current code, gets
the verdict recorded as "after" in verdicts.json; the table in docs/reliability.md is the one
``python tests/mistakes/corpus.py --table`` writes; the corpus holds at least 60 cases.

A case whose verdict changes (a fix made it clear, or a change made it worse) fails here: record
the new verdicts with ``python tests/mistakes/corpus.py --record after`` and rewrite the table
with ``--table``."""

from __future__ import annotations

import pytest

from tests.mistakes import corpus

RECORDED = corpus.load_verdicts()


@pytest.mark.parametrize("case", corpus.CASES, ids=[c.id for c in corpus.CASES])
def test_a_case_gets_its_recorded_verdict(case):
    assert case.id in RECORDED, f"{case.id} has no recorded verdict: run `python tests/mistakes/corpus.py --record after`"
    verdict, detail = corpus.run_case(case)
    assert verdict == RECORDED[case.id]["after"], f"{case.id}: {verdict} (recorded {RECORDED[case.id]['after']}): {detail}"


def test_the_table_in_docs_reliability_is_the_corpus():
    text = corpus.DOC.read_text()
    assert corpus.BEGIN in text and corpus.END in text, "docs/reliability.md lost the corpus's markers"
    shown = text[text.index(corpus.BEGIN):text.index(corpus.END) + len(corpus.END)]
    assert shown == corpus.table(), "the table drifted: run `python tests/mistakes/corpus.py --table`"


def test_the_corpus_has_at_least_60_cases_with_unique_ids_and_every_verdict_recorded():
    ids = [c.id for c in corpus.CASES]
    assert len(ids) >= 60 and len(set(ids)) == len(ids)
    assert set(RECORDED) == set(ids)
    for entry in RECORDED.values():
        assert entry.get("before") in corpus.VERDICT_NAMES and entry.get("after") in corpus.VERDICT_NAMES
