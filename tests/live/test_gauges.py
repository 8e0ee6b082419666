"""engine.live.metrics' Gauges and LogLimiter alone, on a fake clock."""

from __future__ import annotations

import pytest

from engine.live.metrics import Gauges, LogLimiter, Metrics


def value(m: Metrics, name: str, **labels) -> float | None:
    return m.registry.get_sample_value(name, labels)


def update(g: Gauges, **kw) -> None:
    args = {"lines": 0, "facts": 0, "files": (0, 0), "file_stats": {}, "spool_ok": None, "scheduler": False}
    g.update(**{**args, **kw})


def test_rates_are_taken_over_a_second_at_least(clock):
    m = Metrics()
    g = Gauges(m, clock=clock)
    clock.advance(0.5)
    update(g, lines=100, facts=10)
    assert value(m, "recover_lines_per_second") == 0  # too soon to say
    clock.advance(1.5)
    update(g, lines=400, facts=40)
    assert value(m, "recover_lines_per_second") == pytest.approx(200)
    assert value(m, "recover_facts_per_second") == pytest.approx(20)
    clock.advance(1.0)
    update(g, lines=400, facts=40)
    assert value(m, "recover_lines_per_second") == 0


def test_source_health_and_file_problems_counted_once(clock):
    m = Metrics()
    g = Gauges(m, clock=clock)
    update(g, files=(3, 1), file_stats={"rotations": 2, "vanished": 1}, spool_ok=False, scheduler=True)
    update(g, files=(3, 1), file_stats={"rotations": 2, "vanished": 1}, spool_ok=False, scheduler=True)
    update(g, files=(4, 0), file_stats={"rotations": 3, "vanished": 1}, spool_ok=True, scheduler=True)
    assert value(m, "recover_source_errors_total", kind="file", reason="rotated") == 3
    assert value(m, "recover_source_errors_total", kind="file", reason="vanished") == 1
    assert value(m, "recover_sources", kind="file") == 4
    assert value(m, "recover_sources_unhealthy", kind="file") == 0
    assert value(m, "recover_sources_healthy", kind="spool") == 1
    assert value(m, "recover_sources", kind="scheduler") == 1


def test_without_a_spool_or_scheduler_they_are_not_sources(clock):
    m = Metrics()
    update(Gauges(m, clock=clock), files=(1, 0))
    assert value(m, "recover_sources", kind="spool") is None
    assert value(m, "recover_sources", kind="scheduler") is None


def test_one_kind_of_problem_is_said_once_per_interval(clock):
    limiter = LogLimiter(every=30.0, clock=clock)
    said = []
    for second in range(65):
        said += [(second, key) for key in ("spool", "scheduler") if limiter.ok(key)]
        clock.advance(1.0)
    assert said == [(0, "spool"), (0, "scheduler"), (30, "spool"), (30, "scheduler"), (60, "spool"), (60, "scheduler")]
