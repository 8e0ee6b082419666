"""engine.core.scanner's clones and its one template cache: a clone shares a template's compiled
patterns and has its own stream state and hyperscan scratch, so clones of one template scan in
several threads with the answers of one; the RE2 wrapper's private fast path has a public
fallback with the same answers."""

from __future__ import annotations

import random
import threading

import pytest
import re2

from engine.core.matching import MatcherSpec, hyperscan_available
from engine.core.scanner import Scanner, scanner_for
from engine.rulebook import load_rulebook

BACKENDS = [
    pytest.param("hyperscan", marks=pytest.mark.skipif(not hyperscan_available(), reason="hyperscan not installed")),
    "re2",
]

SPECS = [
    MatcherSpec("xid", r"NVRM: Xid \(PCI:(?P<pci>[0-9a-f:.]+)\): (?P<code>\d+)"),
    MatcherSpec("oom", r"CUDA out of memory", ignore_case=True),
    MatcherSpec("step", r"^step (?P<n>\d+) loss", sample=True),
    MatcherSpec("tail", r"done$"),
    MatcherSpec("utf8", r"Fehler: (?P<what>\pL+)"),
]


def _log(seed: int, lines: int) -> bytes:
    rng = random.Random(seed)
    pool = [
        b"NVRM: Xid (PCI:0000:3b:00): 79, pid=1",
        b"RuntimeError: cuda out of memory. Tried",
        b"step 12 loss 2.5",
        b"all done",
        "Fehler: Speicher".encode(),
        b"nothing to see " * 3,
        b"x" * 300,
        b"\xff\xfe bytes",
    ]
    return b"".join(rng.choice(pool) + (b"\r\n" if rng.random() < 0.1 else b"\n") for _ in range(lines))


def _tuples(hits) -> list[tuple]:
    return [(h.matcher, h.line, h.line_no, h.offset, h.groups, h.truncated) for h in hits]


def _scan(scanner: Scanner, data: bytes, chunk: int) -> list[tuple]:
    out = []
    for i in range(0, len(data), chunk):
        out += _tuples(scanner.feed(data[i : i + chunk]))
    return out + _tuples(scanner.flush())


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_clone_has_its_own_scratch_and_stream_state(backend):
    tmpl = Scanner(SPECS, backend=backend, max_line=128)
    a, b = tmpl.clone(), tmpl.clone()
    assert a._c is tmpl._c and a._memo is tmpl._memo  # the compiled patterns are shared
    if backend == "hyperscan":
        assert tmpl._hs_main is not None and tmpl._hs_lazy and not tmpl._hs_sampled  # made on first use
        scratches = [s._hs_scratch for s in (tmpl, a, b)]
        assert len({id(s) for s in scratches}) == 3 and None not in scratches
        for idx in tmpl._hs_lazy:  # a sampled spec's own database and scratch are made on its first search
            for s in (tmpl, a, b):
                s._candidates(idx, b"x\n", 0, 2)
            assert len({id(s._hs_sampled_scratch[idx]) for s in (tmpl, a, b)}) == 3
            assert a._hs_sampled[idx] is tmpl._hs_sampled[idx]  # the database is shared
    # every attribute a clone has that it does not share is its own object (never the template's
    # list or dict), and a clone has every attribute the template has
    assert set(vars(a)) == set(vars(tmpl))
    for name, value in vars(a).items():
        if name not in Scanner._SHARED and not isinstance(value, (int, type(None))):
            assert value is not getattr(tmpl, name), name
    # stream state: what one clone reads never shows in another
    assert _tuples(a.feed(b"all done\nNVRM: Xid (PCI:0000:3b:00): 7")) == [(3, b"all done", 1, 0, {}, False)]
    assert (a.position, a.pending, a.lines_seen, a.bytes_seen) == ((9, 1), 29, 1, 38)
    assert (b.position, b.pending, b.lines_seen, b.bytes_seen) == ((0, 0), 0, 0, 0)
    assert _tuples(b.feed(b"9, pid=2\n")) == []  # b never saw a's first half of the line
    assert [h.matcher for h in a.feed(b"9, pid=1\n")] == [0]
    assert (tmpl.position, tmpl.pending, tmpl.lines_seen) == ((0, 0), 0, 0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_clones_of_one_template_in_threads_give_the_hits_of_one_thread(backend):
    data = [_log(seed, 10_000) for seed in range(4)]
    tmpl = Scanner(SPECS, backend=backend, max_line=128)
    # small chunks: many scans (and callbacks, where threads switch) per stream
    expected = [_scan(tmpl.clone(), d, 4096) for d in data]
    assert all(expected) and len({len(e) for e in expected}) > 1

    got: list = [None] * len(data)
    errors: list[BaseException] = []
    start = threading.Barrier(len(data))

    def work(k: int) -> None:
        try:
            scanner = tmpl.clone()
            start.wait()
            for _ in range(2):
                got[k] = _scan(scanner.clone(), data[k], 4096)
                assert got[k] == expected[k]
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(len(data))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)  # a hang guard only: a loaded machine is slow, never wrong
    assert not any(t.is_alive() for t in threads)
    assert errors == []
    assert got == expected


def test_one_template_per_rulebook_and_source_kind():
    res = load_rulebook(defaults=False, overlays=[("t.yaml", "matchers:\n  - {id: evt, pattern: 'EVT \\d+'}\n")])
    assert res.ok, res.errors
    (s1, m1), (s2, m2) = scanner_for(res.compiled, "job"), scanner_for(res.compiled, "job")
    assert s1 is not s2 and s1._c is s2._c and m1 == m2 == [0]  # compiled once, one clone each
    assert scanner_for(res.compiled, "kernel")[0]._c is not s1._c
    other = load_rulebook(defaults=False, overlays=[("t.yaml", "matchers:\n  - {id: evt, pattern: 'EVT \\d+'}\n")])
    assert scanner_for(other.compiled, "job")[0]._c is not s1._c  # another rulebook object: its own


class _PublicOnly:
    """A compiled google-re2 regex with only its public API, as a release without the private
    ``_regexp`` would give."""

    def __init__(self, rx):
        self._rx = rx

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._rx, name)


@pytest.mark.parametrize("backend", BACKENDS)
def test_without_re2_private_internals_the_public_search_gives_the_same_hits(backend, monkeypatch):
    data = _log(7, 3000)
    expected = _scan(Scanner(SPECS, backend=backend, max_line=128), data, 8192)
    real = re2.compile
    monkeypatch.setattr(re2, "compile", lambda *a, **k: _PublicOnly(real(*a, **k)))
    assert _scan(Scanner(SPECS, backend=backend, max_line=128), data, 8192) == expected


@pytest.mark.skipif(not hyperscan_available(), reason="hyperscan not installed")
def test_a_sampled_spec_whose_own_database_is_refused_is_searched_with_re2(monkeypatch):
    """A sampled spec's own database is made on its first search; where hyperscan refuses it
    then, the spec is searched with RE2 from there on, with the answers of the RE2 backend."""
    from engine.core import scanner as scanner_module

    def refuse(c, flags):
        raise RuntimeError("refused")

    data = _log(5, 3000)
    expected = _scan(Scanner(SPECS, backend="re2", max_line=128), data, 997)
    monkeypatch.setattr(scanner_module, "sampled_database", refuse)
    sc = Scanner(SPECS, backend="hyperscan", max_line=128)
    assert _scan(sc, data, 997) == expected
    assert 2 in sc._re2_sampled and 2 not in sc._hs_lazy and not sc._hs_sampled


@pytest.mark.skipif(not hyperscan_available(), reason="hyperscan not installed")
def test_the_block_database_is_made_on_the_first_block_scan_and_a_refusal_keeps_the_answers(monkeypatch):
    """The block specs' single-match database is made on the first block scan, shared with the
    clones; where hyperscan refuses it then, each block spec's first lines are proposed one
    spec at a time, with the same lines reported."""
    from engine.core import scanner as scanner_module

    specs = [MatcherSpec("it", r"iteration (?P<it>[0-9]+) loss", block=True), MatcherSpec("err", r"error")]
    data = b"".join(b"iteration %d loss 1.5\n" % i + (b"an error here\n" if i % 37 == 0 else b"") for i in range(3000))

    def run():
        sc = Scanner(specs, backend="hyperscan")
        assert sc._block == [0] and "block" not in sc._hs_made
        twin = sc.clone()
        twin.block = 4096
        return sc, _scan(twin, data, 8191)

    sc, expected = run()
    assert sc._hs_made["block"]  # made by the clone, kept by the template
    assert 0 < sum(1 for h in expected if h[0] == 0) < 3000  # (progress lines were left out)

    def refuse(pairs):
        raise RuntimeError("refused")

    monkeypatch.setattr(scanner_module, "block_database", refuse)
    sc, got = run()
    assert sc._hs_made["block"] is False and got == expected
