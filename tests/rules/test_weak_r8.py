"""The round-8 weak vocabulary (rules/27-weak-r8.yaml) with the specific matchers switched off.

The rule tests of rules/96-tests-families-r8weak.yaml run on the whole rulebook, where a specific
matcher often answers first. Here the same inputs are replayed on the ablated view
(engine/ops/ablate.py): each 'r8weak kw' input, a log ending on one quoted line, must be its
class through a keyword alone, and no 'r8weak neg' input may open anything. Weak evidence never
isolates a node.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.ops.ablate import ablated
from engine.ops.corpus_eval import HEALTHY
from engine.rulebook import require_rulebook
from tests.helpers import replay_texts, rule_test_cases

TESTS = Path(__file__).resolve().parents[2] / "rules" / "96-tests-families-r8weak.yaml"


def _inputs(prefix: str) -> list[tuple[str, str, str]]:
    return rule_test_cases(TESTS, prefix)


@pytest.fixture(scope="module")
def view():
    return ablated(require_rulebook())


def _replay(view, cases):
    return replay_texts(view, cases, "r8")


def test_each_quoted_line_is_its_class_by_its_keyword_alone(view):
    cases = _inputs("r8weak kw ")
    assert len(cases) > 100
    results = _replay(view, cases).results
    wrong = [(c[1].strip()[:80], c[2], r.got) for c, r in zip(cases, results) if not (r.right and r.weak)]
    assert wrong == []
    assert all(r.isolated == () for r in results)  # a keyword names no node


def test_the_benign_lines_open_nothing_with_the_fallback_alone(view):
    cases = _inputs("r8weak neg ")
    assert len(cases) >= 10 and all(want == HEALTHY for _, _, want in cases)
    results = _replay(view, cases).results
    assert [(c[1].strip()[:80], r.got) for c, r in zip(cases, results) if r.got != HEALTHY] == []
