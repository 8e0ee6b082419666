"""Round 13's weak vocabulary of the GPU classes (rules/27-weak-r13h.yaml) with the specific
matchers switched off.

The rule tests of rules/97-tests-weak-r13h.yaml run on the whole rulebook, where a specific matcher
often answers first. Here the same inputs are replayed on the ablated view (engine/ops/ablate.py):
each 'r13h kw' input, a log ending on quoted lines, must be its class through a keyword alone (a
test whose whole-rulebook answer differs names the fallback's answer as "(alone: CLASS)"), and no
'r13h neg' input may open anything. Weak evidence never isolates a node.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from engine.ops.ablate import ablated
from engine.ops.corpus_eval import HEALTHY
from engine.rulebook import require_rulebook
from tests.helpers import replay_texts

TESTS = Path(__file__).resolve().parents[2] / "rules" / "97-tests-weak-r13h.yaml"
ALONE = re.compile(r"\(alone: (\w+)\)")


def _inputs(prefix: str) -> list[tuple[str, str, str]]:
    import yaml

    out = []
    for test in yaml.safe_load(TESTS.read_text())["tests"]:
        if not test["name"].startswith(prefix):
            continue
        named = ALONE.search(test["name"])
        want = {str(e["job"]): e["fault_class"] for e in test["expect"] or []}
        for inp in test["input"]:
            job = inp["file"].removeprefix("slurm-").removesuffix(".out")
            out.append((test["name"], inp["lines"], named.group(1) if named else want.get(job, HEALTHY)))
    return out


@pytest.fixture(scope="module")
def view():
    return ablated(require_rulebook())


def test_each_quoted_line_is_its_class_by_its_keyword_alone(view):
    cases = _inputs("r13h kw ")
    assert len(cases) >= 15
    results = replay_texts(view, cases, "r13h").results
    wrong = [(c[0], c[2], r.got) for c, r in zip(cases, results) if not (r.right and r.weak)]
    assert wrong == []
    assert all(r.isolated == () for r in results)  # a keyword names no node


def test_the_benign_lines_open_nothing_with_the_fallback_alone(view):
    cases = _inputs("r13h neg ")
    assert len(cases) >= 3 and all(want == HEALTHY for _, _, want in cases)
    results = replay_texts(view, cases, "r13h").results
    assert [(c[0], r.got) for c, r in zip(cases, results) if r.got != HEALTHY] == []
