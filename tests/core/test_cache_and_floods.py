"""The compiled-pattern cache is never served stale; a flood is one fact with a count and keeps
its first and last line in explain."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine import cache
from engine.core import matching
from engine.ops.explain import build
from engine.core.matching import MatcherSpec
from engine.core.scanner import Scanner
from engine.core.replay import replay
from engine.rulebook import require_rulebook
from engine.store import Store

pytestmark = pytest.mark.skipif(not matching.hyperscan_available(), reason="hyperscan is x86-64 only")


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("RECOVER_CACHE_DIR", str(d))
    return d


def _hits(scanner: Scanner, text: bytes) -> list[str]:
    return [scanner.specs[h.matcher].id for h in scanner.feed(text)]


def test_cached_database_is_used_and_gives_the_same_answers(cache_dir):
    Scanner([MatcherSpec("a", r"alpha \d+")], backend="hyperscan")
    entries = sorted(cache_dir.iterdir())
    assert len(entries) == 1
    again = Scanner([MatcherSpec("a", r"alpha \d+")], backend="hyperscan")
    assert sorted(cache_dir.iterdir()) == entries  # served, not rebuilt
    assert _hits(again, b"x alpha 12\nalpha beta\n") == ["a"]


def test_changed_pattern_is_never_served_the_old_database(cache_dir):
    assert _hits(Scanner([MatcherSpec("a", r"alpha")], backend="hyperscan"), b"alpha\n") == ["a"]
    changed = Scanner([MatcherSpec("a", r"gamma")], backend="hyperscan")
    assert _hits(changed, b"alpha\ngamma\n") == ["a"]
    assert changed.feed(b"alpha\n") == []
    assert len(list(cache_dir.iterdir())) == 2


def test_changed_library_version_is_never_served_the_old_database(cache_dir, monkeypatch):
    Scanner([MatcherSpec("a", r"alpha")], backend="hyperscan")
    before = set(cache_dir.iterdir())
    monkeypatch.setattr(cache, "versions", lambda: ("hyperscan=99.0", "recover=99.0"))
    s = Scanner([MatcherSpec("a", r"alpha")], backend="hyperscan")
    after = set(cache_dir.iterdir())
    assert len(after - before) == 1  # built again under a new key
    assert _hits(s, b"alpha\n") == ["a"]


def test_changed_recover_source_is_never_served_the_old_database(cache_dir, monkeypatch):
    """The key names the specs, not the expressions: Recover's own source, which renders them,
    is part of it."""
    Scanner([MatcherSpec("a", r"alpha")], backend="hyperscan")
    before = set(cache_dir.iterdir())
    Scanner([MatcherSpec("a", r"alpha")], backend="hyperscan")
    assert set(cache_dir.iterdir()) == before
    monkeypatch.setattr(cache, "code_version", lambda: "edited")
    Scanner([MatcherSpec("a", r"alpha")], backend="hyperscan")
    assert len(set(cache_dir.iterdir()) - before) == 1


def test_a_sampled_spec_has_its_own_database_on_first_search_only(cache_dir):
    specs = [MatcherSpec("a", r"alpha \d+"), MatcherSpec("hb", r"beat (?P<n>\d+)", sample=True)]
    s = Scanner(specs, backend="hyperscan")
    assert 1 in s.hyperscan_specs and not s._hs_sampled
    built = set(cache_dir.iterdir())
    assert [(h.matcher, h.line) for h in s.feed(b"alpha 1\nbeat 1\nbeat 2\nnone\n")] == [
        (0, b"alpha 1"),
        (1, b"beat 2"),
    ]
    assert set(s._hs_sampled) == {1} and len(set(cache_dir.iterdir()) - built) == 1


def test_damaged_entry_is_rebuilt(cache_dir):
    Scanner([MatcherSpec("a", r"alpha")], backend="hyperscan")
    (entry,) = cache_dir.iterdir()
    entry.write_bytes(b"not a database")
    s = Scanner([MatcherSpec("a", r"alpha")], backend="hyperscan")
    assert _hits(s, b"alpha\n") == ["a"]


def test_changed_rulebook_file_is_never_served_stale(cache_dir, tmp_path):
    site = tmp_path / "site.yaml"
    log = tmp_path / "slurm-77.out"
    log.write_text("2026-03-02T08:00:00 frobnicator melted\n2026-03-02T08:00:01 widget exploded\n")

    def matched(pattern: str) -> set[str]:
        site.write_text(
            f"matchers:\n  - id: site_thing\n    description: a site matcher\n    source: [job]\n"
            f"    pattern: '{pattern}'\n"
        )
        compiled = require_rulebook([site])
        scanner = Scanner([MatcherSpec(m.id, m.pattern) for m in compiled.matchers], backend="hyperscan")
        return {h.line.decode() for h in scanner.feed(log.read_bytes()) if scanner.specs[h.matcher].id == "site_thing"}

    assert matched("frobnicator melted") == {"2026-03-02T08:00:00 frobnicator melted"}
    assert matched("widget exploded") == {"2026-03-02T08:00:01 widget exploded"}


def test_cache_off(monkeypatch, tmp_path):
    monkeypatch.setenv("RECOVER_CACHE_DIR", "off")
    assert cache.cache_dir() is None
    assert _hits(Scanner([MatcherSpec("a", r"alpha")], backend="hyperscan"), b"alpha\n") == ["a"]


def _flood_log(path: Path, nodes: int = 8, ranks_per_node: int = 4, repeat: int = 25) -> int:
    lines = [f"[2026-03-02 08:00:{i:02d}] iteration {i} | lm loss: 2.5 |" for i in range(30)]
    n = 0
    for r in range(repeat):
        for node in range(nodes):
            for local in range(ranks_per_node):
                lines.append(
                    f"gpu{node:03d}:{1000 + node * 10 + local}:{2000 + local} [{local}] transport/net_ib.cc:1696 "
                    f"NCCL WARN NET/IB : Got completion from peer 10.0.{node}.{local}<{40000 + r}> with "
                    f"status=IBV_WC_RETRY_EXC_ERR(12) opcode=0 len=0 vendor err 129"
                )
                n += 1
    path.write_text("\n".join(lines) + "\n")
    return n


def test_flood_from_every_node_of_a_job_log_is_one_incident_with_its_evidence(tmp_path):
    log = tmp_path / "train.log"  # no job id in the name or the text
    n = _flood_log(log)
    store = Store(str(tmp_path / "r.db"))
    result = replay([str(log)], require_rulebook(), store)
    assert len(result.incidents) == 1
    assert result.stats["facts"] < 10  # the flood reached the engine as a handful of facts
    story = build(store, result.incidents[0].id)
    ib = [f for f in story["facts"] if f["attrs"].get("matcher") == "nccl_ib_completion_error"]
    assert len(ib) == 1
    fact = ib[0]
    assert fact["count"] == n
    assert fact["origin"].endswith(":31")  # the first warning line
    flood = store.fact_floods(result.incidents[0].id)[fact["id"]]
    assert flood["last_origin"].endswith(f":{30 + n}")  # and the last
    assert "NET/IB" in flood["last_text"]
    assert flood["nodes"] == [f"gpu{i:03d}" for i in range(8)]


def test_different_errors_are_not_collapsed(tmp_path):
    log = tmp_path / "train.log"
    log.write_text(
        "gpu001:1:2 [0] transport/net_ib.cc:1 NCCL WARN NET/IB : Got completion from peer 10.0.0.1<1> with error 12, opcode 0\n"
        "gpu002:1:2 [0] transport/net_ib.cc:1 NCCL WARN NET/IB : Got completion from peer 10.0.0.2<1> with error 5, opcode 0\n"
    )
    store = Store(":memory:")
    result = replay([str(log)], require_rulebook(), store)
    ib = [
        f
        for inc in result.incidents
        for f, _, _ in store.facts(inc.id)
        if f.get("matcher") == "nccl_ib_completion_error"
    ]
    assert sorted(f.get("ib_status") for f in ib) == [5, 12]


def test_explain_text_shows_first_and_last_line_and_count(tmp_path):
    from engine.ops.explain import render_text

    log = tmp_path / "train.log"
    n = _flood_log(log, nodes=2, ranks_per_node=2, repeat=5)
    store = Store(str(tmp_path / "r.db"))
    result = replay([str(log)], require_rulebook(), store)
    text = render_text(build(store, result.incidents[0].id))
    assert f"x{n}" in text
    assert f"last of {n} @ {log}:{30 + n}" in text
