"""engine.core.oneline, the controller's fast path for a read of exactly one complete line, held
to the scanner's own ``feed`` line by line: the shipped rulebook's test lines (every source
kind), the same lines with other digits (the memo's answer for a blank it learned from another
line, and the matchers that name digits asked afresh), CRLF endings, and reads that are not one
line (several lines, a partial line, the rest of one) in between, which go the full path and
leave the two scanners at the same position."""

from __future__ import annotations

import random

import pytest

from engine.core.oneline import OneLine
from engine.core.scanner import scanner_for
from engine.rulebook import require_rulebook


def _lines() -> list[bytes]:
    """Every line of the shipped rulebook's tests' inputs, then each with its digits changed."""
    book = require_rulebook(tests=True)
    out: list[bytes] = []
    for t in book.book.tests:
        for i in t.inputs:
            out += [ln.encode() for ln in i.lines.splitlines() if ln]
    rng = random.Random(24)
    other = [bytes(rng.choice(b"0123456789") if 48 <= b <= 57 else b for b in ln) for ln in out]
    bench = [
        f"[2026-12-06 10:00:{s:02d}] [INFO] [rank0]: iteration {it:8d}/  100000 | consumed samples: {it * 512:12d} | "
        f"elapsed time per iteration (ms): 4012.5 | lm loss: 2.345678E+00 |".encode()
        for s, it in ((1, 7), (5, 8), (9, 1200), (13, 99999))
    ]
    return out + other + bench


def _key(hits) -> list[tuple]:
    return [(h.matcher, h.line, h.line_no, h.offset, h.groups, h.truncated, h.blank) for h in hits]


@pytest.mark.parametrize("source", ["job", "kernel", "slurm", "any"])
@pytest.mark.parametrize("block", [0, 65536])
def test_one_line_reads_give_the_full_scans_hits_and_position(source, block):
    compiled = require_rulebook()
    full, _ = scanner_for(compiled, source)
    fast, _ = scanner_for(compiled, source)
    full.block = fast.block = block  # a sampled log's scanner (StreamFacts sets it from the pace)
    one = OneLine(fast)
    other, _ = scanner_for(compiled, "kernel" if source != "kernel" else "job")
    assert one.serves(fast) and one.serves(full) and not one.serves(other)
    rng = random.Random(source)
    lines = _lines()
    rng.shuffle(lines)
    hit_lines = 0
    for k, line in enumerate(lines):
        end = b"\r\n" if k % 11 == 0 else b"\n"
        if k % 17 == 0:  # several lines in one read, and a read that stops inside a line
            data = line + end + lines[k - 1] + b"\n" + line[:5]
            reads = [data, line[5:] + end] if len(line) > 5 else [data + b"\n"]
        else:
            reads = [line + end]
        for data in reads:
            want = _key(full.feed(data))
            got = _key(one.feed(fast, data))
            assert got == want, (source, data)
            assert fast.position == full.position and fast.pending == full.pending
            assert (fast.lines_seen, fast.bytes_seen) == (full.lines_seen, full.bytes_seen)
            hit_lines += bool(want)
    assert _key(one.feed(fast, b"")) == _key(full.feed(b"")) == []
    assert _key(fast.flush()) == _key(full.flush())
    # the fast path served most reads, from a memo it learned, and lines with hits were among them
    assert one.stats["fast"] > len(lines) // 3 and one.stats["learned"] > 0 and one.stats["full"] > 0
    assert hit_lines > 20


def test_lines_the_fast_path_does_not_take_go_the_full_path():
    compiled = require_rulebook()
    fast, _ = scanner_for(compiled, "job")
    full, _ = scanner_for(compiled, "job")
    one = OneLine(fast)
    long_line = b"NCCL WARN NET/IB : Got completion from peer " + b"x" * 3000 + b"\n"
    for data in (long_line, b"no newline yet", b" ...then the rest\n", b"\n", b"a\nb\n"):
        assert _key(one.feed(fast, data)) == _key(full.feed(data))
        assert fast.position == full.position
    assert one.stats["full"] == 4 and one.stats["learned"] == 1  # only the empty line was one line
