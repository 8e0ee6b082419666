"""Cut lines' heads: hyperscan proposes which cut-sensitive specs to ask RE2 about
(engine/core/heads.py); the answers are those of asking RE2 about every spec on every head."""

from __future__ import annotations

import random
from unittest import mock

import pytest

from engine.core import heads
from engine.core import scanner as scanner_module
from engine.core.matching import hyperscan_available
from engine.core.scanner import matcher_specs, matchers_for, Scanner
from engine.rulebook import require_rulebook

pytestmark = pytest.mark.skipif(not hyperscan_available(), reason="hyperscan not installed")

#: what the head of a cut line may end in: a word at the cut ($, \b), a whole failure, filler
ENDINGS = [
    b" Killed",
    b"] Killed",
    b"NCCL WARN Call to ibv_poll_cq failed",
    b"Traceback (most recent call last):",
    b"torch.distributed.DistBackendError: NCCL error",
    b"iteration 1200/ 5000 | lm loss: 2.1",
    b"exitcode  : -9",
    b"RuntimeError: CUDA error: an illegal memory access was encountered",
    b"rank 3 step time: 1.92 s",
    b"abc",
]


def _log(seed: int, max_line: int) -> bytes:
    rng = random.Random(seed)
    # each ending once at the cut with word characters after it: a \b or $ there holds on the
    # head only, which the scan of the whole line cannot see
    lines = [b"." * (max_line - len(head)) + head + b"zz" for head in ENDINGS]
    for _ in range(40):
        head = rng.choice(ENDINGS)
        if rng.random() < 0.7:  # a cut line: the head ends with the ending, the rest is cut off
            fill = bytes(rng.choice(b"ab .:[]0123456789") for _ in range(max_line - len(head)))
            tail = rng.choice([b"", b" more", b"x" * rng.randint(1, 50), b"\r"])
            lines.append(fill + head + tail + b"z" * rng.randint(1, 30))
        else:
            lines.append(rng.choice(ENDINGS))
    rng.shuffle(lines)
    return b"\n".join(lines) + b"\n"


def _hits(sc: Scanner, data: bytes) -> list[tuple]:
    out = [(h.matcher, h.line_no, h.offset, h.truncated, tuple(sorted(h.groups.items()))) for h in sc.feed(data)]
    return out + [(h.matcher, h.line_no, h.offset, h.truncated) for h in sc.flush()]


@pytest.mark.parametrize("seed", range(4))
def test_proposed_heads_give_what_every_spec_on_every_head_gives(seed):
    compiled = require_rulebook()
    specs = matcher_specs(compiled)
    job = [specs[i] for i in matchers_for(compiled, "job")]
    max_line = 4096
    data = _log(seed, max_line)
    proposed = Scanner(job, backend="hyperscan", max_line=max_line)
    assert proposed._cut_sensitive and proposed._in_main
    everything = Scanner(job, backend="hyperscan", max_line=max_line)
    every_spec = set(range(len(job)))
    with mock.patch.object(heads, "_proposed", lambda sc, head: every_spec):
        full = _hits(everything, data)
    got = _hits(proposed, data)
    assert got == full
    with mock.patch.object(scanner_module, "head_records", lambda *a: None):
        without = _hits(Scanner(job, backend="hyperscan", max_line=max_line), data)
    # the test needs cut-sensitive hits on cut heads; since hyperscan's main copies have no word
    # boundary (hsdb._relaxed), the scan of the whole line proposes most of them as well, and
    # the answers with and without the head check are the same there
    cut_sensitive = {c.idx for c in proposed._cut_sensitive}
    assert any(h[0] in cut_sensitive and h[3] for h in full)
    assert set(without) <= set(full)
    assert proposed.long_lines_cut == everything.long_lines_cut > 0
