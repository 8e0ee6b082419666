"""Progress lines sampled in the scanner: a dense training log costs one callback per block of
its bytes, not one per iteration line (issue 24).

A *block spec* is a progress matcher whose lines may be left out (``MatcherSpec.block``; which
ones is ``scanner.matcher_specs``'s choice: no checkpoint, no unit of a table or of peers). On
the hyperscan backend the block specs are kept out of the main database and searched with one
more database in single-match mode: one call reports, per block spec, the first line it matches
in the range scanned. The block specs are in the scanner's main database in that mode, and
the main scan is one call per block, so a dense log costs one callback per block and one pass
over its bytes:

* a block is at most ``block`` bytes (``Scanner.block``; whole lines, so a line longer than
  the block is a block of its own): a dense log keeps a point per block;
* every run of adjacent lines a *boundary* spec hit (``MatcherSpec.boundary``: a
  failure, a warning, a context line; not progress, not a line that only maps ranks to hosts):
  the first progress line after each is reported too (one more call, over the rest of that
  block, with a database of the block specs alone), so whatever follows an error line (the
  job went on, a weak keyword is explained, a new attempt began) is seen as before;
* the last line of each block spec in a part is reported too (the last progress a job printed
  is never lost).

``Scanner.block`` is the stream's own: ``StreamFacts`` sets it from the pace of the progress
points it converted (about ``sampler.PROGRESS_EVERY_S`` of log per block, at most the setting,
``sampler.progress_block()``), and leaves it 0 until that pace is known and wherever a block
would be only a few lines: a log that prints progress every few seconds, a rule test or a
corpus case is not sampled at all.

Everything else of a block spec is left out before a ``Hit`` exists, and is therefore neither
dated nor counted. A line a block spec reports is checked with RE2 as every other hit; where
RE2 refuses hyperscan's candidate, the spec's own database proposes the next ones. The same
single-match scan tells which rulebook-sampled specs (``MatcherSpec.sample``) occur at all, so
that their last line is looked for only where one is. ``block`` 0 reports every line of every
block spec (the full path, ``StreamFacts(sample=False)``): the main scan is then one call per
part, and each block spec it saw is searched again alone from its first line on.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import TYPE_CHECKING, Any, Callable

from engine.core.matching import hs

if TYPE_CHECKING:
    from engine.core.scanner import Scanner

__all__ = ["block_records", "blocks"]


def blocks(buf: bytes, lo: int, hi: int, block: int) -> list[int]:
    """Where the blocks of buf[lo:hi] end: after whole lines, each block at most ``block`` bytes
    (or one line), the last at ``hi``."""
    ends = []
    b = lo
    while b < hi:
        b = _line_end(buf, min(hi, b + block) - 1, hi)
        ends.append(b)
    return ends


def block_records(
    sc: Scanner,
    buf: bytes,
    lo: int,
    hi: int,
    line_at: Callable[[int, int], bytes],
    records: list,
    proposed: list[tuple[int, int]],
    cuts: list[int] | None,
) -> None:
    """Complete ``records`` (``(line start, spec, line, match, None)``) with the block specs'
    lines of buf[lo:hi] that are reported, after the main scan: one per block in ``cuts`` (the
    main scan's, or None: every line), where RE2 refused the main scan's candidate
    (``proposed``), after each boundary, and the last of each spec."""
    in_block = sc._block_set
    firsts: dict[int, int] = {}
    for ls, idx in proposed:
        if idx in in_block and ls < firsts.get(idx, hi):
            firsts[idx] = ls
    if not firsts:
        return
    find = buf.find
    have = {(r[0], r[1]) for r in records if r[1] in in_block}
    specs = sc._c

    def add(idx: int, ls: int) -> bool:
        if (ls, idx) in have:
            return True
        text = line_at(ls, find(b"\n", ls, hi))
        m = specs[idx].search(text)
        if m is None:
            return False
        have.add((ls, idx))
        records.append((ls, idx, text, m, None))
        return True

    if cuts is None:  # the full path: every line of the specs that occur
        for idx, first in firsts.items():
            if _line_end(buf, first, hi) < hi:  # (else its first line is the part's last)
                for ls in sc._candidates(idx, buf, first, hi):
                    add(idx, ls)
        return

    def first_from(idx: int, ls: int, end: int) -> int:
        """The first line from ``ls`` on, before ``end``, that RE2 confirms for ``idx``, or -1."""
        if add(idx, ls):
            return ls
        return next((p for p in sc._candidates(idx, buf, _line_end(buf, ls, end), end) if add(idx, p)), -1)

    last = dict(firsts)
    for ls, idx in proposed:  # where RE2 refused a block's candidate, the block's next lines
        if idx in in_block and (ls, idx) not in have:
            p = first_from(idx, ls, cuts[bisect_right(cuts, ls)])
            if p > last[idx]:
                last[idx] = p
        elif idx in in_block and ls > last[idx]:
            last[idx] = ls
    # the first progress line after each run of adjacent boundary lines, to the next cut
    starts = sorted({r[0] for r in records if specs[r[1]].spec.boundary})
    ends = _run_ends(buf, hi, starts)
    if ends:
        cutset = set(cuts)
        stops = sorted(cutset | set(ends))
        for e in ends:
            if e in cutset:  # a block starts there: the main scan has its first lines
                continue
            stop = stops[bisect_right(stops, e)]
            for idx, ls in _firsts(sc, buf, e, stop).items():
                p = first_from(idx, ls, stop)
                if p > last.get(idx, -1):
                    last[idx] = p
    # the last line of each block spec in the part
    floors = {idx: _line_end(buf, ls, hi) for idx, ls in last.items() if ls >= 0}
    tails: dict[int, tuple] = {}
    sc._last_sampled(buf, lo, hi, floors, line_at, tails)
    for idx, (ls, text, m) in tails.items():
        if (ls, idx) not in have:
            have.add((ls, idx))
            records.append((ls, idx, text, m, None))


def _line_end(buf: bytes, p: int, hi: int) -> int:
    """The start of the line after the one holding byte ``p`` (``hi`` at most)."""
    e = buf.find(b"\n", p, hi)
    return hi if e < 0 else e + 1


def _run_ends(buf: bytes, hi: int, starts: list[int]) -> list[int]:
    """Where each run of adjacent lines that start at ``starts`` (sorted) ends."""
    find = buf.find
    out = []
    n = len(starts)
    for k, ls in enumerate(starts):
        e = find(b"\n", ls, hi) + 1
        if e > 0 and (k + 1 == n or starts[k + 1] != e):
            out.append(e)
    return out


def _firsts(sc: Scanner, buf: bytes, a: int, e: int) -> dict[int, int]:
    """{spec: start of the first line in buf[a:e] that hyperscan proposes for it}: one call of
    the block specs' own single-match database."""
    ends: dict[int, int] = {}

    def on_match(ident: int, _from: int, to: int, _flags: int, _ctx: Any) -> None:
        if ident not in ends:
            ends[ident] = to

    db = sc._block_db()
    if db is None:  # (hyperscan refused it) each spec's first candidate line
        return {idx: starts[0] for idx in sc._block if (starts := sc._candidates(idx, buf, a, e))}
    scratch = sc._hs_block_scratch
    if scratch is None:
        scratch = sc._hs_block_scratch = hs.Scratch(db)
    db.scan(memoryview(buf)[a:e], match_event_handler=on_match, scratch=scratch)
    rfind = buf.rfind
    return {idx: rfind(b"\n", 0, a + to - 1) + 1 for idx, to in ends.items()}
