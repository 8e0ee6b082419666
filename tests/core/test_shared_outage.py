"""One cause, many jobs (issue 21, policy.shared_outage): jobs of different users failing with one
class within the window open one shared incident that pages once and holds their requeues until
it ends. Default rulebook, virtual time, the scheduler's word given as job facts."""

from __future__ import annotations

import dataclasses

import pytest

from engine.core.incidents import Engine
from engine.core.shared_outage import common_path
from engine.facts import Fact
from engine.rulebook import load_rulebook
from engine.store import ActionStatus, Store

T0 = 1_795_950_000.0


@pytest.fixture(scope="module")
def compiled():
    result = load_rulebook([], defaults=True)
    assert result.ok
    return result.compiled


def _job(engine: Engine, job: str, at: float, user: str | None, nodes=("n1",)) -> None:
    attrs = {"job": job, "attempt": 0, "state": "RUNNING", "nodes": list(nodes)}
    if user is not None:
        attrs["user"] = user
    engine.ingest(Fact.make("job", attrs, at, "slurm:squeue"))


def _eio(engine: Engine, job: str, at: float, path: str = "/lustre/a/x.bin", origin: str | None = None) -> None:
    """One line of ``job``'s log (its file: ``origin``) saying a read failed with EIO."""
    engine.ingest(
        Fact.make(
            "log",
            {
                "matcher": "storage_errno",
                "errno": 5,
                "strerror": "Input/output error",
                "path": path,
                "job": job,
                "attempt": 0,
                "source": "job",
                "text": f"OSError: [Errno 5] Input/output error: '{path}'",
            },
            at,
            origin or f"/home/u/slurm-{job}.out:7",
        )
    )


def _run(compiled, n_jobs: int, *, spacing: float = 2.0, users=None, mode: str = "act", end_after: float = 300):
    """``n_jobs`` jobs (users[i], default one each) fail with EIO ``spacing`` s apart; time then
    moves on past the settle window (and ``end_after`` s more)."""
    store = Store(":memory:")
    engine = Engine(compiled, store, mode=mode)
    for i in range(n_jobs):
        job = str(500 + i)
        _job(engine, job, T0, users[i] if users is not None else f"user{i}", nodes=(f"n{i + 1}", "n9"))
    for i in range(n_jobs):
        _eio(engine, str(500 + i), T0 + 10 + i * spacing, f"/lustre/scratch/ds/shard-{i}.bin")
    engine.advance(T0 + 10 + n_jobs * spacing + end_after)
    return engine, store


def _outages(store: Store):
    return [r for r in store.incidents() if r.key.startswith("outage:")]


def _pages(store: Store) -> list[dict]:
    return [a for a in store.actions() if a["action"] == "notify"]


def test_five_jobs_of_five_users_within_the_window_are_one_shared_outage(compiled):
    engine, store = _run(compiled, 5, end_after=120)  # past settle, before quiet
    [outage] = _outages(store)
    assert outage.status == "open" and outage.fault_class == "storage_io_error"
    members = [r for r in store.incidents() if r.job is not None]
    assert len(members) == 5 and all(r.decision == "restart" for r in members)
    requeues = [a for a in store.actions() if a["action"] == "requeue"]
    assert len(requeues) == 5
    assert {a["status"] for a in requeues} == {ActionStatus.HELD} and {a["held_by"] for a in requeues} == {outage.id}
    assert store.unfinished_incidents() == [outage.id]  # the page only: nothing held is run
    pages = _pages(store)
    assert len(pages) == 1 and pages[0]["incident"] == outage.id  # one page, not five
    guards = " ".join(g["why"] for g in outage.guards)
    assert "5 jobs of 5 users" in guards and "path /lustre/scratch/ds" in guards
    assert outage.reason is not None and outage.reason.startswith("shared outage: 5 jobs")  # while open
    assert any(g.get("guard") == "shared_outage" for r in members for g in r.guards)


def test_four_jobs_are_four_failures(compiled):
    _, store = _run(compiled, 4)
    assert _outages(store) == []
    requeues = [a for a in store.actions() if a["action"] == "requeue"]
    assert len(requeues) == 4 and {a["status"] for a in requeues} == {ActionStatus.PLANNED}


def test_five_jobs_spread_wider_than_the_window_are_five_failures(compiled):
    window = compiled.policy.shared_outage.window
    _, store = _run(compiled, 5, spacing=window / 3)  # any window of the policy's holds at most 4
    assert _outages(store) == []


def test_the_same_user_five_times_is_no_shared_outage_but_two_users_are(compiled):
    _, store = _run(compiled, 5, users=["alice"] * 5)
    assert _outages(store) == []
    _, store = _run(compiled, 5, users=["alice"] * 4 + ["bob"])
    assert len(_outages(store)) == 1


def test_one_log_naming_other_jobs_cannot_open_an_outage(compiled):
    """A job's log is one job's evidence: lines that print other jobs' ids and paths (taken for
    those jobs, as a replay takes a job from its log's own lines) still come from one log."""
    store = Store(":memory:")
    engine = Engine(compiled, store, mode="act")
    for i in range(6):
        _job(engine, str(600 + i), T0, f"user{i}")
    for i in range(6):  # all from slurm-600.out
        _eio(engine, str(600 + i), T0 + 10 + i, f"/lustre/x/{i}", origin="/home/u/slurm-600.out:9")
    engine.advance(T0 + 400)
    assert _outages(store) == []
    assert {a["status"] for a in store.actions() if a["action"] == "requeue"} == {ActionStatus.PLANNED}


def test_the_outage_ends_when_the_class_is_quiet_and_releases_what_it_held(compiled):
    quiet = compiled.policy.shared_outage.quiet
    engine, store = _run(compiled, 5, end_after=120)
    [outage] = _outages(store)
    # a sixth job failing while it lasts joins it: held too, no page of its own
    _job(engine, "599", T0 + 200, "user9")
    _eio(engine, "599", T0 + 200)
    engine.advance(T0 + 200 + 130)
    assert store.incident(outage.id).status == "open"
    assert "6 jobs" in (store.incident(outage.id).reason or "")
    held = store.held_actions(outage.id)
    assert sorted(a["target"] for a in held) == ["500", "501", "502", "503", "504", "599"]
    assert len(_pages(store)) == 1
    engine.advance(T0 + 200 + quiet + 1)
    closed = store.incident(outage.id)
    assert closed.status == "closed" and closed.decision == "observe"
    assert "6 jobs" in (closed.reason or "") and "6 held action(s) released" in closed.guards[-1]["why"]
    requeues = [a for a in store.actions() if a["action"] == "requeue"]
    assert {a["status"] for a in requeues} == {ActionStatus.PLANNED}
    assert all("released: shared outage incident" in a["note"] for a in requeues)
    assert any(c.id == outage.id for c in engine.closed)  # announced like any incident


def test_an_operator_ends_it(compiled):
    engine, store = _run(compiled, 5, mode="recommend", end_after=120)
    [outage] = _outages(store)
    engine.outages.request_end(outage.id, "lustre is back (alice)")
    engine.advance(T0 + 200)
    closed = store.incident(outage.id)
    assert closed.status == "closed" and "ended by an operator (lustre is back (alice))" in closed.guards[-1]["why"]
    requeues = [a for a in store.actions() if a["action"] == "requeue"]
    assert {a["status"] for a in requeues} == {ActionStatus.RECOMMENDED}  # recommend mode: recommended


def test_hold_limit_ends_an_outage_that_keeps_failing(compiled):
    limit = 900.0
    policy = dataclasses.replace(
        compiled.policy, shared_outage=dataclasses.replace(compiled.policy.shared_outage, hold_limit=limit)
    )
    short = dataclasses.replace(compiled, policy=policy)
    engine, store = _run(short, 5, end_after=120)
    [outage] = _outages(store)
    t = T0 + 300
    while t < T0 + 10 + limit + 60:  # a new failure every 5 minutes: never quiet
        _job(engine, str(int(t)), t, "user7")
        _eio(engine, str(int(t)), t)
        t += 300
        engine.advance(t)
    closed = store.incident(outage.id)
    assert closed.status == "closed" and "hold_limit" in closed.guards[-1]["why"]


def test_network_outage_names_the_nodes_the_jobs_share(compiled):
    store = Store(":memory:")
    engine = Engine(compiled, store, mode="act")
    for i in range(5):
        job = str(700 + i)
        _job(engine, job, T0, f"user{i}", nodes=(f"n{i + 1}", "n40", "n41"))
        engine.ingest(
            Fact.make(
                "log",
                {
                    "matcher": "nccl_socket_closed",
                    "job": job,
                    "attempt": 0,
                    "source": "job",
                    "text": "NCCL WARN Net : Connection closed by remote peer",
                },
                T0 + 10 + i,
                f"/home/u/slurm-{job}.out:3",
            )
        )
    engine.advance(T0 + 400)
    [outage] = _outages(store)
    assert outage.fault_class == "nccl_network_error"
    assert "nodes shared by two or more of them: n40,n41" in outage.guards[0]["why"]
    assert outage.nodes == ()  # a label: no node is a target


def test_blast_radius_counts_requeues(compiled):
    policy = dataclasses.replace(
        compiled.policy, blast_radius=dataclasses.replace(compiled.policy.blast_radius, max_requeues=2)
    )
    small = dataclasses.replace(compiled, policy=policy)
    store = Store(":memory:")
    engine = Engine(small, store, mode="act")
    for i in range(3):  # three users' jobs fail an hour's minutes apart: no outage, three restarts
        _job(engine, str(800 + i), T0 + i * 400, f"user{i}")
        _eio(engine, str(800 + i), T0 + i * 400 + 10)
        engine.advance(T0 + i * 400 + 300)
    third = [r for r in store.incidents() if r.job == "802"][0]
    assert third.decision == "observe"
    assert any(g.get("guard") == "blast_radius" and "max_requeues" in g["why"] for g in third.guards)
    assert not [a for a in store.actions(third.id) if a["action"] == "requeue"]


@pytest.mark.parametrize(
    "paths, common",
    [
        (["/lustre/a/x", "/lustre/a/y"], "/lustre/a"),
        (["/lustre/a/b/x", "/lustre/a/c/y"], "/lustre/a"),
        (["/lustre/a/x", "/gpfs/a/y"], None),
        (["/lustre/a/x"], None),
        (["relative/x", "relative/y"], None),
    ],
)
def test_common_path(paths, common):
    assert common_path(paths) == common


def test_a_restarted_controller_goes_on_holding(compiled):
    """The outage and its jobs' incidents are still open when the controller restarts: the new
    engine takes the outage over from the store, with its members, and still holds their requeues."""
    store = Store(":memory:")
    engine = Engine(compiled, store, mode="act")
    for i in range(5):
        _job(engine, str(900 + i), T0, f"user{i}")
        _eio(engine, str(900 + i), T0 + 10 + i)
    engine.advance(T0 + 30)  # opened; the jobs' incidents still settle
    [outage] = _outages(store)
    assert store.incident(outage.id).status == "open" and not store.actions(1)
    again = Engine(compiled, store, mode="act")
    assert again.resume() == 5  # the jobs' incidents; the outage is the outages' own
    again.advance(T0 + 400)
    requeues = [a for a in store.actions() if a["action"] == "requeue"]
    assert len(requeues) == 5 and {a["held_by"] for a in requeues} == {outage.id}
    again.advance(T0 + 400 + compiled.policy.shared_outage.quiet)
    assert store.incident(outage.id).status == "closed"
    assert {a["status"] for a in store.actions() if a["action"] == "requeue"} == {ActionStatus.PLANNED}


def test_the_suspects_of_an_outages_jobs_are_no_history_for_drains(compiled):
    store = Store(":memory:")
    inc = store.open_incident("job:1:0", "1", 0, None, T0)
    store.set_suspects(inc, [{"rank": 3, "node": "n2", "signals": []}])
    store.close_incident(inc, T0 + 10, "nccl_timeout", "restart", (), None, "x")
    assert store.suspect_history(T0) == [("1", "n2", T0 + 10)]
    store.add_action(inc, f"{inc}:requeue:1", "requeue", "1", ["scontrol", "requeue", "1"], "act", "held", held_by=99)
    assert store.suspect_history(T0) == []


def test_the_actuator_pages_once_runs_nothing_held_and_requeues_when_it_ends(compiled):
    """In act mode against the simulated cluster: the outage's one page goes out, the jobs are
    not requeued while it lasts, and are once it ends (each re-read before it is requeued)."""
    from engine.live.actuator import Actuator
    from scheduler_adapters.simulated import SimulatedCluster

    sim = SimulatedCluster([f"n{i}" for i in range(1, 11)])
    store = Store(":memory:")
    engine = Engine(compiled, store, mode="act")
    act = Actuator(store, sim, compiled, verify_timeout=0.0, retry_delay=0.0)
    jobs = [sim.submit(f"train{i}", nodes=2) for i in range(5)]
    for i, job in enumerate(jobs):
        _job(engine, job, T0, f"user{i}", nodes=sim.job(job).nodes)
        _eio(engine, job, T0 + 10 + i)
        sim.fail(job)  # its tasks failed: FAILED, as Slurm says it
    engine.advance(T0 + 200)
    for _ in range(5):
        act.step()
    [outage] = _outages(store)
    [page] = _pages(store)
    assert page["status"] in (ActionStatus.VERIFIED, ActionStatus.SUCCEEDED), page
    assert page["incident"] == outage.id
    assert not [h for h in sim.history if h[:2] == ["scontrol", "requeue"]]
    engine.advance(T0 + 200 + compiled.policy.shared_outage.quiet)
    for _ in range(5):
        act.step()
    requeued = sorted(h[2] for h in sim.history if h[:2] == ["scontrol", "requeue"])
    assert requeued == sorted(jobs)
    assert len(_pages(store)) == 1
