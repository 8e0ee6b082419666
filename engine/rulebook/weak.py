"""The weak-evidence layer: each fault class's ``keywords`` compiled into one ordinary matcher.

A class may declare error tokens (``fault_classes: {cuda_oom: {keywords: [out of memory]}}``); a
site appends its own with ``override: {keywords: append}``. After layering, the tokens of each
class become the matcher ``weak.<class>``: any-case, whole words, whitespace between words
matched loosely, emitting a ``log`` fact with ``weak: true``, ``weak_class`` and the ``keyword``
that hit. A keyword may ask for two tokens on one line, in order: ``NVLink ... error|down`` is
``NVLink`` and then, within the line, ``error`` or ``down`` (a keyword's or a part's
alternatives split by ``|``), so a class's noun and a failure word count together where neither does alone. Being an ordinary matcher, it rides the scanner's one multi-pattern scan per buffer
like every other; the rules that read it (rules/25-weak-evidence.yaml) rank below every specific
cause, and policy never lets such a fault act on a node-scoped class (engine/core/policy.py).
"""

from __future__ import annotations

import re
from types import MappingProxyType
from typing import Iterable, Mapping

from engine.rulebook.model import FaultClass, Matcher

__all__ = ["QUIET_LIST", "WEAK_PREFIX", "weak_matcher_id", "weak_matchers", "keyword_pattern"]

WEAK_PREFIX = "weak."
_META = re.compile(r"([\\.^$|?*+()\[\]{}])")


def weak_matcher_id(fault_class: str) -> str:
    return WEAK_PREFIX + fault_class


#: in a keyword, what separates two tokens that must both be on the line, in that order
#: ("NVLink ... error|fatal|down": NVLink, then later on the same line one of the three); "|"
#: separates alternatives, of a whole keyword or of one part
WITHIN_LINE = " ... "
#: at most this many characters between two tokens of one keyword (one line, never the next)
GAP = 160


def _token(word: str) -> str:
    if WITHIN_LINE in word:
        return f"[^\\n]{{0,{GAP}}}?".join(_token(p.strip()) for p in word.split(WITHIN_LINE))
    if "|" in word:
        return "(?:" + "|".join(_token(a.strip()) for a in word.split("|") if a.strip()) + ")"
    body = r"\s+".join(_META.sub(r"\\\1", part) for part in word.split())
    # a boundary only where the token begins or ends with a word character ("ibv_" may be a prefix)
    head = r"\b" if re.match(r"\w", word) else ""
    tail = r"\b" if re.search(r"\w$", word) and not word.endswith("_") else ""
    return head + body + tail


def keyword_pattern(keywords: Iterable[str]) -> str:
    """One RE2 alternation of the tokens, longest first (so the longer phrase is the one named)."""
    ordered = sorted(dict.fromkeys(k.strip() for k in keywords if k.strip()), key=lambda k: (-len(k), k))
    return "(?P<keyword>" + "|".join(_token(k) for k in ordered) + ")"


#: the list of strings that mark a line as no error line (a log level); a weak keyword there is no hit
QUIET_LIST = "weak_quiet"


def weak_matchers(fault_classes: Mapping[str, FaultClass], quiet: Iterable[str] = ()) -> list[Matcher]:
    """The weak matcher of every class that declares keywords, in class order; ``quiet``: the
    strings (lists.weak_quiet) whose line is no error line."""
    unless = tuple(str(q) for q in quiet if str(q))
    out = []
    for name, fc in fault_classes.items():
        if not fc.keywords:
            continue
        out.append(
            Matcher(
                id=weak_matcher_id(name),
                pattern=keyword_pattern(fc.keywords),
                sources=("job", "kernel"),
                emit="log",
                mark=fc.mark,
                description=f"Weak evidence for {name}: its keywords ({len(fc.keywords)}), from fault_classes.",
                ignore_case=True,
                attrs=MappingProxyType({"weak": True, "weak_class": name}),
                unless=unless,
            )
        )
    return out
