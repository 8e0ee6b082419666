"""What a first `recover run` (monitor mode, no scheduler) says: routine lines at INFO, shown by
default, WARNING kept for what needs an operator; and explain says its incidents were recorded
live, also when a replay writes to the same database afterwards (issue 18)."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys

from .conftest import ROOT, append, evts, wait_for


def _levels(output: str, text: str) -> list[str]:
    return [m.group(1) for m in re.finditer(r" (DEBUG|INFO|WARNING|ERROR|CRITICAL) \S+: " + re.escape(text), output)]


def test_a_monitor_run_says_what_it_does_at_info(live):
    live.start()
    append(live.logs / "slurm-401.out", evts(4010, 4013) + "2026-11-29T17:00:05 BOOM collective\n")
    wait_for(lambda: "recommend incident=" in live.output(), 10, what="a recommendation")
    live.stop()
    out = live.output()
    assert _levels(out, "recover run: mode=") == ["INFO"], out
    assert _levels(out, "recommend incident=") == ["INFO"], out
    assert _levels(out, "recover run: stopping") == ["INFO"], out
    assert " WARNING " not in out, out  # nothing in a routine run needs an operator


def test_explain_says_a_live_incident_was_recorded_live(live, tmp_path):
    live.start()
    append(live.logs / "slurm-401.out", evts(4010, 4013) + "2026-11-29T17:00:05 BOOM collective\n")
    wait_for(lambda: "recommend incident=" in live.output(), 10, what="a recommendation")
    live.stop()
    r = live.recover("explain", "1", "--db", str(live.db))
    assert r.returncode == 0, r.stderr
    assert "the controller ran without a scheduler" in r.stdout and "replay" not in r.stdout, r.stdout
    # a replay into the same database later does not turn the live incident into a replayed one
    log = tmp_path / "slurm-402.out"
    log.write_text("2026-11-29T18:00:05 BOOM again\n")
    rules = ["--no-defaults", "--rules", str(live.rules)]
    r = live.recover("replay", *rules, "--db", str(live.db), str(log))
    assert r.returncode == 0, r.stderr
    live_one = json.loads(live.recover("explain", "1", "--db", str(live.db), "--json").stdout)
    replayed = json.loads(live.recover("explain", "2", "--db", str(live.db), "--json").stdout)
    assert (live_one["recorded_by"], live_one["context_source"]) == ("live", "logs")
    assert (replayed["recorded_by"], replayed["context_source"]) == ("replay", "logs")
    assert "a replay asks no scheduler" in live.recover("explain", "2", "--db", str(live.db)).stdout
    assert "the controller ran without a scheduler" in live.recover("explain", "1", "--db", str(live.db)).stdout


def test_the_agent_says_it_runs_and_reloads_at_info(tmp_path):
    kern = tmp_path / "kern.log"
    kern.write_text("")
    site = tmp_path / "site.yaml"
    site.write_text("policy:\n  settle: 3m\n")
    (tmp_path / "spool").mkdir(mode=0o750)  # as deploying.md has it made (one made by the agent is warned about)
    log = tmp_path / "agent.log"
    with open(log, "w") as out_fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "engine.cli", "agent", "--node", "n1", "--kernel-log", str(kern), "--no-nvml"]
            + ["--spool", str(tmp_path / "spool"), "--rules", str(site)],
            cwd=str(ROOT),
            stdout=out_fh,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            wait_for(lambda: "agent n1: running" in log.read_text(), 30, what="the agent's start")
            proc.send_signal(signal.SIGHUP)  # a rollout: the rulebook is loaded again
            wait_for(lambda: "new rulebook taken" in log.read_text(), 30, what="the reload")
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=20)
    out = log.read_text()
    assert _levels(out, "agent n1: running") == ["INFO"], out
    assert _levels(out, "agent n1: new rulebook taken") == ["INFO"], out
    assert " WARNING " not in out, out
