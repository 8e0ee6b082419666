"""``recover status`` and the HA gauges (issue 22 item 5): the leader with its term and lease age,
the followers, the scheduler's health as the leader saw it, the backlog of unfinished actions."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from engine.cli.main import app
from engine.live.leader import Leadership
from engine.live.metrics import Metrics, update_ha
from engine.store import ActionStatus, Store

runner = CliRunner()


def test_status_names_leader_followers_scheduler_and_backlog(db_target):
    db = db_target
    a, b = Store(db), Store(db)
    lead = Leadership(a, 30, holder="hostA:11:1.0", info=lambda: {"scheduler": "ok"})
    follow = Leadership(b, 30, holder="hostB:22:2.0", info=lambda: {"behind_bytes": 120, "files": 3})
    assert lead.tick() == "took" and follow.tick() is None
    with a.transaction():
        inc = a.open_incident(key="job:1:0", job="1", attempt=0, node=None, at=1.0)
        a.add_action(inc, "k1", "drain", "n1", ["scontrol"], "act", ActionStatus.PLANNED)
        a.add_action(inc, "k2", "requeue", "1", ["scontrol"], "act", ActionStatus.PLANNED)

    out = runner.invoke(app, ["status", "--db", str(db), "--json"])
    assert out.exit_code == 0, out.output
    st = json.loads(out.output)
    assert st["leader"]["holder"] == "hostA:11:1.0" and st["leader"]["term"] == 1
    assert 0 <= st["leader"]["lease_age_s"] < 10 and st["leader"]["expires_in_s"] > 20
    assert [(f["holder"], f["behind_bytes"]) for f in st["followers"]] == [("hostB:22:2.0", 120)]
    assert st["scheduler"] == "ok"
    assert st["backlog"]["actions"] == 2 and st["backlog"]["by_status"] == {"planned": 2}

    text = runner.invoke(app, ["status", "--db", str(db)]).output
    assert "leader     hostA:11:1.0  term 1" in text and "follower   hostB:22:2.0" in text
    assert "warm: 3 files, 120 bytes behind" in text
    assert "backlog    2 actions unfinished (planned 2)" in text

    m = Metrics()
    update_ha(m, lead, a, True)
    assert m.leader._value.get() == 1 and m.leader_term._value.get() == 1
    assert m.controllers.labels(role="follower")._value.get() == 1 and m.backlog._value.get() == 2
    update_ha(m, follow, b, None)
    assert m.leader._value.get() == 0

    lead.release()  # a clean stop: no leader, the last one named
    text = runner.invoke(app, ["status", "--db", str(db)]).output
    assert "leader     none: the lease of hostA:11:1.0 (term 1) has run out" in text
    a.close()
    b.close()


def test_status_of_a_store_no_controller_led(db_target):
    Store(db_target).close()
    out = runner.invoke(app, ["status", "--db", db_target])
    assert out.exit_code == 0, out.output
    assert "no controller has led this store" in out.output


def test_status_shows_the_partitions_modes_the_leader_applies(tmp_path):
    db = tmp_path / "r.db"
    a = Store(db)
    scope = {"default": "recommend", "partitions": {"canary": "act", "scratch": "ignore"}, "job_comment": True}
    lead = Leadership(a, 30, holder="hostA:11:1.0", info=lambda: {"scheduler": "ok", "scope": scope})
    assert lead.tick() == "took"
    st = json.loads(runner.invoke(app, ["status", "--db", str(db), "--json"]).output)
    assert st["scope"] == scope
    text = runner.invoke(app, ["status", "--db", str(db)]).output
    assert "scope      canary act, scratch ignore; other partitions recommend; job comments read" in text
    a.close()
