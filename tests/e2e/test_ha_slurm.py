"""Two `recover run` on one store against the real Slurm (issue 22, "one leader, fenced"): the
second follows; the leader killed with SIGKILL between the drain and the requeue is replaced
within the lease + 10 s and the plan completes with no action doubled, on SQLite and on PostgreSQL; a leader paused (SIGSTOP)
past its lease and resumed never acts again, on SQLite and on PostgreSQL (there the lease runs out
by the server's clock and the server's triggers refuse the old term). Run under the cluster lock:

    flock /tmp/slurm.lock .venv/bin/python -m pytest -q -p no:cacheprovider tests/e2e/test_ha_slurm.py
"""

from __future__ import annotations

import signal
import subprocess
import time

import pytest

from engine.store import Store, StoreError
from tests.e2e.test_slurm_e2e import JOB, Harness, slurm  # noqa: F401  (the module's fixture)
from tests.helpers import wait_for

pytestmark = pytest.mark.slurm
LEASE_S = 3.0


@pytest.fixture
def h(tmp_path, slurm):
    harness = Harness(tmp_path, slurm)
    yield harness
    harness.close()


class PgHarness(Harness):
    """The same world with the store on PostgreSQL, read through a read-only Store."""

    def __init__(self, tmp, slurm, dsn: str):
        super().__init__(tmp, slurm)
        self.db = dsn  # type: ignore[assignment]

    def query(self, sql: str, *args):
        try:
            st = Store(self.db, readonly=True)
        except StoreError:  # the controller has not created the tables yet
            return []
        try:
            return [tuple(r) for r in st._exec(sql, args)]
        finally:
            st.close()


@pytest.fixture
def h_pg(tmp_path, slurm, pg_dsn):
    harness = PgHarness(tmp_path, slurm, pg_dsn)
    yield harness
    harness.close()


def start(h: Harness, name: str, env: dict | None = None) -> subprocess.Popen:
    """One controller with a short lease, started and answering (its own log: NAME.log)."""
    p = h.cli(
        "run",
        "--scheduler",
        "slurm",
        "--spool",
        str(h.spool),
        "--db",
        str(h.db),
        "-r",
        str(h.site),
        "--scheduler-interval",
        "1",
        "--lease",
        str(LEASE_S),
        env=env,
        log=name,
    )
    log = h.tmp / f"{name}.log"
    wait_for(
        f"controller {name} to start", lambda: p.poll() is not None or b"recover run: mode=" in log.read_bytes(), 90
    )
    assert p.poll() is None, log.read_text()
    return p


def log_of(h: Harness, name: str) -> str:
    return (h.tmp / f"{name}.log").read_text(errors="replace")


def terms(h: Harness, job: str) -> list[tuple[str, str, int | None, int]]:
    """The acted journal of ``job``'s incidents: (action, status, term, attempts)."""
    return h.query(
        "SELECT a.action, a.status, a.term, a.attempts FROM actions a JOIN incidents i ON i.id = a.incident "
        "WHERE a.mode = 'act' AND i.job = ? ORDER BY a.id",
        job,
    )


def lease_term(h: Harness) -> int:
    rows = h.query("SELECT term FROM lease")
    return int(rows[0][0]) if rows else 0


@pytest.fixture(params=["sqlite", "postgresql"])
def h_any(request, tmp_path, slurm):
    """The world once on each store: a SQLite file, and a schema of the test PostgreSQL."""
    if request.param == "sqlite":
        harness = Harness(tmp_path, slurm)
    else:
        harness = PgHarness(tmp_path, slurm, request.getfixturevalue("pg_dsn"))
    yield harness
    harness.close()


def test_leader_killed_between_drain_and_requeue_the_follower_completes_the_plan(h_any):
    h = h_any
    h.start_agents()
    # the leader holds after each command it ran, before it journals the result: the kill lands
    # between the drain (done in Slurm, 'started' in the journal) and the requeue
    a = start(h, "a", env={"RECOVER_TEST_HOLD_AFTER_RUN": "60"})
    b = start(h, "b")
    assert lease_term(h) == 1
    wait_for("b to say who leads", lambda: "another controller leads this store" in log_of(h, "b"), 10)
    job = h.submit(JOB, "-N", "2")
    first = wait_for("job running", lambda: h.running(job), 30)
    bad = first.nodes[-1]
    h.wait_known(job)
    h.inject_xid(bad)
    wait_for("the drain to run", lambda: h.node(bad).drained, 40)
    assert [r[:2] for r in terms(h, job) if r[0] == "drain"] == [("drain", "started")]
    killed, killed_wall = time.monotonic(), time.time()
    a.send_signal(signal.SIGKILL)
    a.wait(timeout=10)
    wait_for("the follower to complete the plan", h.all_handled, LEASE_S + 10)
    took = time.monotonic() - killed
    again = wait_for("job running again", lambda: (j := h.running(job)) and j.attempt >= 1 and j, 30)
    assert again.attempt == 1 and bad not in again.nodes  # requeued once, without the bad node
    rows = terms(h, job)
    by_action: dict[str, list] = {}
    for r in rows:
        by_action.setdefault(r[0], []).append(r)
    assert all(len(v) == 1 for v in by_action.values()), rows  # nothing doubled
    drain = by_action["drain"][0]
    assert drain[1] == "verified" and drain[3] == 1  # verified by the new leader, not run again
    assert lease_term(h) == 2 and all(r[2] == 2 for r in rows if r[0] != "drain"), rows
    assert "took over as leader (term 2)" in log_of(h, "b")
    assert b.poll() is None
    # the first command the new leader ran (the drain it found done was only verified)
    first = h.query(
        "SELECT MIN(issued_at) FROM actions WHERE mode = 'act' AND term = 2 AND action != 'drain' AND issued_at IS NOT NULL"
    )
    assert first and first[0][0] is not None, rows
    print(
        f"\n{type(h).__name__}: kill -> first command of the new leader: {first[0][0] - killed_wall:.2f} s; "
        f"kill -> plan complete: {took:.1f} s (lease {LEASE_S:g} s)"
    )


def test_leader_paused_past_its_lease_never_acts_when_resumed(h):
    paused_leader_never_acts(h)


def test_leader_paused_past_its_lease_never_acts_when_resumed_on_postgresql(h_pg):
    paused_leader_never_acts(h_pg)


def paused_leader_never_acts(h: Harness) -> None:
    h.start_agents()
    # a short hold: the leader runs the drain and is paused before it journals the result
    a = start(h, "a", env={"RECOVER_TEST_HOLD_AFTER_RUN": "3"})
    start(h, "b")
    job = h.submit(JOB, "-N", "2")
    first = wait_for("job running", lambda: h.running(job), 30)
    bad = first.nodes[-1]
    h.wait_known(job)
    h.inject_xid(bad)
    wait_for("the drain to run", lambda: h.node(bad).drained, 40)
    a.send_signal(signal.SIGSTOP)
    try:
        wait_for("the follower to take over", lambda: lease_term(h) == 2, LEASE_S + 10)
        wait_for("the new leader to complete the plan", h.all_handled, 20)
        before = terms(h, job)
        paused_log = len(log_of(h, "a"))
    finally:
        a.send_signal(signal.SIGCONT)
    wait_for("the old leader to step down", lambda: "leader lease lost" in log_of(h, "a")[paused_log:], 15)
    after = log_of(h, "a")[paused_log:]
    assert "act incident=" not in after.replace("incident=%s", ""), after  # ran nothing once resumed
    assert terms(h, job) == before  # and journaled nothing: its write of the drain's result was refused
    assert [r[0] for r in before].count("drain") == 1 and [r[0] for r in before].count("requeue") == 1
    assert h.slurm.job(job).attempt == 1
