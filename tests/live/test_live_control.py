"""recover run: rulebook reload (SIGHUP, changed file, invalid edits), metrics, dry-run
recommendations, reading the store from another process while it runs, the agents' spool."""

from __future__ import annotations

import json
import os
import re
import signal
import time

from engine.store import TERMINAL

from .conftest import RULES, append, assert_exactly_once, evts, wait_for

NEW_RULES = """
  - {id: new, pattern: 'NEW (?P<n>\\d+)', types: {n: int}}
"""


def _same_size_same_mtime(path, text: str) -> None:
    """Rewrite in place with the same size and mtime: only SIGHUP can tell it changed."""
    st = os.stat(path)
    data = text.encode()
    assert len(data) <= st.st_size
    data += b"#" * (st.st_size - len(data))
    with open(path, "r+b") as fh:
        fh.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_sighup_reloads_a_valid_rulebook(live):
    base = RULES.replace("MARKER", str(live.markers))
    live.rules.write_text(base + "#" * 600 + "\n")  # room to rewrite it at the same size
    live.start(metrics=True)
    log = live.logs / "slurm-201.out"
    append(log, "NEW 1\n" + evts(0, 1))
    live.wait_evts({0})  # read after the NEW line before it
    assert not [a for a, _, _ in live.log_facts() if a.get("matcher") == "new"]  # no such matcher yet
    new_text = base.replace("matchers:\n", "matchers:\n" + NEW_RULES.lstrip("\n"), 1).replace(
        "rules:\n",
        "rules:\n  - {id: s.new, description: new, when: [{as: e, kind: log, where: {matcher: new}}], "
        "then: {symptom: {name: new}}}\n",
        1,
    )
    _same_size_same_mtime(live.rules, new_text)
    # a file followed after the rewrite, then counted in the gauges: those are refreshed in the
    # same turn as the rescan that checks the rulebook, just after it (each second, in step)
    append(live.logs / "slurm-209.out", "a line that matches nothing\n")
    wait_for(lambda: live.metric("recover_sources", kind="file") == 2, 30, what="the gauges refreshed")
    out = live.output()  # the file looks unchanged: only a signal reloads it
    assert "rulebook files changed" not in out and "rulebook reloaded" not in out, out[-3000:]
    live.signal(signal.SIGHUP)
    live.wait_reloaded()  # a new rule: the controller restarts in place to load it (same process)
    append(log, "NEW 2\n" + evts(1, 2))
    wait_for(
        lambda: [a for a, _, _ in live.log_facts() if a.get("matcher") == "new"], 30, what="a fact of the new matcher"
    )
    live.wait_evts({0, 1})
    assert live.metric("recover_rulebook_reloads_total", result="ok") == 1  # by the restarted process
    assert "rulebook changed: restarting in place to load it" in live.output()
    news = [a["n"] for a, _, _ in live.log_facts() if a.get("matcher") == "new"]
    assert news == [2]  # the line read before the reload is not read again
    assert_exactly_once(live.evt_numbers(), {0, 1})


def _replace(path, text: str) -> None:
    """Write ``path`` whole, as an editor's save-by-rename does: a reload never reads it half-written
    (an in-place write is first truncated, and a reload that sees the empty file is a rejection of
    its own, which would throw the counts below off by one)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def test_invalid_rulebook_is_rejected_and_the_old_one_kept(live):
    live.start(metrics=True)
    log = live.logs / "slurm-202.out"
    append(log, evts(0, 3))
    live.wait_evts({0, 1, 2})
    good = live.rules.read_text()
    # edited into an invalid state while running: a changed file triggers the reload by itself
    bad = good.replace("pattern: 'EVT (?P<n>\\d+)'", "pattern: '(EVT) \\1'").replace(
        "description: a boom line\n", "description: a boom line\n    bogus_key: 1\n"
    )
    assert bad != good
    _replace(live.rules, bad)
    # the log says why, with the position of each error in the file: one line per error, after
    # the line that counts them (waited for themselves: a read between the lines, on a loaded
    # machine, once saw only the count)
    where = re.compile(rf"rulebook reload rejected: {re.escape(str(live.rules))}:\d+:\d+: [^\n]*bogus_key")
    wait_for(lambda: where.search(live.output()), 30, what="the rejection, with its file:line:col")
    # (counted after its lines are logged)
    wait_for(lambda: live.metric("recover_rulebook_reloads_total", result="rejected") == 1, 10, what="the count")
    append(log, evts(3, 6))  # the old rulebook still works
    live.wait_evts(set(range(6)))
    live.signal(signal.SIGHUP)  # asked again: rejected again, still running
    wait_for(
        lambda: live.metric("recover_rulebook_reloads_total", result="rejected") == 2, 30, what="a second rejection"
    )
    append(log, evts(6, 8))
    live.wait_evts(set(range(8)))
    # garbage YAML, then an empty file
    _replace(live.rules, "matchers: [ {id: x, pattern: 'unclosed\n  - ]]\n\t\x00")
    wait_for(
        lambda: live.metric("recover_rulebook_reloads_total", result="rejected") == 3, 30, what="a third rejection"
    )
    live.rules.unlink()
    wait_for(
        lambda: live.metric("recover_rulebook_reloads_total", result="rejected") == 4,
        30,
        what="a missing file rejected",
    )
    append(log, evts(8, 10))
    live.wait_evts(set(range(10)))
    # fixed: reloaded
    live.rules.write_text(good)
    wait_for(
        lambda: live.metric("recover_rulebook_reloads_total", result="ok") == 1, 30, what="the good rulebook reloaded"
    )
    append(log, evts(10, 12))
    live.wait_evts(set(range(12)))
    marks = live.drain(log)
    assert_exactly_once(live.evt_numbers(), set(range(12)) | marks)
    assert live.alive()


def test_metrics_endpoint(live):
    live.start(metrics=True)
    log = live.logs / "slurm-203.out"
    append(log, evts(0, 10) + "BOOM x\n")
    wait_for(
        lambda: live.metric("recover_incidents_total", fault_class="nccl_timeout", decision="restart") == 1,
        10,
        what="the incident to close",
    )
    text = live.metrics_text()
    for name in (
        "recover_incidents_total",
        "recover_detection_latency_seconds_bucket",
        "recover_detection_latency_seconds_count",
        "recover_lines_total",
        "recover_facts_total",
        "recover_lines_per_second",
        "recover_facts_per_second",
        "recover_sources_healthy",
        "recover_sources_unhealthy",
        "recover_rulebook_reloads_total",
        "recover_store_errors_total",
        "recover_source_errors_total",
        "recover_spool_garbage_lines",
    ):
        assert name in text, name
    assert live.metric("recover_lines_total") == 11
    assert live.metric("recover_facts_total") == 11
    assert live.metric("recover_detection_latency_seconds_count") == 1
    assert live.metric("recover_sources_healthy", kind="file") == 1
    assert live.metric("recover_sources_unhealthy", kind="file") == 0
    append(log, evts(10, 2010))
    wait_for(lambda: live.metric("recover_lines_per_second") > 0, 30, what="a line rate")


def test_dry_run_recommends_one_log_line_each_and_explain_works_while_running(live):
    live.start()
    for job in (301, 302):
        append(live.logs / f"slurm-{job}.out", evts(job * 10, job * 10 + 3) + "2026-11-29T17:00:05 BOOM collective\n")
    wait_for(lambda: len(re.findall(r"recommend incident=", live.output())) >= 2, 30, what="two recommendations")
    # nothing more comes: the BOOM lines (the last ones) were read, every incident is closed and
    # every action where it stays
    wait_for(
        lambda: (
            all(s == "closed" for (s,) in live.query("SELECT status FROM incidents"))
            and all(s in TERMINAL for (s,) in live.query("SELECT status FROM actions"))
        ),
        30,
        what="the incidents closed and their actions terminal",
    )
    lines = [ln for ln in live.output().splitlines() if "recommend incident=" in ln]
    assert len(lines) == 2, lines
    for ln in lines:
        m = re.search(
            r"recommend incident=(\d+) job=(\d+) fault=nccl_timeout decision=restart action=requeue cmd=(\[.*\])$", ln
        )
        assert m, ln
        argv = json.loads(m.group(3))
        assert argv == ["touch", f"{live.markers}/requeue-{m.group(2)}"]
    assert list(live.markers.iterdir()) == []  # dry-run: nothing ran
    rows = live.query("SELECT incident, action, mode, status FROM actions ORDER BY incident")
    assert [(r[1], r[2], r[3]) for r in rows] == [("requeue", "recommend", "recommended")] * 2
    # another process reads the store while the controller runs
    assert live.alive()
    r = live.recover("incidents", "--db", str(live.db), "--json")
    assert r.returncode == 0, r.stderr
    incidents = [json.loads(x) for x in r.stdout.splitlines()]
    assert sorted(i["job"] for i in incidents) == ["301", "302"]
    assert all(i["status"] == "closed" and i["decision"] == "restart" and i["mode"] == "recommend" for i in incidents)
    inc = incidents[0]
    r = live.recover("explain", str(inc["id"]), "--db", str(live.db), "--json")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["incident"]["id"] == inc["id"]
    text = json.dumps(report)
    assert f"slurm-{inc['job']}.out:4" in text  # the BOOM line, by file and line
    assert "f.boom" in text
    r = live.recover("explain", str(inc["id"]), "--db", str(live.db))
    assert r.returncode == 0 and "f.boom" in r.stdout
    # it keeps going: an incident opened while we read is visible at once, still open
    append(live.logs / "slurm-303.out", "BOOM again\n")
    wait_for(lambda: any(j == "303" for (j,) in live.query("SELECT job FROM incidents")), 30, what="the third incident")
    assert live.alive()


def test_spool_garbage_is_skipped_counted_and_facts_still_taken(live):
    from engine.facts import Fact

    spool = live.tmp / "spool"
    spool.mkdir()
    live.start("--spool", str(spool), metrics=True, follow=None)
    good = Fact.make("xid", {"code": 79, "node": "gpu-n1", "job": "401", "attempt": 0}, time.time(), "kmsg:gpu-n1")
    # (a spool file speaks for the node it is named after: both facts are gpu-n1's)
    other = Fact.make("xid", {"code": 79, "node": "gpu-n1", "job": "402", "attempt": 0}, time.time(), "kmsg:gpu-n1")
    with open(spool / "gpu-n1.jsonl", "wb") as fh:
        fh.write(b"this is not json\n")
        fh.write(b"\x00\xff\xfe binary\n")
        fh.write(b'{"kind": "xid", "attrs": {"code": 79}, "at": 1\n')  # truncated JSON
        fh.write(b'{"kind": "nonsense", "attrs": {}, "at": 1, "origin": "x"}\n')
        fh.write(b"[1, 2, 3]\n")
        fh.write(good.to_json().encode() + b"\n")
        fh.write(other.to_json().encode()[:30])  # a partial last line: waits
    wait_for(lambda: live.query("SELECT job FROM incidents WHERE job = '401'"), 10, what="the spool's fact")
    wait_for(lambda: live.metric("recover_spool_garbage_lines") >= 5, 30, what="garbage counted")
    assert "not facts" in live.output()
    assert not live.query("SELECT job FROM incidents WHERE job = '402'")
    with open(spool / "gpu-n1.jsonl", "ab") as fh:
        fh.write(other.to_json().encode()[30:] + b"\n")
    wait_for(lambda: live.query("SELECT job FROM incidents WHERE job = '402'"), 10, what="the completed line's fact")
    facts = live.query("SELECT origin, count FROM facts WHERE kind = 'xid'")
    assert sorted(facts) == [("kmsg:gpu-n1", 1), ("kmsg:gpu-n1", 1)]
    assert live.alive()
