"""The job comment's directives (engine.core.jobcomment): user text, parsed strictly; a comment
that is not exactly right is ignored as a whole, with its reason, and never raises."""

from __future__ import annotations

import pytest

from engine.core.jobcomment import MAX_COMMENT, Directives, parse_comment


@pytest.mark.parametrize(
    ("comment", "off", "restarts"),
    [
        ("recover:off", True, None),
        ("recover:max_restarts=2", False, 2),
        ("recover:max_restarts=0", False, 0),
        ("recover:max_restarts=999", False, 999),
        ("  recover:off\trecover:max_restarts=1 ", True, 1),
        ("project=llm7 owner=ana recover:max_restarts=3 sweep#12", False, 3),  # others' text is not read
        ("recover:max_restarts=1 recover:off", True, 1),
    ],
)
def test_directives_mixed_with_other_text(comment, off, restarts):
    d = parse_comment(comment)
    assert (d.off, d.max_restarts, d.problem) == (off, restarts, None)
    assert d.any


@pytest.mark.parametrize("comment", [None, "", "   ", "project=llm7 sweep#12", "résumé ok ✓", "\x00 no directive"])
def test_a_comment_without_a_directive_is_not_recovers_business(comment):
    assert parse_comment(comment) == Directives()


@pytest.mark.parametrize(
    ("comment", "why"),
    [
        ("recover:max_restarts=999999999999", "is not recover:off or recover:max_restarts=N"),
        ("recover:max_restarts=1000", "is not recover:off"),
        ("recover:max_restarts=-1", "is not recover:off"),
        ("recover:max_restarts=", "is not recover:off"),
        ("recover:max_restarts=1_0", "is not recover:off"),
        ("recover:max_restarts=２", "is not recover:off"),  # a full-width digit is no ASCII digit
        ("recover:max_restarts=0x3", "is not recover:off"),
        ("recover:off;rm -rf /", "is not recover:off"),
        ("recover:off=1", "is not recover:off"),
        ("recover:", "is not recover:off"),
        ("recover:οff", "is not recover:off"),  # a Greek omicron
        ("recover:notify=root@example.com", "is not recover:off"),  # no destinations from users
        ("recover:off recover:off", "recover:off given twice"),
        ("recover:max_restarts=1 recover:max_restarts=2", "recover:max_restarts given twice"),
        ("Recover:off", "must start a word, in lower case"),
        ("x;recover:off", "must start a word"),
        ("$(recover:off)", "must start a word"),
        ("recover:off\nrecover:max_restarts=9", "control character"),
        ("recover:off\x1b[31m", "control character"),
        ("recover:off\x85", "control character"),
        ("recover:off\u3000x", "is not recover:off"),  # only spaces and tabs separate words
        ("x" * MAX_COMMENT + " recover:off", f"longer than {MAX_COMMENT}"),
        ("recover:off " + "y" * 10_000_000, f"longer than {MAX_COMMENT}"),
    ],
)
def test_a_bad_comment_is_ignored_as_a_whole_with_its_reason(comment, why):
    d = parse_comment(comment)
    assert (d.off, d.max_restarts) == (False, None)  # nothing of it applies, not even its good half
    assert d.problem is not None and why in d.problem, d.problem
    assert len(d.problem) < 200  # the reason quotes a bounded piece of the comment


def test_the_reason_shows_hostile_text_escaped():
    d = parse_comment("recover:\u202eoff")
    assert d.problem is not None and "\u202e" not in d.problem and "\\u202e" in d.problem


def test_describe_says_the_directives_as_written():
    assert parse_comment("a recover:max_restarts=2 recover:off").describe() == "recover:off recover:max_restarts=2"
