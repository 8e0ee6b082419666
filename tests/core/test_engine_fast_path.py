"""The engine's fast path (templates rendered once per distinct value of what they read, derived
fact ids remembered, the store's counters and timestamps written behind) against the reference
path (``Engine(fast=False)``: every template rendered, every id hashed): the same fact streams
must give the same incidents, decisions, evidence, firings, actions and explain output."""

from __future__ import annotations

import contextlib
import json
import io
import logging
import pickle
import sys
from pathlib import Path

import pytest

from engine.core.derive import template_reads
from engine.core.incidents import Engine
from engine.facts import Fact
from engine.ops import explain
from engine.rulebook import require_rulebook, stored
from engine.store import Store

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from bench_replay import engine_mixes

#: columns that hold the wall clock (when a row was written), not what the engine concluded
_WALL = {"detected_wall", "closed_wall", "created_at", "updated_at"}


@pytest.fixture(scope="module", params=["compiled", "stored"])
def compiled(request):
    """The rulebook as compiled, and as read back from the rulebook store (its templates not
    compiled until their first render)."""
    book = require_rulebook()
    if request.param == "compiled":
        return book
    buf = io.BytesIO()
    pickler = pickle.Pickler(buf, protocol=pickle.HIGHEST_PROTOCOL)
    pickler.dispatch_table = stored._dispatch()  # as the store writes it
    pickler.dump(book)
    again = pickle.loads(buf.getvalue())
    assert all(t._tmpl is None for cr in again.rules for t in cr.then_templates.values() if hasattr(t, "_tmpl"))
    return again


def _no_wall(value):
    if isinstance(value, dict):
        return {k: _no_wall(v) for k, v in value.items() if k not in _WALL}
    if isinstance(value, (list, tuple)):
        return [_no_wall(v) for v in value]
    return value


def _dump(store: Store) -> dict:
    store.flush()
    out = {}
    for table in ("incidents", "facts", "firings", "actions", "progress"):
        rows = store.db.execute(f"SELECT * FROM {table} ORDER BY rowid").fetchall()
        out[table] = [{k: r[k] for k in r.keys() if k not in _WALL} for r in rows]
    out["explain"] = [
        json.dumps(_no_wall(explain.build(store, row["id"])), sort_keys=True, default=str) for row in out["incidents"]
    ]
    return out


def _run(compiled, facts, fast: bool, mode: str = "recommend", batch: int = 0, path=":memory:"):
    """``batch``: the facts ingested in transactions of that many (as the live controller and
    replay do: fact and firing rows are then written at each commit), 0: no transaction."""
    store = Store(path)
    store.write_behind = fast
    eng = Engine(compiled, store, fast=fast, mode=mode)
    for start in range(0, len(facts), batch or len(facts) or 1):
        chunk = facts[start : start + batch] if batch else facts
        if batch:
            with store.transaction():
                for f in chunk:
                    eng.ingest(f)
        else:
            for f in chunk:
                eng.ingest(f)
    closed = eng.finish()
    return _dump(store), [(c.id, c.key, c.decision.decision, c.plan, c.problems) for c in closed], dict(eng.stats)


def _same(compiled, facts, mode: str = "recommend", batches=(0, 7, 500)):
    logging.disable(logging.WARNING)  # template failures of hostile facts are counted in stats
    try:
        full = _run(compiled, facts, False, mode)
        for batch in batches:
            fast = _run(compiled, facts, True, mode, batch)
            assert fast[2] == full[2], batch  # stats: facts, firings, derived, rederived, template errors...
            assert fast[1] == full[1], batch  # closed incidents, decisions, plans
            for table in full[0]:
                assert fast[0][table] == full[0][table], (batch, table)
    finally:
        logging.disable(logging.NOTSET)
    return full


@pytest.fixture(scope="module")
def mixes():
    """The bench's two fact streams, made once for the module: ``engine_mixes`` replays every
    rulebook test and corpus case to find each matcher's attributes (tens of seconds), and its
    streams are the same for the rulebook as compiled and as read back from the store (the same
    matchers), so each case below takes them from here instead of making them again."""
    return engine_mixes(require_rulebook(tests=True), 900)


@pytest.mark.parametrize("mix", ["realistic", "pathological"])
def test_bench_mixes_same_on_both_paths(compiled, mixes, mix):
    realistic, worst = mixes
    full = _same(compiled, realistic if mix == "realistic" else worst[:300], mode="act")
    assert full[0]["incidents"] and full[0]["firings"] and full[0]["actions"]


def _xid(code, node, job, at, **extra):
    return Fact.make("xid", {"code": code, "node": node, "job": job, "attempt": 0, **extra}, at, f"kern:{node}:{at}")


def _log(matcher, job, node, at, **extra):
    return Fact.make("log", {"matcher": matcher, "job": job, "attempt": 0, "node": node, **extra}, at, f"l:{at}")


def test_facts_that_differ_only_on_a_read_attribute_are_never_shared(compiled):
    """Hostile: every pair below differs only on an attribute a template reads (the evidence
    text, the pci address, the type of a value: 79 and 79.0 and "79" are equal or hash alike
    but render differently, True and 1 too), or on one no fact of this kind should have (an
    attribute named like a dict method). Each must render its own evidence."""
    ids = {m.id for m in compiled.matchers}
    assert {"nccl_timeout", "cuda_oom"} <= ids or ids  # the shipped names used below, when present
    facts = []
    t = 1000.0
    for job, text in (("11", "Xid 79 on GPU 0"), ("12", "Xid 79 on GPU 0 "), ("13", "Xid 79\u202e on GPU 0")):
        facts.append(_xid(79, "n1", job, t, text=text, pci="0000:3b:00"))
        facts.append(_xid(79, "n2", job, t + 1, text=text, pci="0000:3b:01"))
        t += 5000
    for job, code in (("21", 79), ("22", 79.0), ("23", "79"), ("24", True), ("25", 1)):
        facts.append(_xid(code, "n3", job, t))
        t += 5000
    for job, extra in (("31", {"items": "x"}), ("32", {"keys": 1, "get": "y"}), ("33", {})):
        facts.append(_xid(48, "n4", job, t, **extra))
        t += 5000
    log_matchers = [m.id for m in compiled.matchers if m.emit == "log"][:6]
    for i, m in enumerate(log_matchers):
        for job, text in (("4%d" % i, "first line"), ("4%d" % i, "other line"), ("5%d" % i, "first line")):
            facts.append(_log(m, job, "n5", t, text=text, exception="E%d" % i, cause=79))
            facts.append(_log(m, job, "n6", t + 0.5, text=text, exception=True, cause="79"))
            t += 3000
    full = _same(compiled, facts)
    evidence = {json.loads(f["attrs"]).get("evidence") for f in full[0]["facts"] if f["kind"] == "symptom"} - {None}
    # the comparison means something: the reference path rendered different evidence for them
    assert {"Xid 79 on GPU 0", "Xid 79 on GPU 0 "} <= evidence


@pytest.mark.parametrize(
    "source, reads",
    [
        ("{{ x.code }}", (("x", "code"),)),
        ("{{ x.text | default('Xid ' ~ x.code) }}", (("x", "code"), ("x", "text"))),
        ("{{ s['evidence'] | truncate(200) }}", (("s", "evidence"),)),
        ("{{ x }}", None),  # the whole fact: anything may change it
        ("{{ x.items }}", None),  # the dict's method, not an attribute
        ("{{ x.code ~ lipsum() }}", None),  # a global
        ("{{ [x.code, 2] | random }}", None),  # not a function of its input
        ("{{ x[x.key] }}", None),  # an attribute named by another
        ("{{ x._secret }}", None),
    ],
)
def test_template_reads(source, reads):
    assert template_reads(source) == reads


def test_store_write_behind_keeps_the_order_of_writes(tmp_path):
    """A count buffered before its fact's row exists in an incident does not count that row; a
    rolled-back transaction takes its buffered writes with it; a read sees every write."""
    store = Store(tmp_path / "s.db")
    f = Fact.make("log", {"matcher": "m", "job": "1"}, 1.0, "o")
    a = store.open_incident("job:1:0", "1", 0, None, 1.0)
    store.add_fact(a, f)
    store.bump_fact(f.id, 2)
    store.touch_incident(a, 5.0)
    store.touch_incident(a, 3.0)
    b = store.open_incident("job:1:1", "1", 1, None, 1.0)
    store.add_fact(b, f)  # the earlier bump applies to incident a's row only
    assert [c for _, c, _ in store.facts(a)] == [3] and [c for _, c, _ in store.facts(b)] == [1]
    assert store.incident(a).last_evidence_at == 5.0
    with pytest.raises(RuntimeError):
        with store.transaction():
            store.bump_fact(f.id, 10)
            store.touch_incident(b, 9.0)
            raise RuntimeError("rolled back")
    assert [c for _, c, _ in store.facts(a)] == [3] and store.incident(b).last_evidence_at == 1.0
    store.bump_fact(f.id)
    store.close()
    again = Store(tmp_path / "s.db")
    assert [c for _, c, _ in again.facts(a)] == [4]  # written when the store closed
    again.close()
    again.close()  # closing twice is harmless, as it was


def test_rows_written_at_the_commit_are_the_rows_written_at_once(tmp_path):
    """Inside a transaction, fact and firing rows wait for the commit: their firing ids are the
    ones AUTOINCREMENT gives (also past a deleted last row), a count reaches the rows it would
    have reached written at once, and a rollback takes the rows and their ids with it."""

    def run(path, tx: bool):
        store = Store(path)
        f = Fact.make("log", {"matcher": "m", "job": "1"}, 1.0, "o")
        g = Fact.make("log", {"matcher": "m", "job": "2"}, 2.0, "o")
        a = store.open_incident("job:1:0", "1", 0, None, 1.0)
        store.add_firing(a, "r", "f:1", "d", {"x": f.id}, None, 1.0)
        store.db.execute("DELETE FROM firings")  # AUTOINCREMENT never hands its id out again
        with pytest.raises(RuntimeError):
            with store.transaction():
                store.add_firing(a, "r", "f:1", "d", {"x": g.id}, None, 1.0)
                store.add_fact(a, g)
                raise RuntimeError("rolled back")
        ids = []
        with store.transaction() if tx else contextlib.nullcontext():
            store.add_fact(a, f)
            store.bump_fact(f.id, 2, {"text": "again"})
            ids.append(store.add_firing(a, "r", "f:1", "d", {"x": f.id}, f.id, 1.5))
            b = store.open_incident("job:1:1", "1", 1, None, 1.0)  # a statement: what waits is written first
            store.add_fact(b, f, derived_by=ids[0])
            store.add_fact(b, f)  # twice in one incident: once
            store.bump_fact(f.id)
            ids.append(store.add_firing(b, "r", "f:1", "d", {"y": f.id}, None, 2.0))
            store.add_fact(b, g, derived_by=ids[1])
            store.bump_fact(g.id, 4)
        store.flush()
        rows = [tuple(r) for r in store.db.execute("SELECT * FROM facts ORDER BY rowid")]
        firings = [tuple(r) for r in store.db.execute("SELECT * FROM firings ORDER BY id")]
        store.close()
        return ids, rows, firings

    at_once = run(tmp_path / "a.db", False)
    assert at_once[0] == [2, 3]  # 1 was deleted; 2, rolled back, is free again
    assert run(tmp_path / "b.db", True) == at_once
