"""A job that prints endless distinct errors blinds only itself: one job attempt holds at most
SCOPE_MATCHER_MAX log facts of one matcher in the Rete, further distinct lines are counted on the
last one held, and nothing of any other job or node is slowed or lost."""

from __future__ import annotations

import random
import string

import pytest

from engine.core.incidents import Engine
from engine.core.memory import SCOPE_MATCHER_MAX
from engine.core.replay import Input, replay_inputs
from engine.facts import Fact
from engine.ops import explain
from engine.rulebook import require_rulebook
from engine.store import Store


@pytest.fixture(scope="module")
def compiled():
    return require_rulebook()


def _names(n: int, seed: int = 5) -> list[str]:
    rnd = random.Random(seed)
    return ["".join(rnd.choice(string.ascii_letters) for _ in range(12)).capitalize() + "Error" for _ in range(n)]


def _exception(job: str, name: str, at: float, i: int) -> Fact:
    return Fact.make(
        "log",
        {"matcher": "python_exception_generic", "exception": name, "job": job, "attempt": 0, "text": f"{name}: bad"},
        at,
        f"slurm-{job}.out:{i}",
    )


def _held(engine: Engine, job: str) -> int:
    return sum(1 for lv in engine.live.values() if lv.fact.kind == "log" and lv.fact.get("job") == job)


def test_distinct_lines_past_the_bound_are_counted_not_asserted(compiled):
    store = Store(":memory:")
    eng = Engine(compiled, store)
    n = 1024
    for i, name in enumerate(_names(n)):
        eng.ingest(_exception("501", name, 1000.0 + i * 0.001, i))
    assert _held(eng, "501") == SCOPE_MATCHER_MAX
    assert eng.stats["overflowed"] == n - SCOPE_MATCHER_MAX
    # another job is a scope of its own: its lines are all asserted, and its Xid still decides
    for i, name in enumerate(_names(10, seed=9)):
        eng.ingest(_exception("502", name, 1001.0 + i * 0.001, i))
    assert _held(eng, "502") == 10
    eng.ingest(Fact.make("xid", {"code": 79, "node": "n9", "job": "503", "attempt": 0}, 1002.0, "kmsg:n9"))
    # job 501's log ends on its last exception: an app_error, as it would be with fewer lines
    eng.ingest(Fact.make("log_end", {"job": "501", "attempt": 0, "tail": "failure"}, 1003.0, "slurm-501.out"))
    closed = eng.finish()
    classes = {c.job: store.incident(c.id).fault_class for c in closed}
    assert classes == {"501": "app_error", "503": "gpu_fell_off_bus"}
    # nothing is lost from the count: the stored evidence of job 501 adds up to every line
    inc = next(c.id for c in closed if c.job == "501")
    counted = sum(count for fact, count, _ in store.facts(inc) if fact.kind == "log")
    assert counted == n
    shown = explain.render_text(explain.build(store, inc))
    assert f"x{n - SCOPE_MATCHER_MAX + 1}" in shown or str(n - SCOPE_MATCHER_MAX + 1) in shown
    eng.close()


def test_the_bound_is_per_matcher_and_frees_as_facts_leave(compiled):
    eng = Engine(compiled, Store(":memory:"))
    for i, name in enumerate(_names(300)):
        eng.ingest(_exception("601", name, 10.0 + i * 0.001, i))
    assert eng.stats["overflowed"] == 300 - SCOPE_MATCHER_MAX
    # a line of another matcher of the same job is still asserted
    eng.ingest(
        Fact.make(
            "log",
            {"matcher": "cuda_oom_torch", "job": "601", "attempt": 0, "text": "CUDA out of memory"},
            11.0,
            "slurm-601.out:9999",
        )
    )
    assert any(lv.fact.get("matcher") == "cuda_oom_torch" for lv in eng.live.values())
    # once the job's facts have left the Rete (its incident closed, the cascade window passed)
    eng.advance(11.0 + eng.settle + 1)
    eng.advance(11.0 + eng.settle + eng.cascade + eng.fact_ttl + 10)
    assert _held(eng, "601") == 0
    assert eng.memory.scoped == {}
    eng.ingest(_exception("601", "LateError", 11.0 + eng.settle + eng.cascade + eng.fact_ttl + 20, 1))
    assert _held(eng, "601") == 1
    eng.close()


def test_replay_of_20k_distinct_exception_lines(compiled):
    """The hostile shape end to end: every line a new exception name (no flood collapses them)."""
    names = _names(20000, seed=11)
    data = (
        "SLURM_JOB_ID=777\n" + "".join(f"[rank{i % 64}]: {name}: went wrong\n" for i, name in enumerate(names))
    ).encode()
    store = Store(":memory:")
    result = replay_inputs([Input("slurm-777.out", lambda: [data], "job")], compiled, store)
    assert result.stats["overflowed"] >= 20000 - SCOPE_MATCHER_MAX * 2
    [inc] = result.incidents
    assert store.incident(inc.id).fault_class == "app_error"
    counted = sum(
        count
        for fact, count, _ in store.facts(inc.id)
        if fact.kind == "log" and fact.get("matcher") == "python_exception_generic"
    )
    assert counted == 20000
    store.close()


def test_the_bound_is_the_policy_distinct_lines(compiled):
    from engine.rulebook import load_rulebook

    bad = load_rulebook(overlays=[("site.yaml", "policy:\n  distinct_lines: 0\n")])
    assert not bad.ok
    assert any("site.yaml:2:" in str(d) and "distinct_lines" in str(d) for d in bad.errors), bad.errors
    site = load_rulebook(overlays=[("site.yaml", "policy:\n  distinct_lines: 3\n")])
    assert site.ok, site.errors
    eng = Engine(site.compiled, Store(":memory:"))
    for i, name in enumerate(_names(10)):
        eng.ingest(_exception("701", name, 5.0 + i, i))
    assert _held(eng, "701") == 3 and eng.stats["overflowed"] == 7
    eng.close()
