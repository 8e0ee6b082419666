"""`recover replay` of several job logs that together are one shared outage (issue 21 item 6):
one shared incident beside the jobs' own, their requeues held (`--json`: `held`), `explain`
naming the members and the common path, `recover outage end` releasing what it holds."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from engine.cli import app

runner = CliRunner()


def _logs(tmp_path: Path, n: int) -> list[str]:
    out = []
    for i in range(n):
        log = tmp_path / f"slurm-{3100 + i}.out"
        log.write_text(
            f"2026-11-29T17:00:{i:02d} [rank0]: iteration 120/1000 | loss 2.113\n"
            f"2026-11-29T17:00:{i + 1:02d} [rank0]: OSError: [Errno 5] Input/output error: "
            f"'/lustre/scratch/ds/shard-{i:04d}.bin'\n"
        )
        out.append(str(log))
    return out


def _lines(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def test_five_logs_replay_as_one_shared_outage_explained_and_ended(tmp_path: Path) -> None:
    db = str(tmp_path / "r.db")
    res = runner.invoke(app, ["replay", "--db", db, "--json", *_logs(tmp_path, 5)])
    assert res.exit_code == 0, res.output
    incidents = _lines(res.stdout)
    jobs = [i for i in incidents if i["job"] is not None]
    [shared] = [i for i in incidents if i["job"] is None]
    assert len(jobs) == 5 and all(i["decision"] == "restart" for i in jobs)
    assert all(i["held"] == [["scontrol", "requeue", i["job"]]] for i in jobs)
    assert shared["fault_class"] == "storage_io_error" and shared["decision"] == "observe"
    assert len(shared["commands"]) == 1 and shared["commands"][0][0] == "logger"  # the one page

    res = runner.invoke(app, ["explain", "--db", db, str(shared["id"])])
    assert res.exit_code == 0, res.output
    assert "shared outage: 5 jobs" in res.stdout and "path /lustre/scratch/ds" in res.stdout
    assert f"incident {jobs[0]['id']} (job {jobs[0]['job']} attempt 0)" in res.stdout

    res = runner.invoke(app, ["explain", "--db", db, "--json", str(jobs[0]["id"])])
    assert res.exit_code == 0, res.output
    member = json.loads(res.stdout)
    [requeue] = [a for a in member["actions"] if a["action"] == "requeue"]
    assert requeue["status"] == "held" and requeue["held_by"] == shared["id"]
    assert any(g["guard"] == "shared_outage" for g in member["incident"]["guards"])

    res = runner.invoke(app, ["outage", "list", "--db", db, "--json"])
    assert res.exit_code == 0, res.output
    [listed] = _lines(res.stdout)
    assert listed["id"] == shared["id"] and len(listed["held"]) == 5

    res = runner.invoke(app, ["outage", "end", "--db", db, str(shared["id"]), "--reason", "lustre back"])
    assert res.exit_code == 0, res.output
    assert "5 held action(s) released" in res.stdout
    res = runner.invoke(app, ["explain", "--db", db, "--json", str(jobs[0]["id"])])
    [requeue] = [a for a in json.loads(res.stdout)["actions"] if a["action"] == "requeue"]
    assert requeue["status"] == "recommended"


def test_four_logs_are_four_failures_and_outage_end_refuses_a_job_incident(tmp_path: Path) -> None:
    db = str(tmp_path / "r.db")
    res = runner.invoke(app, ["replay", "--db", db, "--json", *_logs(tmp_path, 4)])
    assert res.exit_code == 0, res.output
    incidents = _lines(res.stdout)
    assert len(incidents) == 4 and all(i["held"] == [] and i["job"] is not None for i in incidents)
    res = runner.invoke(app, ["outage", "end", "--db", db, str(incidents[0]["id"])])
    assert res.exit_code == 2 and "no shared outage" in res.output
