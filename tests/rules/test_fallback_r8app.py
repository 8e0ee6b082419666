"""Round 8's second-wave fallback (rules/27-weak-r8app.yaml, rules/38-log-end-r8app.yaml) with the
specific matchers switched off.

The rule tests of rules/97-tests-r8app.yaml run on the whole rulebook, where a specific matcher
often answers first. Here the same inputs are replayed on the ablated view (engine/ops/ablate.py):
each 'r8app kw' input, the last lines of a train-side case, must be its class through the
fallback layers alone (a keyword or an ending), and no 'r8app neg' input may open anything.
Neither layer isolates a node.
"""

from __future__ import annotations

from pathlib import Path

import re

import pytest

from engine.ops.ablate import ablated
from engine.ops.corpus_eval import HEALTHY
from engine.rulebook import require_rulebook
from tests.helpers import replay_texts, rule_test_cases

TESTS = Path(__file__).resolve().parents[2] / "rules" / "97-tests-r8app.yaml"


#: a test whose whole-rulebook answer is a specific matcher's says the fallback's in its name
ALONE = re.compile(r"\bis (\w+) with the fallback alone\b")


def _inputs(prefix: str) -> list[tuple[str, str, str]]:
    return rule_test_cases(TESTS, prefix, ALONE)


@pytest.fixture(scope="module")
def view():
    return ablated(require_rulebook())


def _replay(view, cases):
    return replay_texts(view, cases, "r8app")


def test_each_family_names_its_class_with_the_fallback_alone(view):
    cases = _inputs("r8app kw ")
    assert len(cases) >= 36
    results = _replay(view, cases).results
    wrong = [(c[0], c[2], r.got) for c, r in zip(cases, results) if not r.right]
    assert wrong == []
    assert all(r.isolated == () for r in results)  # the fallback names no node


def test_the_benign_lines_open_nothing_with_the_fallback_alone(view):
    cases = _inputs("r8app neg ")
    assert len(cases) >= 8 and all(want == HEALTHY for _, _, want in cases)
    results = _replay(view, cases).results
    assert [(c[1].strip()[:80], r.got) for c, r in zip(cases, results) if r.got != HEALTHY] == []
