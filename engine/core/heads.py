"""Long lines: found in a buffer, cut to ``max_line`` bytes, and their heads matched.

A pattern that can match a cut head but not the whole line (``$ \\z \\b \\B``, UTF-8: a
*cut-sensitive* spec) is checked on each head directly. A head is up to ``max_line`` (64 KiB)
bytes, and a rulebook has dozens of cut-sensitive specs: RE2 over each head once per spec cost
an eighth of a replay of a log with a few hundred long lines. On the hyperscan backend one scan
of the main database over the head says which of them can match it at all (its copies of the
patterns drop anchors, so it proposes a superset: it never misses one), and RE2, the truth, is
asked only about those; a spec outside the main database is asked directly, as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engine.core.scanner import Scanner

__all__ = ["long_lines", "head_records"]


def long_lines(sc: Scanner, buf: bytes, lo: int, hi: int) -> dict[int, int]:
    """{start: end} of the lines in buf[lo:hi] longer than max_line (they are cut).

    Windows of max_line+1 bytes hop from line start to line start (after the last newline in
    the window), so only a window without a newline, i.e. a long line, costs more.
    """
    ml = sc.max_line
    width = ml + 1
    trunc: dict[int, int] = {}
    p = lo
    while p + width < hi:
        q = buf.rfind(b"\n", p, p + width)
        if q >= 0:
            p = q + 1
            continue
        e = buf.find(b"\n", p + width, hi)
        if e < 0:
            e = hi - 1
        if e - p - (1 if buf[e - 1] == 13 else 0) > ml:
            trunc[p] = e
        p = e + 1
    sc.long_lines_cut += len(trunc)
    return trunc


def _proposed(sc: Scanner, head: bytes) -> set[int]:
    """The specs of the main hyperscan database that can match ``head`` (a superset)."""
    found: set[int] = set()
    add = found.add

    def on_match(ident: int, _from: int, _to: int, _flags: int, _ctx: Any) -> None:
        add(ident)

    sc._hs_main.scan(head + b"\n", match_event_handler=on_match, scratch=sc._hs_scratch)
    return found


def head_records(
    sc: Scanner, buf: bytes, trunc: dict[int, int], records: list, tails: dict[int, tuple], floors: dict[int, int]
) -> None:
    """Complete ``records`` with the cut-sensitive specs' hits on the heads of the cut lines
    ``trunc`` that the scans of whole lines did not see; a sampled spec's last such head goes
    to ``tails`` (and its floor in ``floors`` rises to it)."""
    ml = sc.max_line
    seen = {(r[0], r[1]) for r in records if r[0] in trunc}
    in_main = sc._in_main if sc._hs_main is not None else frozenset()
    proposed: dict[int, set[int]] = {}
    heads: dict[int, bytes] = {}
    for c in sc._cut_sensitive:
        for ls in sorted(trunc, reverse=c.spec.sample):
            if (ls, c.idx) in seen:
                continue
            text = heads.get(ls)
            if text is None:
                text = heads[ls] = buf[ls : ls + ml]
            if c.idx in in_main:
                may = proposed.get(ls)
                if may is None:
                    may = proposed[ls] = _proposed(sc, text)
                if c.idx not in may:
                    continue
            m = c.search(text)
            if m is None:
                continue
            if not c.spec.sample:
                records.append((ls, c.idx, text, m, None))
                continue
            tails[c.idx] = (ls, text, m)
            floors[c.idx] = ls
            break
