"""A read that is exactly one complete line, scanned without the scanner's buffer machinery
(issue 24: a job log written a line every few seconds is read a line at a time, and at 10,000
followed logs the Python around one hyperscan call per read was a quarter of the controller).

For one complete line the scanner's answer is simple: every matcher whose RE2 regex is found in
the line, in matcher order, once each (a block or sampled spec's first and last line in the read
is that line; no boundary, no tail window, no cut). ``OneLine.feed`` gives that answer from a
memo instead of a scan wherever it can:

* a **digit-insensitive** matcher's answer (whether it hits, with the same group spans) is the
  same for every line with the same ``blank`` (the line with its digits masked,
  ``patterns.mask_digits``): the scanner's own memo relies on this. ``OneLine`` remembers, per
  blank, which of them hit and their spans, taken from the full scan of the first line of that
  shape (the scanner's ``feed``, so the truth stays the scanner's, RE2 on the line);
* a matcher that is **not** digit-insensitive (its pattern names a digit: ``Xid 79``, an errno)
  is never remembered: an RE2 set of those patterns is asked on every line, and each it names is
  matched with its own regex, as the scanner would.

Anything else goes to ``Scanner.feed`` unchanged: a read with more or less than one line, a
pending partial line before it, a line longer than the memo's (2 KiB) or the scanner's cut, a
scanner of another kind. The scanner's position and counters move exactly as ``feed`` moves them.
``tests/core/test_oneline.py`` holds the two paths equal line by line.

One ``OneLine`` per scanner template (a rulebook's source kind): its clones share the memo, as
they share the scanner's. Not thread-safe (the controller's loop is its one user).
"""

from __future__ import annotations

from typing import Any

import re2

from engine.core.matching import Hit
from engine.core.scanner import Scanner
from engine.rulebook.patterns import DIGITS_TO_ZERO, re2_options

__all__ = ["OneLine"]

#: longest line the fast path takes (the scanner's own memo takes no longer ones either)
MAX_LINE = 2048
#: blanks remembered per template; the memo starts again when full
MEMO_MAX = 4096
_SET_MAX_MEM = 64 << 20  # RE2 memory budget of each set (its DFA cache), as the scanner's alternation's


class OneLine:
    """The one-line fast path for the clones of one scanner template; see the module docstring."""

    def __init__(self, template: Scanner):
        self.specs = template._c  # the template's compiled specs: a clone shares this very list
        self.max_line = min(MAX_LINE, template.max_line)
        self._memo: dict[bytes, tuple[tuple[int, Any], ...]] = {}
        # the matchers that are not digit-insensitive: one RE2 set per encoding, asked on every line
        self._sets: list[tuple[Any, list[Any]]] = []
        for utf8 in (False, True):
            members = [c for c in self.specs if not c.digit_insensitive and c.utf8 == utf8]
            if not members:
                continue
            s = re2.Set.SearchSet(re2_options(utf8, _SET_MAX_MEM))
            for c in members:
                s.Add(c.truth)
            s.Compile()
            self._sets.append((s.Match, members))
        self.stats = {"fast": 0, "learned": 0, "full": 0}

    def serves(self, scanner: Any) -> bool:
        """Whether ``scanner`` is a clone of this template (a reload gives new templates)."""
        return isinstance(scanner, Scanner) and scanner._c is self.specs

    def feed(self, scanner: Scanner, data: bytes) -> list[Hit]:
        """``scanner.feed(data)``, by the fast path when ``data`` is one complete line."""
        n = len(data)
        if (
            scanner._pend_total
            or n == 0
            or n > self.max_line + 1
            or data[-1] != 10
            or data.find(b"\n") != n - 1
            or not isinstance(data, bytes)
        ):
            self.stats["full"] += 1
            return scanner.feed(data)
        text = data[:-2] if n > 1 and data[-2] == 13 else data[:-1]
        blank = text.translate(DIGITS_TO_ZERO)
        known = self._memo.get(blank)
        if known is None:  # the first line of this shape: the full scan, remembered
            hits = scanner.feed(data)
            specs = self.specs
            if len(self._memo) >= MEMO_MAX:
                self._memo.clear()
            self._memo[blank] = tuple((h.matcher, h._spans) for h in hits if specs[h.matcher].digit_insensitive)
            self.stats["learned"] += 1
            return hits
        self.stats["fast"] += 1
        specs = self.specs
        found = list(known)
        for match, members in self._sets:
            for k in match(text) or ():
                c = members[k]
                m = c.search(text)
                if m is not None:
                    found.append((c.idx, m))
        if len(found) > 1:
            found.sort(key=_first)
        off, line_no = scanner._off, scanner._lines + 1
        hits = []
        add, new = hits.append, Hit.__new__
        for idx, m in found:
            c = specs[idx]
            h = new(Hit)  # as Scanner._scan makes them
            h.matcher, h.line, h.line_no, h.offset, h.truncated = idx, text, line_no, off, False
            h.blank = blank if c.digit_insensitive else None
            h._c, h._spans, h._groups = c, m, None if m is not None and c.has_groups else {}
            add(h)
        # the scanner's position and counters, as its feed moves them for one complete line
        scanner.bytes_seen += n
        scanner._off = off + n
        scanner._lines = line_no
        scanner.lines_seen += 1
        return hits


def _first(item: tuple[int, Any]) -> int:
    return item[0]
