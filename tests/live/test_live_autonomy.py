"""recover run --dry-run previews fatal hardware's isolation at the moment act mode would run it
(issue 18, item 10): a fatal Xid from an agent's spool is recommended while its incident is still
open, long before the settle window ends, and nothing runs."""

from __future__ import annotations

import time

from engine.facts import Fact

from .conftest import RULES, wait_for


def test_dry_run_records_the_at_once_isolation_when_the_xid_arrives(live):
    # a settle window far longer than the test: a recommendation seen now was not made at the close
    rules = RULES.replace("settle: 1s", "settle: 1h\n  isolate: {at_once: [gpu_fell_off_bus]}")
    assert rules != RULES
    live.rules.write_text(rules.replace("MARKER", str(live.markers)))
    spool = live.tmp / "spool"
    spool.mkdir()
    live.start("--spool", str(spool), follow=None)
    xid = Fact.make("xid", {"code": 79, "node": "gpu-n1", "job": "501", "attempt": 0}, time.time(), "kmsg:gpu-n1")
    with open(spool / "gpu-n1.jsonl", "w") as fh:
        fh.write(xid.to_json() + "\n")
    wait_for(lambda: live.query("SELECT action FROM actions"), 15, what="the at-once recommendation")
    rows = live.query(
        "SELECT a.action, a.target, a.mode, a.status, a.note, i.status FROM actions a JOIN incidents i ON i.id = a.incident"
    )
    assert [r[:4] for r in rows] == [("requeue", "501", "recommend", "recommended")]
    assert "act mode would run it now" in rows[0][4]
    assert rows[0][5] == "open"  # an hour of settle left: recorded at the Xid, not at the close
    # the line is logged after the row is committed: wait for it rather than read it at once
    wait_for(lambda: "recommended at once" in live.output(), 10, what="the at-once line in the output")
    assert list(live.markers.iterdir()) == []  # dry-run: nothing ran
    assert live.alive()
