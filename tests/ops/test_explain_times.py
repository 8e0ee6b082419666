"""`recover explain` says when each piece of evidence happened: its time in UTC, in the chain and
in the list of evidence, and (live) the line's own time beside the time it was read."""

from __future__ import annotations

from engine.core.replay import replay
from engine.ops.explain import build, render_text
from engine.rulebook import require_rulebook
from engine.store import Store


def test_explain_prints_each_facts_time(tmp_path):
    kern = tmp_path / "kern.log"
    kern.write_text(
        "Nov 29 17:00:05 n3 kernel: NVRM: GPU at PCI:0000:3b:00: GPU-8a47641b\n"
        "[183211.221360] NVRM: Xid (PCI:0000:3b:00): 79, pid=48213, name=pt_main_thread, GPU has fallen off the bus.\n"
        "2026-11-29T18:00:07.402+01:00 n3 kernel: NVRM: Xid (PCI:0000:3b:00): 154, GPU recovery action changed "
        "from 0x0 (None) to 0x2 (Node Reboot Required)\n"
    )
    store = Store(str(tmp_path / "r.db"))
    result = replay([str(kern)], require_rulebook(), store)
    reports = [build(store, i.id) for i in result.incidents]
    text = "\n".join(render_text(r) for r in reports)
    evidence = "".join(
        t.split("All evidence, by time:")[1].split("Rules fired:")[0] for t in text.split("Incident ")[1:]
    )
    # the Xid 79 line has no time of its own: the syslog line before it dates it (in 2026: the
    # file was written this year); the Xid 154 stamp names its zone
    assert f"  2026-11-29T17:00:05.000Z  {kern}:2: xid" in evidence
    assert f"  2026-11-29T17:00:07.402Z  {kern}:3: xid" in evidence
    assert f"@ {kern}:2  at 2026-11-29T17:00:05.000Z" in text
    times = {f["time"] for r in reports for f in r["facts"] if f["kind"] == "xid"}
    assert times == {"2026-11-29T17:00:05.000Z", "2026-11-29T17:00:07.402Z"}


def test_a_live_fact_shows_the_lines_own_time_beside_when_it_was_read():
    from engine.ops.explain import _times, utc_time

    fact = {"at": 1795971610.5, "attrs": {"logged_at": 1795971601.25}}
    assert _times(fact) == "2026-11-29T17:00:10.500Z, logged 2026-11-29T17:00:01.250Z"
    assert _times({"at": 1795971601.0, "attrs": {"logged_at": 1795971601.0}}) == "2026-11-29T17:00:01.000Z"
    assert utc_time(None) == "-" and utc_time(float("nan")) == "-" and utc_time(1e300) == "-"
