"""`recover incidents` after a year: the table shows the newest 50 (and says how many there are),
--limit N the newest N, --limit 0 all; --json lists every one unless --limit says otherwise.
(With 100,000 incidents the whole table took 42 s to print; the newest 50 take 0.2 s.)"""

from __future__ import annotations

import json

import pytest

from engine.store import Store

from .conftest import recover


@pytest.fixture(scope="module")
def many(tmp_path_factory):
    db = tmp_path_factory.mktemp("many") / "r.db"
    st = Store(db)
    with st.transaction():
        for i in range(1, 61):
            inc = st.open_incident(f"job:{i}", str(1000 + i), 0, None, float(i))
            if i % 3:
                st.close_incident(inc, float(i) + 1, "nccl_timeout", "restart", (), None, "r")
    st.close()
    return db


def _jobs(table: str) -> set[int]:
    return {
        int(w) for line in table.splitlines() for w in line.replace("│", " ").split() if w.isdigit() and len(w) == 4
    }


def test_the_table_shows_the_newest_50_and_says_how_many_there_are(many):
    r = recover("incidents", "--db", str(many))
    assert r.returncode == 0, r.stderr
    assert "the newest 50 of 60 incident(s)" in r.stdout and "--limit 0 for all" in r.stdout
    assert _jobs(r.stdout) == set(range(1011, 1061))


def test_limit_n_and_limit_0(many):
    r = recover("incidents", "--db", str(many), "--limit", "5")
    assert _jobs(r.stdout) == set(range(1056, 1061)) and "the newest 5 of 60" in r.stdout
    r = recover("incidents", "--db", str(many), "-n", "0")
    assert _jobs(r.stdout) == set(range(1001, 1061)) and "60 incident(s)" in r.stdout and "newest" not in r.stdout
    r = recover("incidents", "--db", str(many), "--status", "open", "-n", "3")
    open_jobs = [1000 + i for i in range(1, 61) if i % 3 == 0]
    assert _jobs(r.stdout) == set(open_jobs[-3:]) and f"the newest 3 of {len(open_jobs)}" in r.stdout
    assert recover("incidents", "--db", str(many), "--limit", "-1").returncode == 2


def test_json_lists_every_incident_unless_limited(many):
    rows = [json.loads(x) for x in recover("incidents", "--db", str(many), "--json").stdout.splitlines()]
    assert [r["id"] for r in rows] == list(range(1, 61))
    rows = [json.loads(x) for x in recover("incidents", "--db", str(many), "--json", "-n", "2").stdout.splitlines()]
    assert [r["id"] for r in rows] == [59, 60]
