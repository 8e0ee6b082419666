"""What a suspect costs (issue 21): the restart excludes the suspect's node and drains nothing; a
node that is a suspect of different jobs' failed attempts is recommended for drain (its own
autonomy, policy.autonomy.drain_suspect), under the blast-radius guard. Default rulebook, virtual time."""

from __future__ import annotations

import pytest

from engine.core.incidents import Engine
from engine.facts import Fact
from engine.rulebook import load_rulebook
from engine.store import Store

T0 = 1_795_950_000.0


@pytest.fixture(scope="module")
def compiled():
    result = load_rulebook([], defaults=True)
    assert result.ok
    return result.compiled


def _timeout(engine: Engine, job: str, attempt: int, at: float, nodes=("n1", "n2"), silent: int = 3) -> None:
    """A 4-rank job on ``nodes`` (2 ranks each) whose rank ``silent`` stopped: the others time out."""
    engine.ingest(
        Fact.make("job", {"job": job, "attempt": attempt, "state": "RUNNING", "nodes": list(nodes)}, at, "slurm:squeue")
    )
    for r in range(4):
        engine.ingest(
            Fact.make(
                "log",
                {
                    "matcher": "nccl_comm_rank",
                    "rank_evidence": "comm",
                    "rank": r,
                    "nranks": 4,
                    "node": nodes[r // 2],
                    "job": job,
                    "attempt": attempt,
                    "source": "job",
                    "text": f"comm rank {r}",
                },
                at + 1,
                f"slurm-{job}.out:{r + 1}",
            )
        )
    for r in range(4):
        if r == silent:
            continue
        engine.ingest(
            Fact.make(
                "log",
                {
                    "matcher": "nccl_watchdog_timeout",
                    "rank_evidence": "timeout",
                    "rank": r,
                    "seq": 42,
                    "op": "ALLREDUCE",
                    "job": job,
                    "attempt": attempt,
                    "source": "job",
                    "text": f"[Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=42, OpType=ALLREDUCE",
                },
                at + 600,
                f"slurm-{job}.out:{10 + r}",
            )
        )
    engine.advance(at + 600 + 300)  # past settle: the incident closes


def _actions(store: Store, incident: int) -> list[tuple[str, str, str]]:
    return sorted((a["action"], a["target"], a["status"]) for a in store.actions(incident))


def test_first_incident_excludes_the_suspect_node_and_drains_nothing(compiled):
    store = Store(":memory:")
    engine = Engine(compiled, store, mode="act")
    _timeout(engine, "100", 0, T0)
    inc = store.incident(1)
    assert inc is not None and inc.fault_class == "nccl_timeout" and inc.decision == "restart"
    assert [(s["rank"], s["node"]) for s in inc.suspects] == [(3, "n2")]
    assert inc.suspects[0]["signals"][0]["signal"] == "never_reported"
    assert inc.nodes == ("n2",)
    assert _actions(store, 1) == [("exclude", "100", "planned"), ("requeue", "100", "planned")]
    exclude = next(a for a in store.actions(1) if a["action"] == "exclude")
    assert exclude["argv"] == ["scontrol", "update", "JobId=100", "ExcNodeList=n2"]


def test_the_same_job_again_is_no_second_job(compiled):
    store = Store(":memory:")
    engine = Engine(compiled, store, mode="act")
    _timeout(engine, "100", 0, T0)
    _timeout(engine, "100", 1, T0 + 3600)
    assert not [a for a in store.actions() if a["action"] == "drain_suspect"]


def test_a_suspect_of_another_job_on_the_same_node_is_recommended_for_drain(compiled):
    store = Store(":memory:")
    engine = Engine(compiled, store, mode="act")
    _timeout(engine, "100", 0, T0)
    _timeout(engine, "200", 0, T0 + 3600)
    second = store.incident(2)
    assert second is not None and second.job == "200"
    drains = [a for a in store.actions(2) if a["action"] == "drain_suspect"]
    assert [(a["target"], a["status"], a["mode"]) for a in drains] == [("n2", "recommended", "recommend")]
    assert drains[0]["argv"][:4] == ["scontrol", "update", "NodeName=n2", "State=DRAIN"]
    assert any(g.get("guard") == "suspects" and "2 different jobs" in g.get("why", "") for g in second.guards)
    assert not [a for a in store.actions() if a["action"] == "drain"]  # no plain drain, ever


def test_outside_the_window_a_suspect_does_not_add_up(compiled):
    store = Store(":memory:")
    engine = Engine(compiled, store, mode="act")
    _timeout(engine, "100", 0, T0)
    _timeout(engine, "200", 0, T0 + 2 * 86400)  # policy.suspects.window is 24h
    assert not [a for a in store.actions() if a["action"] == "drain_suspect"]


def test_the_blast_radius_guard_holds_back_a_drain_for_diagnosis(compiled):
    store = Store(":memory:")
    engine = Engine(compiled, store, mode="act")
    for i in range(4):  # four nodes already drained within the hour (max_drains 4)
        inc = store.open_incident(f"node:d{i}", None, None, f"d{i}", T0)
        store.close_incident(inc, T0, "gpu_fell_off_bus", "isolate_and_restart", [f"d{i}"], None, "x")
        store.add_action(inc, f"{inc}:drain:d{i}", "drain", f"d{i}", ["true"], "act", "planned")
    _timeout(engine, "100", 0, T0)
    _timeout(engine, "200", 0, T0 + 600)
    second = store.incident(6)
    assert second is not None and second.job == "200"
    assert not [a for a in store.actions(6) if a["action"] == "drain_suspect"]
    assert any(g.get("guard") == "blast_radius" and "for diagnosis" in g.get("why", "") for g in second.guards)
