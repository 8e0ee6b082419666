"""What the load keeps per process (a pattern's check and analysis, a template's parsed tree)
answers as a fresh computation would (constructed patterns and templates)."""

from __future__ import annotations

import pytest

from engine.rulebook import patterns
from engine.rulebook.compile import _template_check
from engine.rulebook.templating import jinja_env, parsed


def test_pattern_check_and_analysis_kept_alike() -> None:
    assert patterns.check_pattern(r"Xid \d+") is None
    assert patterns.analyse(r"Xid \d+") is patterns.analyse(r"Xid \d+")
    assert patterns.analyse(r"Xid \d+", True).truth == rb"(?i:Xid \d+)"
    assert patterns.analyse(r"Xid \d+", False).truth == rb"Xid \d+"
    for bad in ("", "a|", r"(a)\1"):
        first = patterns.check_pattern(bad)
        assert first is not None and patterns.check_pattern(bad) == first
        with pytest.raises(ValueError, match="empty|backreferences"):
            patterns.analyse(bad)
    for not_text in (None, ["a"]):
        assert patterns.check_pattern(not_text) == f"pattern must be a string, not {type(not_text).__name__}"  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="must be a string"):
            patterns.analyse(not_text)  # type: ignore[arg-type]


def test_kept_template_tree_is_not_the_checked_one() -> None:
    """Jinja's code generator folds constants in the tree it walks: the compiler's check must not
    walk the tree the linter and the deriver read."""
    source = "nodes {{ l.failed_nodes | default([]) | join(', ') }} {{ x if false else 'a' }}"
    before = repr(parsed(source))
    names, error = _template_check(source)
    assert error is None and names == {"l", "x"}
    assert repr(parsed(source)) == before == repr(jinja_env().parse(source))


def test_stored_analyses_are_the_patterns_own() -> None:
    """A rulebook read back from the store hands its scanners the analyses it was built with:
    they are each pattern's analysis less its compiled RE2, and ``analyse`` answers with them."""
    import pickle

    from engine.rulebook import require_rulebook

    book = require_rulebook()
    kept = pickle.loads(pickle.dumps(book.analyses))
    assert len(kept) == len(book.matchers)
    for pattern, ignore_case, a in kept:
        assert a.rx is None
        assert a == patterns._analyse_text(pattern, ignore_case)._replace(rx=None)
    patterns.remember(kept)
    pattern, ignore_case, a = kept[0]
    assert patterns.analyse(pattern, ignore_case) is patterns._KEPT[(pattern, ignore_case)]
