"""Progress lines sampled in the scanner: a dense training log costs one callback per block of
its bytes, not one per iteration line (issue 24).

A *block spec* is a progress matcher whose lines may be left out (``MatcherSpec.block``; which
ones is ``scanner.matcher_specs``'s choice: no checkpoint, no unit of a table or of peers). On
the hyperscan backend the block specs are kept out of the main database and searched with one
more database in single-match mode: one call reports, per block spec, the first line it matches
in the range scanned. A part of a fed chunk is cut into segments, and each segment costs one
such call:

* a block of at most ``block`` bytes (``Scanner.block``; whole lines, so a line longer than
  the block is a block of its own) ends a segment, so a dense log keeps a point per block;
* so does every run of adjacent lines a *boundary* spec hit (``MatcherSpec.boundary``: a
  failure, a warning, a context line; not progress, not a line that only maps ranks to hosts):
  the first progress line after each is reported, so whatever follows an error line (the job
  went on, a weak keyword is explained, a new attempt began) is seen as before;
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
single-match call tells which rulebook-sampled specs (``MatcherSpec.sample``) occur at all, so
that their last line is looked for only where one is. ``block`` 0 reports every line of every
block spec (the full path, ``StreamFacts(sample=False)``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from engine.core.matching import hs

if TYPE_CHECKING:
    from engine.core.scanner import Scanner

__all__ = ["block_records"]


def block_records(
    sc: Scanner, buf: bytes, lo: int, hi: int, line_at: Callable[[int, int], bytes], records: list
) -> set[int]:
    """Append to ``records`` (``(line start, spec, line, match, None)``) the lines of the block
    specs in buf[lo:hi] that are reported, and return the rulebook-sampled specs that occur in
    it."""
    find = buf.find
    in_block = sc._block_set
    have = {(r[0], r[1]) for r in records if r[1] in in_block}  # cut heads, checked before
    search = [c.search for c in sc._c]

    def add(idx: int, ls: int) -> bool:
        if (ls, idx) in have:
            return True
        text = line_at(ls, find(b"\n", ls, hi))
        m = search[idx](text)
        if m is None:
            return False
        have.add((ls, idx))
        records.append((ls, idx, text, m, None))
        return True

    if sc.block <= 0:  # the full path: every line of the specs that occur at all
        present = set()
        for idx, first in _firsts(sc, buf, lo, hi).items():
            if idx not in in_block:
                present.add(idx)
            elif _line_end(buf, first, hi) >= hi:
                add(idx, first)  # its first line is the part's last: a line read alone
            else:
                for ls in sc._candidates(idx, buf, first, hi):
                    add(idx, ls)
        return present

    block = sc.block
    specs = sc._c
    cuts = _cuts(buf, lo, hi, block, sorted({r[0] for r in records if specs[r[1]].spec.boundary}))
    sampled_seen: set[int] = set()
    last: dict[int, int] = {}
    a = lo
    for e in cuts:
        if e <= a:
            continue
        for idx, ls in _firsts(sc, buf, a, e).items():
            if idx not in in_block:
                sampled_seen.add(idx)  # a rulebook-sampled spec: only whether it occurs
                continue
            if not add(idx, ls):  # RE2 refused hyperscan's candidate: the next ones
                ls = next((p for p in sc._candidates(idx, buf, _line_end(buf, ls, e), e) if add(idx, p)), -1)
                if ls < 0:
                    continue
            last[idx] = max(ls, last.get(idx, ls))
        a = e
    # the last line of each block spec in the part
    floors = {idx: _line_end(buf, ls, hi) for idx, ls in last.items()}
    tails: dict[int, tuple] = {}
    sc._last_sampled(buf, lo, hi, floors, line_at, tails)
    for idx, (ls, text, m) in tails.items():
        if (ls, idx) not in have:
            have.add((ls, idx))
            records.append((ls, idx, text, m, None))
    return sampled_seen


def _line_end(buf: bytes, p: int, hi: int) -> int:
    """The start of the line after the one holding byte ``p`` (``hi`` at most)."""
    e = buf.find(b"\n", p, hi)
    return hi if e < 0 else e + 1


def _cuts(buf: bytes, lo: int, hi: int, block: int, starts: list[int]) -> list[int]:
    """Where segments of buf[lo:hi] end: after each block of ``block`` bytes (whole lines) and
    after each run of adjacent lines that start at ``starts`` (sorted), and at ``hi``."""
    ends = set()
    b = lo
    while b < hi:
        b = _line_end(buf, min(hi, b + block) - 1, hi)
        ends.add(b)
    find = buf.find
    n = len(starts)
    for k, ls in enumerate(starts):
        e = find(b"\n", ls, hi) + 1
        if e > 0 and (k + 1 == n or starts[k + 1] != e):
            ends.add(e)
    return sorted(ends)


def _firsts(sc: Scanner, buf: bytes, a: int, e: int) -> dict[int, int]:
    """{spec: start of the first line in buf[a:e] that hyperscan proposes for it}: one call."""
    ends: dict[int, int] = {}

    def on_match(ident: int, _from: int, to: int, _flags: int, _ctx: Any) -> None:
        if ident not in ends:
            ends[ident] = to

    scratch = sc._hs_block_scratch
    if scratch is None:
        scratch = sc._hs_block_scratch = hs.Scratch(sc._hs_block)
    view = buf if a == 0 and e == len(buf) else memoryview(buf)[a:e]
    sc._hs_block.scan(view, match_event_handler=on_match, scratch=scratch)
    rfind = buf.rfind
    return {idx: rfind(b"\n", 0, a + to - 1) + 1 for idx, to in ends.items()}
