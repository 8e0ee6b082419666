"""ProgressTracker.due() in deadline order (issue 24, the cost curve): with thousands of job
attempts it looks at those whose silence may be over, not at every one, and reports stalls as
before (once per silence, in the order the attempts became known)."""

from __future__ import annotations

from types import SimpleNamespace

from engine.core.progress import ProgressTracker
from engine.facts import Fact
from engine.rulebook import require_rulebook
from engine.rulebook.policy_model import Hang


def tracker(bound: float | None = 60.0, require_running: bool = False) -> ProgressTracker:
    hang = Hang(
        bound=bound,
        factor=3.0,
        min_bound=30.0,
        min_samples=3,
        require_running=require_running,
        any_output=False,
        fact_ttl=3600.0,
    )
    # the shipped straggler settings: only the hang settings matter here
    straggler = require_rulebook().policy.straggler
    return ProgressTracker(SimpleNamespace(hang=hang, straggler=straggler))  # type: ignore[arg-type]


def prog(job: str, at: float, step: int) -> Fact:
    return Fact.make("progress", {"job": job, "attempt": 0, "step": step}, at, f"log:{job}:{step}")


def stalled(t: ProgressTracker, now: float) -> list[str]:
    return [f.get("job") for f in t.due(now)]


def test_only_the_attempts_due_are_looked_at(monkeypatch) -> None:
    t = tracker()
    for i in range(2000):
        t.observe(prog(str(i), 0.0, 1))
    looked: list[object] = []
    real = ProgressTracker.bound_for
    monkeypatch.setattr(ProgressTracker, "bound_for", lambda self, a: looked.append(a) or real(self, a))
    for now in range(1, 60):
        assert stalled(t, float(now)) == []
    assert looked == []  # nothing is due before 60 s: no attempt was looked at
    t.observe(prog("7", 30.0, 2))  # progress pushes its deadline on
    assert stalled(t, 61.0) == [str(i) for i in range(2000) if i != 7]  # in the order they became known
    assert stalled(t, 62.0) == []  # once per silence
    assert stalled(t, 91.0) == ["7"]
    t.observe(prog("3", 100.0, 2))
    assert stalled(t, 150.0) == [] and stalled(t, 161.0) == ["3"]  # a new silence after new progress


def test_a_learned_bound_and_running_state_are_still_obeyed() -> None:
    t = tracker(bound=None, require_running=True)
    t.job_state("a", 0, "RUNNING", 0.0)
    for step, at in enumerate((10.0, 20.0, 30.0, 40.0)):  # gaps of 10 s: bound max(30, 3 x 10) = 30 s
        t.observe(prog("a", at, step))
    t.job_state("a", 0, "COMPLETING", 41.0)
    assert stalled(t, 80.0) == []  # silent past its bound, but not running
    t.job_state("a", 0, "RUNNING", 81.0)
    assert stalled(t, 82.0) == ["a"]
    t.forget("a", 0)
    t.job_state("a", 0, "RUNNING", 90.0)  # a new record for it: its clock starts again
    assert stalled(t, 200.0) == []  # no bound learned yet for the new record
