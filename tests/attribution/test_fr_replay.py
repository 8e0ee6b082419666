"""`recover replay [--json] LOG... DUMP...` (issue 21 item 7): flight-recorder dumps, or a folder
of them, beside job logs, told apart by content; their rank signals join the job's incident, and
alone open an nccl_timeout. `recover fr-analyze` lists them without a database."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

from typer.testing import CliRunner

from engine.cli import app
from tests.attribution.fr_dumps import FakeJob

runner = CliRunner()

WATCHDOG = (
    "[rank0]:[E1202 00:10:00.491021130 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective "
    "operation timeout: WorkNCCL(SeqNum=42, OpType=ALLREDUCE, NumelIn=12, NumelOut=12, Timeout(ms)=600000) "
    "ran for 600011 milliseconds before timing out.\n"
)


def _dumps(folder: Path) -> Path:
    job = FakeJob(8)  # its clock starts 2025-12-02 00:00 UTC, ten minutes before the watchdog line
    for _ in range(41):
        job.collective()
    job.collective(state="scheduled", skip={7})
    job.write(folder, form={3: "json"})
    return folder


def _log(tmp_path: Path, name: str = "slurm-4242.out") -> Path:
    log = tmp_path / name
    log.write_text(WATCHDOG)
    t = 1764634260  # 2025-12-02 00:11 UTC: the yearless stamp is read in that year
    os.utime(log, (t, t))
    return log


def _incidents(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def test_dumps_beside_the_log_join_its_incident(tmp_path: Path) -> None:
    fr = _dumps(tmp_path / "fr")
    res = runner.invoke(app, ["replay", "--db", str(tmp_path / "r.db"), "--json", str(_log(tmp_path)), str(fr)])
    assert res.exit_code == 0, res.output
    [inc] = _incidents(res.stdout)
    assert inc["job"] == "4242" and inc["fault_class"] == "nccl_timeout"
    assert {"symptom.rank_signal", "symptom.nccl_timeout"} <= set(inc["rules"])


def test_dumps_alone_open_an_nccl_timeout(tmp_path: Path) -> None:
    fr = _dumps(tmp_path / "fr")
    res = runner.invoke(app, ["replay", "--db", str(tmp_path / "r.db"), "--json", "--job", "77", str(fr)])
    assert res.exit_code == 0, res.output
    [inc] = _incidents(res.stdout)
    assert (inc["job"], inc["fault_class"], inc["rules"][0]) == ("77", "nccl_timeout", "symptom.rank_signal")
    # the files one by one, in any order, are the same
    files = sorted(str(p) for p in fr.iterdir())[::-1]
    res = runner.invoke(app, ["replay", "--db", str(tmp_path / "r2.db"), "--json", "--job", "77", *files])
    assert [i["fault_class"] for i in _incidents(res.stdout)] == ["nccl_timeout"]


def test_dumps_without_a_job_are_shown_not_used(tmp_path: Path) -> None:
    fr = _dumps(tmp_path / "fr")
    res = runner.invoke(app, ["replay", "--db", str(tmp_path / "r.db"), "--json", str(fr)])
    assert res.exit_code == 0 and _incidents(res.stdout) == []
    assert "name no job: give --job" in res.stderr and "rank 7 fr_not_joined" in res.stderr


def test_told_apart_by_content_not_by_name(tmp_path: Path) -> None:
    """A dump named like a log is a dump (its bytes are never scanned as log lines); a log named
    like a dump is a log."""
    fr = _dumps(tmp_path / "fr")
    disguised = tmp_path / "train.log.7"
    (fr / "nccl_trace_rank_7").rename(disguised)
    log = _log(tmp_path, "slurm-4242.out")
    looks_like_dump = tmp_path / "nccl_trace_rank_2"
    looks_like_dump.write_text("[rank2]: plain text, a log\n")
    args = ["replay", "--db", str(tmp_path / "r.db"), "--json", str(log), str(looks_like_dump), str(fr), str(disguised)]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    [inc] = _incidents(res.stdout)
    assert "symptom.rank_signal" in inc["rules"]
    assert "refused" not in res.stderr  # train.log.7 was read as rank 7's dump: nothing refused


def test_a_hostile_dump_is_named_and_the_rest_replayed(tmp_path: Path) -> None:
    fr = _dumps(tmp_path / "fr")
    job = FakeJob(8)
    dump = job.dump(7)
    dump["version"] = "2.5"
    raw = pickle.dumps(dump, protocol=2).replace(b"}q\x00", b"}q\x00cos\nsystem\n0", 1)
    (fr / "nccl_trace_rank_7").write_bytes(raw)
    with open(fr / "nccl_trace_rank_12", "wb") as fh:
        fh.truncate(1 << 30)
    # not a dump by its first bytes: a folder holds more than dumps; given alone, refused
    res = runner.invoke(app, ["replay", "--db", str(tmp_path / "r.db"), "--json", str(_log(tmp_path)), str(fr)])
    assert res.exit_code == 0, res.output
    assert "refused dump" in res.stderr and "nccl_trace_rank_7: pickle names a class (os.system)" in res.stderr
    assert [i["fault_class"] for i in _incidents(res.stdout)] == ["nccl_timeout"]
    res = runner.invoke(app, ["fr-analyze", str(fr / "nccl_trace_rank_12")])
    assert res.exit_code == 2 and "more than the bound of 67108864" in res.stderr


def test_the_size_bound_is_a_setting(tmp_path: Path, monkeypatch) -> None:
    fr = _dumps(tmp_path / "fr")
    monkeypatch.setenv("RECOVER_FR_DUMP_MAX_BYTES", "200")
    monkeypatch.setattr("engine.cli.common._SETTINGS", None)
    res = runner.invoke(app, ["fr-analyze", str(fr)])
    assert res.exit_code == 2 and res.stderr.count("more than the bound of 200") == 8


def test_fr_analyze_lists_the_signals(tmp_path: Path) -> None:
    fr = _dumps(tmp_path / "fr")
    res = runner.invoke(app, ["fr-analyze", "--json", str(fr)])
    assert res.exit_code == 0, res.output
    rows = [json.loads(line) for line in res.stdout.splitlines()]
    assert [(r["rank"], r["signal"], r["group"], r["seq"]) for r in rows] == [(7, "fr_not_joined", "0", 42)]
    res = runner.invoke(app, ["fr-analyze", str(fr)])
    assert "rank 7 fr_not_joined: pg 0 (default_pg) seq 42 all_reduce" in res.stdout
    assert "8 dump(s) read, 1 rank(s) named" in res.stdout


def test_the_dumps_name_the_suspect_in_explain(tmp_path: Path) -> None:
    """With a21's attribution (core.suspects), the dump's signal is the incident's suspect: rank 7,
    with its evidence (no node: replay has no allocation to map ranks onto)."""
    fr = _dumps(tmp_path / "fr")
    db = str(tmp_path / "r.db")
    res = runner.invoke(app, ["replay", "--db", db, "--json", str(_log(tmp_path)), str(fr)])
    [inc] = _incidents(res.stdout)
    res = runner.invoke(app, ["explain", "--db", db, str(inc["id"]), "--json"])
    assert res.exit_code == 0, res.output
    suspects = json.loads(res.stdout)["incident"]["suspects"]
    assert [(s["rank"], [g["signal"] for g in s["signals"]]) for s in suspects] == [(7, ["fr_not_joined"])]
    assert suspects[0]["signals"][0]["origin"].endswith("nccl_trace_rank_7")
