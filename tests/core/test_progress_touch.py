"""Live, a progress line that need not be a fact only touches the progress tracker (issue 24,
item 5; ``StreamFacts.into``): the tracker, the goodput ledger, the job's own straggler baseline
and the hang it finds are what they are when every line is a fact, with at most one progress
fact per file and matcher per ``progress_fact_every()`` seconds, and a fact still for the first
progress line after a failure line and for a slow point."""

from __future__ import annotations

import calendar
import time

import pytest

from engine.core import sampler
from engine.core.context import ClusterContext, FileContext
from engine.core.converter import HitConverter
from engine.core.incidents import Engine
from engine.core.linefacts import StreamFacts
from engine.core.linetime import LineClock
from engine.core.scanner import scanner_for
from engine.facts import Fact
from engine.rulebook import require_rulebook
from engine.store import Store

T0 = calendar.timegm((2026, 3, 1, 10, 0, 0, 0, 0, 0))
JOB = "4242"


@pytest.fixture(scope="module")
def compiled():
    return require_rulebook()


def _line(t: float, it: int, ms: float) -> bytes:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t))
    return (
        f"[{stamp}] [INFO] [rank0]: iteration {it:8d}/  100000 | consumed samples: {it * 512:12d} | "
        f"elapsed time per iteration (ms): {ms:.1f} | learning rate: 1.500E-04 | lm loss: 2.3E+00 |\n"
    ).encode()


class _Live:
    """One followed job log, read one write at a time on a fake clock, into an engine of its own;
    ``touch``: progress lines may only touch the tracker (the live controller's way)."""

    def __init__(self, compiled, touch: bool):
        self.now = T0
        self.cluster = ClusterContext()
        self.engine = Engine(compiled, Store(":memory:"), cluster=self.cluster)
        conv = HitConverter(list(compiled.matchers), self.cluster, clock=lambda: self.now)
        conv.scheduler = True
        scanner, index_map = scanner_for(compiled, "job")
        ctx = FileContext(path=f"/logs/slurm-{JOB}.out", source="job", job=JOB, attempt=0, dates=LineClock())
        ctx.nodes = {"gpu001", "gpu002"}
        self.stream = StreamFacts(scanner, conv, ctx, index_map)
        self.touch = touch
        self.facts: list[Fact] = []
        self.engine.ingest(Fact.make("job", {"job": JOB, "attempt": 0, "state": "RUNNING"}, T0, "poll"))

    def write(self, at: float, data: bytes) -> None:
        self.now = at
        self.stream.into = self.engine if self.touch else None
        for _, _, item in self.stream.feed(data):
            if isinstance(item, Fact):
                self.facts.append(item)
                self.engine.ingest(item)
        self.engine.advance(at)

    def state(self):
        a = self.engine.tracker.attempts[(JOB, 0)]
        own = {k: (s.seen, list(s.normal), s.slow, s.reported) for k, s in a.own.items()}
        seen = self.engine.ledger._seen[(JOB, 0)]
        return (a.last_at, a.step, a.max_gap, a.gaps, own, seen.last_at, seen.step, list(seen.times))

    def incidents(self):
        return sorted((r.key, r.status, r.opened_at) for r in self.engine.store.incidents())


def _run(compiled, touch: bool, writes):
    live = _Live(compiled, touch)
    states = []
    for at, data in writes:
        live.write(at, data)
        states.append(live.state())
    return live, states


def _steady(n: int, start: float = T0 + 5, every: float = 4.0, slow: range = range(0)):
    return [(start + i * every, _line(start + i * every, i + 1, 9000.0 if i in slow else 4012.5)) for i in range(n)]


def test_touched_lines_leave_the_tracker_and_ledger_as_facts_would(compiled):
    writes = _steady(200)
    full, want = _run(compiled, False, writes)
    touched, got = _run(compiled, True, writes)
    assert got == want  # after every write: last progress, step, learned gaps, own baseline, ledger
    # what outlives a restart is what the store holds: the same goodput rows (the tracker is memory
    # only, facts or touches: a restart rebuilds it from the lines after the committed positions)
    assert touched.engine.store.progress_rows() == full.engine.store.progress_rows() != {}
    assert len(full.facts) == 200
    # one fact a minute of log (and the first), not one a line
    assert 10 <= len(touched.facts) <= 200 * 4 / sampler.PROGRESS_FACT_EVERY_S + 2, len(touched.facts)


def test_a_hang_after_touched_lines_comes_when_it_comes_with_facts(compiled):
    writes = _steady(120)
    end = writes[-1][0]
    full, _ = _run(compiled, False, writes)
    touched, _ = _run(compiled, True, writes)
    for live in (full, touched):
        for k in range(1, 80):  # silence: the clock goes on, 5 s at a time
            live.write(end + 5 * k, b"")
    assert full.incidents() and touched.incidents() == full.incidents()
    stalled = [live.engine.tracker.attempts[(JOB, 0)].stalled_at for live in (full, touched)]
    assert stalled[0] == stalled[1] == end


def test_a_slowdown_is_judged_on_facts_and_found_at_the_same_point(compiled):
    writes = _steady(150, slow=range(100, 150))
    full, want = _run(compiled, False, writes)
    touched, got = _run(compiled, True, writes)
    assert got == want
    reported = [[s.reported for s in live.engine.tracker.attempts[(JOB, 0)].own.values()] for live in (full, touched)]
    assert reported[0] == reported[1] == [True]
    # the point that ends the slow run is a fact (the tracker refused to take it as a touch);
    # the slow points before it and after it (reported) are touches, but one fact a minute
    slow_facts = [f.at for f in touched.facts if f.get("step_time_ms") == 9000.0]
    assert slow_facts[0] == writes[102][0], slow_facts
    assert all(b - a >= sampler.PROGRESS_FACT_EVERY_S for a, b in zip(slow_facts, slow_facts[1:])), slow_facts
    assert full.incidents() == touched.incidents()


def test_the_first_progress_after_a_failure_line_is_a_fact(compiled):
    writes = _steady(40)
    t = writes[-1][0] + 2
    error = b"[2026-03-01 10:03:00] gpu001:1234:1300 [0] transport/net_ib.cc:1034 NCCL WARN NET/IB : Got completion with error 12, opcode 0, len 0, vendor err 129\n"
    writes.append((t, error))
    writes += _steady(5, start=t + 2)
    touched, _ = _run(compiled, True, writes)
    kinds = [(f.kind, f.at) for f in touched.facts]
    after = [k for k in kinds if k[1] > t]
    assert after and after[0][0] == "progress" and after[0][1] == t + 2, kinds[-6:]
    assert len([k for k in after if k[0] == "progress"]) == 1  # then touches again


def test_a_bad_setting_is_refused_and_zero_makes_every_line_a_fact(compiled, monkeypatch, caplog):
    monkeypatch.setenv("RECOVER_PROGRESS_FACT_EVERY", "soon")
    assert sampler.progress_fact_every() == sampler.PROGRESS_FACT_EVERY_S
    assert "RECOVER_PROGRESS_FACT_EVERY" in caplog.text
    monkeypatch.setenv("RECOVER_PROGRESS_FACT_EVERY", "0")
    touched, _ = _run(compiled, True, _steady(30))
    assert len(touched.facts) == 30
