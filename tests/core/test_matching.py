"""Tests of engine.core.scanner and the pattern dialect (engine.rulebook.patterns): table-driven cases on every backend, check_pattern messages, resume
exactness, and hypothesis differential tests (hyperscan vs re2 vs a line-by-line Python ``re``
oracle) on random logs cut into random chunks."""

from __future__ import annotations

import bisect
import importlib.util
import random
import re
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.core import scanner as scanner_module
from engine.core.matching import CompiledSpec, Hit, MatcherSpec, hyperscan_available
from engine.core.scanner import Scanner
from engine.rulebook.patterns import check_pattern

BACKENDS = [
    pytest.param(
        "hyperscan",
        marks=pytest.mark.skipif(not hyperscan_available(), reason="hyperscan not installed"),
    ),
    "re2",
]
ROOT = Path(__file__).resolve().parents[2]


def run(specs, chunks, backend, max_line=65536):
    sc = Scanner(specs, backend=backend, max_line=max_line)
    hits: list[Hit] = []
    for c in chunks:
        hits += sc.feed(c)
    hits += sc.flush()
    return sc, hits


def tup(h: Hit):
    return (h.matcher, h.line, h.line_no, h.offset, h.groups, h.truncated)


# ------------------------------------------------------------------------------------------------
# table-driven cases

SPECS = [
    MatcherSpec("nccl", r"NCCL (?P<lvl>WARN|ERROR)"),
    MatcherSpec("oom", r"out of memory", ignore_case=True),
    MatcherSpec("end", r"done$"),
    MatcherSpec("iter", r"iter (?P<n>[0-9]+)", sample=True),
]
W = {"lvl": "WARN"}
E = {"lvl": "ERROR"}

CASES = [
    ("one line", [b"NCCL WARN x\n"], 65536, [(0, b"NCCL WARN x", 1, 0, W, False)]),
    ("no match", [b"all good\nnothing here\n"], 65536, []),
    ("split mid-line", [b"foo\nNCC", b"L ERROR y\n"], 65536, [(0, b"NCCL ERROR y", 2, 4, E, False)]),
    (
        "byte by byte",
        [bytes([b]) for b in b"a\nNCCL WARN\nz"],
        65536,
        [(0, b"NCCL WARN", 2, 2, W, False)],
    ),
    ("crlf strips the cr", [b"all done\r\n", b"x\r\n"], 65536, [(2, b"all done", 1, 0, {}, False)]),
    ("cr and lf in two chunks", [b"all done\r", b"\nnext"], 65536, [(2, b"all done", 1, 0, {}, False)]),
    ("inner cr stays", [b"al\rl done\r\n"], 65536, [(2, b"al\rl done", 1, 0, {}, False)]),
    ("partial last line at flush", [b"x\nOut Of Memory"], 65536, [(1, b"Out Of Memory", 2, 2, {}, False)]),
    ("partial last line with cr", [b"x\nall done\r"], 65536, [(2, b"all done", 2, 2, {}, False)]),
    (
        "several specs on one line, spec order",
        [b"NCCL WARN: out of memory, done\n"],
        65536,
        [
            (0, b"NCCL WARN: out of memory, done", 1, 0, W, False),
            (1, b"NCCL WARN: out of memory, done", 1, 0, {}, False),
            (2, b"NCCL WARN: out of memory, done", 1, 0, {}, False),
        ],
    ),
    (
        "long line: cut, matched on its head",
        [b"NCCL WARN " + b"x" * 100 + b"\n"],
        10,
        [(0, b"NCCL WARN ", 1, 0, W, True)],
    ),
    ("long line: match only past the head is not seen", [b"x" * 20 + b"NCCL WARN\n", b"ok\n"], 10, []),
    (
        "long line across chunks, next line offset exact",
        [b"abc", b"de done", b"X" * 50, b"Z\nall done\n"],
        8,
        [(2, b"all done", 2, 62, {}, False)],
    ),
    ("cut head is the line for anchors", [b"all done and more\n"], 8, [(2, b"all done", 1, 0, {}, True)]),
    ("exactly max_line plus cr is not cut", [b"all done\r\n"], 8, [(2, b"all done", 1, 0, {}, False)]),
    ("max_line plus one is cut", [b"all done!\n"], 8, [(2, b"all done", 1, 0, {}, True)]),
    (
        "invalid utf-8 and NUL",
        [b"\xff\x00NCCL WARN \xfe\n"],
        65536,
        [(0, b"\xff\x00NCCL WARN \xfe", 1, 0, W, False)],
    ),
    (
        "sampled: one per feed, the last",
        [b"iter 1\niter 2\nx\n", b"iter 3\n"],
        65536,
        [(3, b"iter 2", 2, 7, {"n": "2"}, False), (3, b"iter 3", 4, 16, {"n": "3"}, False)],
    ),
    (
        "sampled sorted among the other hits",
        [b"iter 1\nNCCL WARN\niter 2\nNCCL ERROR\n"],
        65536,
        [
            (0, b"NCCL WARN", 2, 7, W, False),
            (3, b"iter 2", 3, 17, {"n": "2"}, False),
            (0, b"NCCL ERROR", 4, 24, E, False),
        ],
    ),
    ("sampled at flush", [b"iter 5"], 65536, [(3, b"iter 5", 1, 0, {"n": "5"}, False)]),
    (
        "sampled: a pending line that ends in the next feed counts for that feed",
        [b"iter 1\niter", b" 2\nx\n"],
        65536,
        [(3, b"iter 1", 1, 0, {"n": "1"}, False), (3, b"iter 2", 2, 7, {"n": "2"}, False)],
    ),
    (
        "sampled: last match far from the end of a big chunk",
        [b"iter 9\n" + b"noise line\n" * 20000],
        65536,
        [(3, b"iter 9", 1, 0, {"n": "9"}, False)],
    ),
    (
        "sampled: heartbeat on every line of a big chunk",
        [b"".join(b"iter %d\n" % i for i in range(30000))],
        65536,
        [(3, b"iter 29999", 30000, sum(len(b"iter %d\n" % i) for i in range(29999)), {"n": "29999"}, False)],
    ),
    (
        "sampled: first window edge falls inside the matching line",
        [b"iter 7\n" + b"." * 16379 + b"\n"],  # 16 KiB from the end is inside "iter 7"
        65536,
        [(3, b"iter 7", 1, 0, {"n": "7"}, False)],
    ),
    ("empty lines and empty chunks", [b"", b"\n\n", b"", b"done\n"], 65536, [(2, b"done", 3, 2, {}, False)]),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name,chunks,max_line,expected", CASES, ids=[c[0] for c in CASES])
def test_cases(backend, name, chunks, max_line, expected):
    _, hits = run(SPECS, chunks, backend, max_line)
    assert [tup(h) for h in hits] == expected


GROUP_SPECS = [MatcherSpec("msg", r"msg=(?P<m>\S+)(?: code=(?P<code>[0-9]+))?")]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "chunks,groups",
    [
        ([b"msg=caf\xc3", b"\xa9!\n"], {"m": "caf\u00e9!"}),  # chunk boundary inside a character
        ([b"msg=\xff\n"], {"m": "\ufffd"}),  # invalid utf-8 is replaced, never raised
        ([b"msg=a code=7\n"], {"m": "a", "code": "7"}),
        ([b"x \xc3\xa9 msg=b\xc3\xa9 code=12\n"], {"m": "b\u00e9", "code": "12"}),  # spans after a non-ASCII byte
    ],
)
def test_groups(backend, chunks, groups):
    _, hits = run(GROUP_SPECS, chunks, backend)
    assert [h.groups for h in hits] == [groups]  # the unmatched group 'code' is omitted
    # one group read alone (decoded on its own, before or after the others) says the same
    _, again = run(GROUP_SPECS, chunks, backend)
    assert [(h.group("m"), h.group("code"), h.group("nosuch")) for h in again] == [
        (groups["m"], groups.get("code"), None)
    ]
    assert [h.groups for h in again] == [groups] and again == hits


@pytest.mark.parametrize("backend", BACKENDS)
def test_counters_and_position(backend):
    sc, hits = run(SPECS, [b"a\r\n" + b"y" * 30 + b"\nNCCL", b" WARN\nrest"], backend, max_line=10)
    assert sc.lines_seen == 4
    assert sc.long_lines_cut == 1
    assert sc.bytes_seen == 3 + 31 + 4 + 6 + 4
    assert sc.position == (48, 4)
    assert [tup(h) for h in hits] == [(0, b"NCCL WARN", 3, 34, W, False)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_sampled_on_cut_heads_takes_the_last(backend):
    # "$" matches at the end of the cut head, not of the whole line: those lines are no buffer
    # candidates and must be found through the heads
    specs = [MatcherSpec("saved", r"saved (?P<n>[0-9]+)$", sample=True)]
    _, hits = run(specs, [b"saved 11xx\nsaved 22yy\nnoise\nsaved 3\n" + b"z" * 40 + b"\n"], backend, 8)
    assert [tup(h) for h in hits] == [(0, b"saved 3", 4, 28, {"n": "3"}, False)]
    _, hits = run(specs, [b"saved 11xx\nsaved 22yy\nnoise\nsaved 3x\n"], backend, 8)
    assert [tup(h) for h in hits] == [(0, b"saved 22", 2, 11, {"n": "22"}, True)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_anchors_are_per_line(backend):
    specs = [
        MatcherSpec("start", r"^Traceback"),
        MatcherSpec("whole", r"\AOK\z"),
        MatcherSpec("word", r"\bxid\b"),
    ]
    data = [b"Traceback (x)\n  Traceback\nOK\r\nOK!\nxid 79\nxids\n"]
    _, hits = run(specs, data, backend)
    assert [(h.matcher, h.line_no) for h in hits] == [(0, 1), (1, 3), (2, 5)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_spellings_that_differ_between_engines(backend):
    # RE2: \s has no \v, \S matches \v, \v is the VT byte; PCRE reads all three differently
    specs = [
        MatcherSpec("S", r"a\Sb"),
        MatcherSpec("notS", r"c[^\s]d"),
        MatcherSpec("vt", r"e\vf"),
        MatcherSpec("s", r"g\sh"),
    ]
    _, hits = run(specs, [b"a\x0bb c\x0bd e\x0bf g\x0bh\n"], backend)
    assert [h.matcher for h in hits] == [0, 1, 2]


@pytest.mark.parametrize(
    "pattern, anchored",
    [
        (r"^[ \t]*(?:[a-z]{1,9}[ \t]+[0-9.]+){2,}$", rb"^[ \t]*(?:[a-z]{1,9}[ \t]+[0-9.]+){2,}"),
        # per alternative: ": " is no literal to key on, "NCCL WARN" is
        (r"(?m)NCCL WARN|^(?:\[x\]:?)*[a-z]+: \S", rb"(?m)NCCL WARN|^(?:\[x\]:?)*[a-z]+: [^\t\n\f\r ]"),
        (r"ab|^cd|(?i)^[0-9]+x", rb"ab|^cd|(?i)^[0-9]+x"),
        (r"^Traceback", None),  # a literal: hyperscan keys on it, an anchor only adds work
        (r"^(?:\[\w+\])*(?:ValueError|KeyError)", None),
        (r"[a-z]+ [0-9]+$", None),
    ],
)
def test_line_anchor_kept_for_hyperscan_where_no_literal(pattern, anchored):
    c = CompiledSpec(0, MatcherSpec("p", pattern))
    assert c.hs_multiline == (anchored is not None)
    if anchored is not None:
        assert c.hs_src == anchored


def test_hyperscan_fallback_per_spec():
    if not hyperscan_available():
        pytest.skip("hyperscan not installed")
    specs = [
        MatcherSpec("plain", r"NCCL WARN"),
        MatcherSpec("ungreedy", r"(?U)a+b"),  # hyperscan refuses (?U)
        MatcherSpec("unicode", "[\\p{L}]+\u00fc"),  # UTF-8 semantics: RE2 only
        MatcherSpec("anybyte", r"x\Cy"),
        MatcherSpec("sampled_end", r"saved$", sample=True),
    ]
    sc = Scanner(specs, backend="hyperscan")
    assert sc.backend == "hyperscan"
    assert sc.hyperscan_specs == {0, 4}
    data = [b"NCCL WARN\naab\n" + "\u00e4\u00fc".encode() + b"\nx\xffy\nsaved\r\nsaved?\n"]
    hs_hits = [tup(h) for h in run(specs, data, "hyperscan")[1]]
    assert hs_hits == [tup(h) for h in run(specs, data, "re2")[1]]
    assert [h[0] for h in hs_hits] == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("backend", BACKENDS)
def test_utf8_pattern_matches_characters(backend):
    # non-ASCII in the pattern: UTF-8 semantics; ASCII pattern: bytes
    specs = [
        MatcherSpec("accent", "caf[\u00e9\u00e8]!"),
        MatcherSpec("chardot", "^\u00e9.$"),
        MatcherSpec("bytedot", r"^.$"),
    ]
    data = ["caf\u00e9!\ncaf".encode(), b"\xc3!\n" + "\u00e9\u00e9\n".encode() + b"\xc3\xa9\xff\n\xff\n"]
    _, hits = run(specs, data, backend)
    assert [(h.matcher, h.line_no) for h in hits] == [(0, 1), (1, 3), (2, 5)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_many_hits_and_report_storms(backend):
    specs = [MatcherSpec("letters", r"[a-z]+"), MatcherSpec("nccl", r"NCCL WARN")]
    data = b"a" * 200_000 + b"\nNCCL WARN\n" + b"ab\n" * 10_000
    sc, hits = run(specs, [data], backend)
    assert len(hits) == 1 + 1 + 10_000
    assert tup(hits[0]) == (0, b"a" * 65536, 1, 0, {}, True)
    assert tup(hits[1]) == (1, b"NCCL WARN", 2, 200_001, {}, False)
    assert all(h.line == b"ab" for h in hits[2:])
    assert hits[-1].line_no == 10_002


@pytest.mark.parametrize("backend", BACKENDS)
def test_bytes_like_input_and_reset_drops_the_pending_line(backend):
    sc = Scanner(SPECS, backend=backend)
    assert sc.feed(bytearray(b"NCCL WARN\nNCCL ERR")) != []
    assert sc.position == (10, 1)
    sc.reset(100, 7)
    hits = sc.feed(memoryview(b"OR\nNCCL ERROR\n")) + sc.flush()
    assert [tup(h) for h in hits] == [(0, b"NCCL ERROR", 9, 103, E, False)]
    assert sc.position == (114, 9)


def test_auto_prefers_hyperscan():
    sc = Scanner(SPECS)
    assert sc.backend == ("hyperscan" if hyperscan_available() else "re2")
    with pytest.raises(ValueError, match="unknown backend"):
        Scanner(SPECS, backend="grep")


# ------------------------------------------------------------------------------------------------
# check_pattern


@pytest.mark.parametrize(
    "pattern,needle",
    [
        (r"(a)\1", "backreference"),
        (r"(?P<x>a)(?P=x)", "invalid"),
        (r"(?=x)", "look-ahead"),
        (r"a(?!x)", "look-ahead"),
        (r"(?<=x)a", "look-behind"),
        (r"(?<!x)a", "look-behind"),
        (r"a*", "empty string"),
        (r"x|", "empty string"),
        (r"\b", "empty string"),
        (r"^", "empty string"),
        ("", "empty"),
        (r"[a", "invalid RE2 pattern: missing ]"),
        (r"a(", "invalid RE2 pattern: missing )"),
        (r"a{2,1}", "invalid RE2 pattern"),
        (r"a++", "possessive"),
    ],
)
def test_check_pattern_rejects(pattern, needle):
    msg = check_pattern(pattern)
    assert msg is not None and needle in msg
    assert "\n" not in msg


@pytest.mark.parametrize(
    "pattern", [r"NCCL WARN", r"(?P<x>a)b", r"(?<x>a)b", "\u00e9+", r"\Qa.b", r"x{,2}", r"(?i)kernel"]
)
def test_check_pattern_accepts(pattern):
    assert check_pattern(pattern) is None


def test_scanner_rejects_bad_spec():
    with pytest.raises(ValueError, match="'bad'.*look-ahead"):
        Scanner([MatcherSpec("ok", "x"), MatcherSpec("bad", "(?=y)")])


# ------------------------------------------------------------------------------------------------
# resume exactness


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("split", [0, 1, 2, 3, 5])
def test_position_and_reset_resume_exactly(backend, split):
    specs = [s for s in SPECS if not s.sample]
    chunks = [b"NCCL WARN a\r\nxx", b"x all done\n" + b"L" * 40, b"ong\nout of memory\n", b"NCCL ERROR", b"\ndone"]
    _, full = run(specs, chunks, backend, max_line=16)
    first = Scanner(specs, backend=backend, max_line=16)
    before = [h for c in chunks[:split] for h in first.feed(c)]
    offset, lines = first.position
    stream = b"".join(chunks)
    second = Scanner(specs, backend=backend, max_line=16)
    second.reset(offset, lines)
    rest = stream[offset:]
    after = second.feed(rest[:7]) + second.feed(rest[7:]) + second.flush()
    assert [tup(h) for h in before + after] == [tup(h) for h in full]
    assert second.position == (len(stream), 6)


# ------------------------------------------------------------------------------------------------
# differential tests

ORACLE_POOL = [
    MatcherSpec("nccl", r"NCCL (?P<lvl>WARN|ERROR) (?P<what>[a-z]+)"),
    MatcherSpec("err", r"error", ignore_case=True),
    MatcherSpec("tb", r"^Traceback"),
    MatcherSpec("tmo", r"timeout$"),
    MatcherSpec("dot", r"a.c"),
    MatcherSpec("xid", r"\bxid (?P<code>[0-9]+)\b"),
    MatcherSpec("bin", r"[^ -~]{2}"),
    MatcherSpec("alt", r"(?i)ok|fail(?:ed)?"),
    MatcherSpec("whole", r"\AOK\z"),
    MatcherSpec("rep", r"[0-9]{3}x"),
    MatcherSpec("ws", r"a\sb"),
    MatcherSpec("iter", r"iteration (?P<it>[0-9]+)", sample=True),
    MatcherSpec("saved", r"saved (?P<n>[0-9]+)$", sample=True),
    MatcherSpec("nul", r"\x00\w", sample=True),
    # no literal to key on: hyperscan's copy keeps the line anchor (matching._line_anchored)
    MatcherSpec("tbl", r"^[ \t]*[a-z]{1,3}\s?[0-9]+[ \t]*$"),
    MatcherSpec("altanchor", r"xid [0-9]|^(?:[A-Z][a-z]|\[x\])+\s", sample=True),
    # wide bounds: unbounded in hyperscan's main database (hsdb._relaxed), RE2 keeps them
    MatcherSpec("wide", r"NCCL[^\n]{0,16}timeout"),
    MatcherSpec("widelazy", r"(?:er){1,20}?ror [a-z ]{16,17}$"),
    # alternatives: one hyperscan expression each (hsdb._split); a \s gap stays in its line
    MatcherSpec("gapalt", r"Pull(?::|\s{2,}[^\n]{0,20}?\s)[Pp]ull|Start\s+x|[^\s]Z\s"),
]
# RE2 spellings Python's re lacks: only compared between the two backends
EXTRA_POOL = [
    MatcherSpec("quote", r"\Q[x]\E"),
    MatcherSpec("posix", r"[[:upper:]]{2}[[:digit:]]"),
    MatcherSpec("ungreedy", r"(?U)a+c"),
    MatcherSpec("S", r"a\Sb"),
    MatcherSpec("hexcase", r"\x41\x62", ignore_case=True),
    MatcherSpec("accent", "\u00e9+"),
    MatcherSpec("anyu", r"^\pL\PL"),
    MatcherSpec("end2", r"b$|^z", sample=True),
]
FULL_POOL = ORACLE_POOL + EXTRA_POOL

FRAGS = [
    b"NCCL WARN timeout",
    b"0123456789ab",
    b"NCCL ERROR x",
    b"error",
    b"ERROR",
    b"Traceback",
    b"timeout",
    b"iteration 12",
    b"iteration 7",
    b"saved 3",
    b"abc",
    b"a\xffc",
    b"xid 79",
    b"xid",
    b"OK",
    b"ok",
    b"FAILED",
    b"a b",
    b"a\tb",
    b"a\x0bb",
    b"123x",
    b" ",
    b"\r",
    b"\x00",
    b"\x00_",
    b"\xff\xfe",
    "\u00e9".encode(),
    b"\xc3",
    b"z" * 20,
    b"[x]",
    b"AB1",
    b"AbaB",
]

line_st = st.one_of(
    st.lists(st.sampled_from(FRAGS), max_size=6).map(b"".join),
    st.binary(max_size=12).map(lambda b: b.replace(b"\n", b"")),
)


@st.composite
def logs(draw):
    lines = draw(st.lists(line_st, max_size=40))
    ends = draw(st.lists(st.sampled_from([b"\n", b"\r\n"]), min_size=len(lines), max_size=len(lines)))
    data = b"".join(line + end for line, end in zip(lines, ends))
    if draw(st.booleans()):
        data += draw(line_st)
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=8)))
    chunks = [data[a:b] for a, b in zip([0] + cuts, cuts + [len(data)])]
    max_line = draw(st.sampled_from([1, 3, 8, 20, 65536]))
    return chunks, max_line


def _python_spelling(p: str) -> str:
    """RE2's spelling in Python's: \\z is \\Z, and RE2's \\s has no \\v (inside a class too:
    ``[^\\s]`` is no space)."""
    out, i, n, in_class = [], 0, len(p), False
    while i < n:
        c = p[i]
        if c == "\\" and i + 1 < n:
            e = p[i : i + 2]
            out.append(
                ("\\t\\n\\f\\r " if in_class else "[\\t\\n\\f\\r ]") if e == "\\s" else "\\Z" if e == "\\z" else e
            )
            i += 2
            continue
        if c == "[" and not in_class:
            in_class = True
            j = i + 1 + (p[i + 1 : i + 2] == "^")
            j += p[j : j + 1] == "]"  # a leading ] is a literal
            out.append(p[i:j])
            i = j
            continue
        if c == "]" and in_class:
            in_class = False
        out.append(c)
        i += 1
    return "".join(out)


def oracle(specs, chunks, max_line):
    """Line by line with Python's re: which feed call completes a line decides sampling."""
    data = b"".join(chunks)
    py = [_python_spelling(s.pattern) for s in specs]
    regs = [re.compile(p.encode(), re.IGNORECASE if s.ignore_case else 0) for p, s in zip(py, specs)]
    ends, total = [], 0
    for c in chunks:
        total += len(c)
        ends.append(total)
    calls: dict[int, list] = {}
    pos = line_no = 0
    while pos < len(data):
        nl = data.find(b"\n", pos)
        stop = len(data) if nl < 0 else nl
        call = len(chunks) if nl < 0 else bisect.bisect_right(ends, nl)
        raw = data[pos:stop]
        content = raw[:-1] if raw.endswith(b"\r") else raw
        line_no += 1
        calls.setdefault(call, []).append((line_no, pos, content[:max_line], len(content) > max_line))
        pos = stop + 1
    out = []
    for call in sorted(calls):
        found = []
        last: dict[int, tuple] = {}
        for line_no, off, line, cut in calls[call]:
            for i, (spec, rx) in enumerate(zip(specs, regs)):
                m = rx.search(line)
                if m is None:
                    continue
                groups = {k: v.decode("utf-8", "replace") for k, v in m.groupdict().items() if v is not None}
                item = (i, line, line_no, off, groups, cut)
                if spec.sample:
                    last[i] = item
                else:
                    found.append(item)
        found += last.values()
        out += sorted(found, key=lambda t: (t[2], t[0]))
    return out


_scanners: dict = {}


def scanner(pool, backend, max_line):
    key = (tuple(pool), backend, max_line)
    if key not in _scanners:
        _scanners[key] = Scanner(pool, backend=backend, max_line=max_line)
    sc = _scanners[key]
    sc.reset()
    return sc


def scan(pool, backend, chunks, max_line):
    sc = scanner(pool, backend, max_line)
    hits = [tup(h) for c in chunks for h in sc.feed(c)]
    return hits + [tup(h) for h in sc.flush()]


SAMPLED_POOL = [MatcherSpec(s.id, s.pattern, sample=True, ignore_case=s.ignore_case) for s in ORACLE_POOL]
DIFF = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@DIFF
@given(logs())
def test_differential_against_python_re(case):
    chunks, max_line = case
    expected = oracle(ORACLE_POOL, chunks, max_line)
    for backend in ("hyperscan", "re2") if hyperscan_available() else ("re2",):
        assert scan(ORACLE_POOL, backend, chunks, max_line) == expected, backend


@DIFF
@given(logs())
def test_differential_all_sampled(case):
    chunks, max_line = case
    expected = oracle(SAMPLED_POOL, chunks, max_line)
    for backend in ("hyperscan", "re2") if hyperscan_available() else ("re2",):
        assert scan(SAMPLED_POOL, backend, chunks, max_line) == expected, backend


@pytest.mark.skipif(not hyperscan_available(), reason="hyperscan not installed")
@DIFF
@given(logs())
def test_differential_hyperscan_vs_re2_re2_syntax(case):
    chunks, max_line = case
    assert scan(FULL_POOL, "hyperscan", chunks, max_line) == scan(FULL_POOL, "re2", chunks, max_line)


@pytest.mark.skipif(not hyperscan_available(), reason="hyperscan not installed")
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(logs())
def test_differential_with_constant_report_storms(case):
    # a scan that stops after every 2 reports must resume without losing or doubling a hit
    chunks, max_line = case
    expected = scan(FULL_POOL, "re2", chunks, max_line)
    with mock.patch.object(scanner_module, "_STORM", 2):
        assert scan(FULL_POOL, "hyperscan", chunks, max_line) == expected


@pytest.mark.parametrize("seed", range(6))
def test_differential_big_chunks(seed):
    # hundreds of KB per feed: sampled windows grow, long lines and rare hits sit anywhere
    rng = random.Random(seed)
    noise = [b"step ok", b"NCCL INFO fine", b"loss 2.31", b"x" * 300, b"\xff\xfe", b""]
    lines = []
    for _ in range(20_000):
        r = rng.random()
        if r < 0.002:
            lines.append(rng.choice(FRAGS) + rng.choice(FRAGS) + rng.choice(FRAGS))
        elif r < 0.0025:
            lines.append(b"y" * rng.randrange(100, 3000) + rng.choice(FRAGS))
        elif r < [0.3, 0.0, 0.9][seed % 3]:
            lines.append(b"iteration %d" % rng.randrange(10**6))
        else:
            lines.append(rng.choice(noise))
    data = b"".join(line + rng.choice([b"\n", b"\r\n"]) for line in lines)
    cuts = sorted(rng.sample(range(len(data)), 4))
    chunks = [data[a:b] for a, b in zip([0] + cuts, cuts + [len(data)])]
    max_line = rng.choice([8, 200, 65536])
    for pool in (ORACLE_POOL, SAMPLED_POOL):
        expected = oracle(pool, chunks, max_line)
        for backend in ("hyperscan", "re2") if hyperscan_available() else ("re2",):
            assert scan(pool, backend, chunks, max_line) == expected, backend


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=3000), st.lists(st.integers(0, 3000), max_size=6), st.sampled_from([1, 5, 64, 65536]))
def test_random_bytes_never_raise(data, cuts, max_line):
    cuts = sorted(min(c, len(data)) for c in cuts)
    chunks = [data[a:b] for a, b in zip([0] + cuts, cuts + [len(data)])]
    pool = [MatcherSpec("any", r"(?s:.)"), MatcherSpec("ff", r"\xff+"), MatcherSpec("s", r"[^a]$", sample=True)]
    for backend in ("hyperscan", "re2") if hyperscan_available() else ("re2",):
        sc = scanner(pool, backend, max_line)
        hits = [h for c in chunks for h in sc.feed(c)] + sc.flush()
        lines = data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
        assert sc.position == (len(data), lines)
        for h in hits:
            assert data[h.offset : h.offset + len(h.line)] == h.line
            assert 1 <= h.line_no <= lines and len(h.line) <= max_line


# ------------------------------------------------------------------------------------------------
# the benchmark's own log and patterns


def test_generated_log_finds_the_injected_failures(tmp_path):
    spec = importlib.util.spec_from_file_location("gen_log", ROOT / "bench" / "gen_log.py")
    gen_log = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen_log)
    path = tmp_path / "train.log"
    with open(path, "wb") as f:
        manifest = gen_log.generate(f, 3, seed=3)
    patterns = (ROOT / "bench" / "patterns.txt").read_text().splitlines()
    specs = [MatcherSpec(f"p{i}", p, sample=i >= len(patterns) - 2) for i, p in enumerate(patterns)]
    data = path.read_bytes()
    chunks = [data[i : i + 300_000] for i in range(0, len(data), 300_000)]
    backends = ("hyperscan", "re2") if hyperscan_available() else ("re2",)
    results = {b: [tup(h) for h in run(specs, chunks, b)[1]] for b in backends}
    hits = results["re2"]
    assert all(r == hits for r in results.values())
    failure_lines = {h[2] for h in hits if not specs[h[0]].sample}
    assert {m["line_no"] for m in manifest} <= failure_lines
    assert len(manifest) == 6


def test_sigkill_text_in_byte_mode_matches_what_its_utf8_spelling_did():
    # rules/13-matchers-world.yaml spells 已杀死 as its UTF-8 bytes and exit/status with their
    # cases by hand (and ſ, which RE2's Unicode folding of s took), so that hyperscan takes it
    from engine.rulebook import require_rulebook

    m = next(m for m in require_rulebook().matchers if m.id == "sigkill_text")
    hits = [
        "bash: line 1: 4242 已杀死 python train.py".encode(),
        b"srun: error: n3: task 0: Exited with exit code 137",
        b"EXIT STATUS: 137",
        "exit ſtatus 137".encode(),
        b"exitcode  : -9",
        b"[1]+  Killed",
    ]
    misses = [b"exit status 1370", "已杀".encode(), b"exit \xc5tatus 137", b"killed by the user"]
    for backend in ("hyperscan", "re2") if hyperscan_available() else ("re2",):
        sc = Scanner([MatcherSpec(m.id, m.pattern, ignore_case=m.ignore_case)], backend=backend)
        if backend == "hyperscan":
            assert sc.hyperscan_specs == {0}
        found = {h.line for h in sc.feed(b"\n".join(hits + misses) + b"\n")}
        assert found == set(hits), backend


@pytest.mark.parametrize(
    "src,relaxed",
    [
        (rb"a[^\n]{0,200}b", rb"a[^\n]{0,}b"),
        (rb"a{1,20}?b", rb"a{1,}?b"),
        (rb"(?:ab){3,99}c", rb"(?:ab){3,}c"),
        (rb"\x{41}{0,30}", rb"\x{41}{0,}"),
        (rb"x{2,15}", rb"x{2,15}"),  # narrow: kept
        (rb"\{1,20}x", rb"\{1,20}x"),  # an escaped brace is a literal
        (rb"[a{1,20}]", rb"[a{1,20}]"),  # inside a class
        (rb"(?:{1,20}|{0,99})", rb"(?:{1,20}|{0,99})"),  # nothing to repeat: a literal
        # word boundaries dropped, but where a repeat follows (it would move to another atom)
        (rb"\bstore\b[^\n]{0,40}\Bx", rb"store[^\n]{0,}x"),
        (rb"(x)\b{2}|a\b?", rb"(x)\b{2}|a\b?"),
        (rb"[\b]\\b", rb"[\b]\\b"),  # a class, an escaped backslash
        # an optional group that leads the copy is dropped: a line holds X?Y where it holds Y
        (rb"(?:(?:--\w+[ \t]{2,}[^\n]*?))?(?:OOM killed|oom-kill event)", rb"(?:OOM killed|oom-kill event)"),
        (rb"(?i)(?:ab)??cd", rb"(?i)cd"),
        (rb"(?:ab)?+cd", rb"(?:ab)?+cd"),  # not optional once: kept
        (rb"(?:ab)?|cd", rb"(?:ab)?|cd"),  # dropping it would leave an empty alternative
        (rb"(?:ab)?", rb"(?:ab)?"),  # nothing after it
        (rb"(?:ab)c?d", rb"(?:ab)c?d"),  # not optional
        (rb"(?=ab)?cd", rb"(?=ab)?cd"),  # a lookaround
        (rb"(?:a\)b)?cd|e", rb"cd|e"),  # (an escaped parenthesis closes nothing)
    ],
)
def test_relaxed_bounds(src, relaxed):
    from engine.core.hsdb import _relaxed

    assert _relaxed(src) == relaxed


@pytest.mark.skipif(not hyperscan_available(), reason="hyperscan is not built for this platform")
def test_relaxed_copy_reports_more_and_re2_decides():
    """The main database's relaxed copy reports a line the bound rules out; the scanner's answer
    is still RE2's (no hit), and a line within the bound is a hit."""
    spec = MatcherSpec("wide", r"NCCL[^\n]{0,16}timeout")
    sc = Scanner([spec], backend="hyperscan")
    far = b"NCCL " + b"x" * 40 + b" timeout\n"
    near = b"NCCL WARN timeout\n"
    reported = []
    sc._hs_main.scan(far, match_event_handler=lambda *a: reported.append(a[2]), scratch=sc._hs_scratch)
    assert reported, "the relaxed copy should report the far line"
    assert [h.line for h in sc.feed(far + near)] == [near.rstrip(b"\n")]
    # the copy has no word boundary: "restore" is reported, RE2 refuses it
    sc = Scanner([MatcherSpec("word", r"\bstore failed\b")], backend="hyperscan")
    reported.clear()
    sc._hs_main.scan(b"restore failed\n", match_event_handler=lambda *a: reported.append(a[2]), scratch=sc._hs_scratch)
    assert reported
    assert [h.line for h in sc.feed(b"restore failed\nthe store failed.\n")] == [b"the store failed."]


@pytest.mark.parametrize(
    "src,parts",
    [
        (rb"a|b(c|d)", [rb"a", rb"b(c|d)"]),
        (rb"(?m)a|b", [rb"(?m)a", rb"(?m)b"]),  # leading flags lead each part
        (rb"abc", [rb"abc"]),
        (rb"[|]x|\|y|\Qa|b\E|z", [rb"[|]x", rb"\|y", rb"\Qa|b\E", rb"z"]),
        (rb"a(?i)b|c", [rb"a(?i)b|c"]),  # the flag would reach into c: left whole
        (rb"(?i)a|(?m)b", [rb"(?i)a|(?m)b"]),
        # one group around the whole copy (the weak layer's keyword group) is split inside
        (rb"(?:\bab\b|c[|]d|(?:e|f))", [rb"\bab\b", rb"c[|]d", rb"(?:e|f)"]),
        (rb"(?m)(?:a|b)", [rb"(?m)a", rb"(?m)b"]),
        (rb"(?:a|b)c", [rb"(?:a|b)c"]),  # the group is not the whole copy
        (rb"(?:a|b)(?:c|d)", [rb"(?:a|b)(?:c|d)"]),
        (rb"(?:a|b)+", [rb"(?:a|b)+"]),
        (rb"(?:a|b\)", [rb"(?:a|b\)"]),  # (an escaped parenthesis closes nothing)
        (rb"(?:a(?i)b|c)", [rb"(?:a(?i)b|c)"]),
    ],
)
def test_split_alternatives(src, parts):
    from engine.core.hsdb import _split

    assert _split(src) == parts


@pytest.mark.skipif(not hyperscan_available(), reason="hyperscan is not built for this platform")
def test_hyperscan_copy_is_line_bound():
    r"""\s in hyperscan's copy holds no newline: a gap no longer matches across lines (a line
    never has one, so the lines that match are the same), and a line is reported once although
    two of its spec's alternatives match it."""
    sc = Scanner([MatcherSpec("ws", r"a\s+b|b\s*c")], backend="hyperscan")
    reported = []
    sc._hs_main.scan(b"xa\nb\n", match_event_handler=lambda *a: reported.append(a[2]), scratch=sc._hs_scratch)
    assert reported == []
    assert [h.line for h in sc.feed(b"a\nb\na bc\n")] == [b"a bc"]
