"""A loaded rulebook kept on disk (engine/rulebook/stored.py) is read back only for exactly the
same inputs: the same files' bytes and names, overlays, Recover source and library versions.
What is read back equals what a fresh load builds, templates included."""

from __future__ import annotations

from pathlib import Path

import pytest

import engine.rulebook as rulebook
from engine import cache
from engine.rulebook import load_rulebook

SITE = """matchers:
  - id: site_thing
    description: a site matcher
    source: [job]
    pattern: '{pattern}'
"""


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("RECOVER_CACHE_DIR", str(d))
    return d


@pytest.fixture
def builds(monkeypatch):
    """How many loads were built rather than read back."""
    n = [0]
    real = rulebook._build

    def counting(*a, **k):
        n[0] += 1
        return real(*a, **k)

    monkeypatch.setattr(rulebook, "_build", counting)
    return n


def _summary(result):
    c = result.compiled
    return (
        [str(d) for d in result.diagnostics],
        result.files,
        [(m.id, m.pattern, m.emit, tuple(m.sources), dict(m.types)) for m in c.matchers],
        [(r.rule.id, r.priority, repr(r.trees)) for r in c.rules],
        repr(sorted((k, repr(v)) for k, v in c.policy.items())),
    )


def _rendered(result):
    out = {}
    for name, action in sorted(result.compiled.actions.items()):
        try:
            out[name] = [
                t.render({"job": "77", "node": "gpu001", "nodes": "gpu[001-002]", "reason": "r", "incident": 3})
                for t in action.argv
            ]
        except Exception as exc:
            out[name] = type(exc).__name__
    return out


def test_a_second_load_is_read_back_and_equals_a_fresh_build(cache_dir, builds, monkeypatch):
    first = load_rulebook()
    assert builds[0] == 1 and any(p.name.startswith("rulebook-") for p in cache_dir.iterdir())
    again = load_rulebook()
    assert builds[0] == 1  # read back
    monkeypatch.setenv("RECOVER_CACHE_DIR", "off")
    fresh = load_rulebook()
    assert builds[0] == 2
    assert _summary(again) == _summary(first) == _summary(fresh)
    assert _rendered(again) == _rendered(fresh)
    assert any(t.is_template for a in again.compiled.actions.values() for t in a.argv)


def test_a_changed_rulebook_file_is_never_served_stale(cache_dir, builds, tmp_path):
    site = tmp_path / "site.yaml"

    def loaded(pattern: str) -> list[str]:
        site.write_text(SITE.format(pattern=pattern))
        return [m.pattern for m in load_rulebook([site]).compiled.matchers if m.id == "site_thing"]

    assert loaded("frobnicator melted") == ["frobnicator melted"]
    assert loaded("widget exploded") == ["widget exploded"]
    assert loaded("frobnicator melted") == ["frobnicator melted"]
    assert builds[0] == 2  # the first text again is read back


def test_the_same_bytes_under_another_name_are_another_load(cache_dir, builds, tmp_path):
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    for p in (a, b):
        p.write_text(SITE.format(pattern="(unclosed"))
    first, second = load_rulebook([a]), load_rulebook([b])
    assert builds[0] == 2
    assert [str(d) for d in first.errors if "site_thing" in d.message][0].startswith(str(a))
    assert [str(d) for d in second.errors if "site_thing" in d.message][0].startswith(str(b))
    assert not first.ok and [str(d) for d in load_rulebook([a]).diagnostics] == [str(d) for d in first.diagnostics]
    assert builds[0] == 2  # a rulebook with errors is read back with the same errors


def test_overlays_and_defaults_are_part_of_the_key(cache_dir, builds):
    overlay = ("recover.toml", "policy:\n  settle: 7s\n")
    assert load_rulebook(overlays=[overlay]).compiled.policy["settle"] == 7.0
    assert load_rulebook().compiled.policy["settle"] != 7.0
    assert builds[0] == 2
    no_defaults = load_rulebook(defaults=False)
    assert builds[0] == 3 and len(no_defaults.compiled.matchers) < len(load_rulebook().compiled.matchers)


@pytest.mark.parametrize("what", ["versions", "code_version"])
def test_a_changed_library_or_recover_source_is_never_served_stale(cache_dir, builds, monkeypatch, what):
    load_rulebook()
    load_rulebook()
    assert builds[0] == 1
    if what == "versions":
        monkeypatch.setattr(cache, "versions", lambda: ("jinja2=99.0", "pyyaml=99.0", "recover=99.0"))
    else:
        monkeypatch.setattr(cache, "code_version", lambda: "edited")
    load_rulebook()
    assert builds[0] == 2


def test_code_version_covers_every_source_file(tmp_path, monkeypatch):
    (tmp_path / "engine" / "rulebook").mkdir(parents=True)
    (tmp_path / "scheduler_adapters").mkdir()
    compiler = tmp_path / "engine" / "rulebook" / "compile.py"
    compiler.write_text("X = 1\n")
    (tmp_path / "scheduler_adapters" / "slurm.py").write_text("Y = 1\n")
    monkeypatch.setattr(cache, "_ROOT", tmp_path)

    def version():
        cache.code_version.cache_clear()
        return cache.code_version()

    before = version()
    compiler.write_text("X = 2\n")
    assert version() != before
    compiler.write_text("X = 1\n")
    assert version() == before
    (tmp_path / "scheduler_adapters" / "slurm.py").write_text("Y = 2\n")
    assert version() != before
    cache.code_version.cache_clear()


def test_code_version_reads_the_real_source_tree():
    # the test above points _ROOT at a made-up tree; this one holds the real _ROOT to the folder
    # that holds engine/ (when cache.py moved from engine/core/ to engine/, a stale _ROOT hashed
    # no file at all, and every edit of Recover was served the rulebook of the old code)
    assert (cache._ROOT / "engine" / "cache.py").resolve() == Path(cache.__file__).resolve()
    assert (cache._ROOT / "scheduler_adapters" / "base.py").is_file()


def test_a_damaged_entry_is_built_again(cache_dir, builds):
    first = load_rulebook()
    (entry,) = [p for p in cache_dir.iterdir() if p.name.startswith("rulebook-")]
    entry.write_bytes(entry.read_bytes()[:1000])
    again = load_rulebook()
    assert builds[0] == 2 and _summary(again) == _summary(first)
    entry.write_bytes(b"\x80\x05K\x01.")  # a valid pickle of something else
    assert _summary(load_rulebook()) == _summary(first) and builds[0] == 3


def test_a_file_that_cannot_be_read_is_never_cached(cache_dir, builds, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"matchers: \xff\n")
    assert not load_rulebook([bad]).ok
    assert not load_rulebook([bad]).ok
    assert builds[0] == 2
    assert not any(p.name.startswith("rulebook-") for p in cache_dir.iterdir()) if cache_dir.exists() else True


def test_entries_of_a_kind_are_bounded_and_the_least_recently_used_go(cache_dir, monkeypatch):
    import os
    import time

    monkeypatch.setitem(cache.KEEP, "thing", 3)
    now = time.time()
    for i in range(3):
        cache.put(f"thing-{i}", b"x")
        os.utime(cache_dir / f"thing-{i}", (now - 100 + i, now - 100 + i))
    cache.put("other-0", b"y")
    assert cache.get("thing-0") == b"x"  # used: now the most recent of its kind
    cache.put("thing-3", b"x")
    cache.put("thing-4", b"x")
    assert sorted(p.name for p in cache_dir.iterdir()) == ["other-0", "thing-0", "thing-3", "thing-4"]


def test_many_differently_named_rulebooks_keep_the_cache_bounded(cache_dir, tmp_path, monkeypatch):
    monkeypatch.setitem(cache.KEEP, "rulebook", 2)
    for i in range(4):
        site = tmp_path / f"site{i}.yaml"
        site.write_text(SITE.format(pattern=f"thing {i}"))
        assert load_rulebook([site]).ok
    assert len([p for p in cache_dir.iterdir() if p.name.startswith("rulebook-")]) == 2
