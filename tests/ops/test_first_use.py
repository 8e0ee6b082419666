"""Papercuts a first-time user meets (issue 18): what `recover` prints must be true and readable
the first time someone tries it, and log text shown to people must not steer their terminal."""

from __future__ import annotations

import glob
import gzip
import json
import re
import sqlite3
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from engine.cli import app
from engine.core.context import job_from_filename
from engine.facts import clean_text

runner = CliRunner()
REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"


def test_c1_controls_are_removed_from_text_shown_to_people(tmp_path, tiny_rules):
    # U+009B is a one-character CSI (what ESC [ is in C0): a log line carrying it could clear or
    # rewrite the operator's terminal when `recover explain` shows the line
    assert clean_text("a\u009b2Jb\u0085c\u0080\u009f d") == "a2Jbc d"
    assert clean_text("naïve € ü") == "naïve € ü"  # printable text above U+009F is kept
    log = tmp_path / "slurm-77.out"
    log.write_text("2020-03-01 10:00:00,000 [rank3] Watchdog caught collective operation timeout \u009b2J\u009b31m\n")
    db = str(tmp_path / "r.db")
    r = runner.invoke(app, ["replay", "--no-defaults", "--rules", str(tiny_rules), "--db", db, str(log)])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["explain", "1", "--db", db, "--json"])
    assert r.exit_code == 0, r.output
    texts = [f["attrs"].get("text", "") for f in json.loads(r.stdout)["facts"]]
    assert any("Watchdog caught" in t for t in texts)
    assert not any(0x7F <= ord(c) <= 0x9F for t in texts for c in t)


# -- `recover replay examples/*` ----------------------------------------------------------------
def _expected_from_readme() -> set[tuple[str, str, str]]:
    """(job, fault class, decision) of each row of examples/README.md's table that expects one."""
    rows = set()
    for line in (EXAMPLES / "README.md").read_text().splitlines():
        m = re.match(r"\| `slurm-(\d+)\.out`.*\| `(\w+)`[^|]*-> `(\w+)`[^|]*\|$", line)
        if m:
            rows.add(m.groups())
    return rows


def test_replay_of_the_examples_folder_gives_the_incidents_its_readme_documents(tmp_path):
    expected = _expected_from_readme()
    assert len(expected) == 7  # eight jobs, one of them healthy
    logs = sorted(glob.glob(str(EXAMPLES / "*")))  # what the shell's `examples/*` gives
    assert str(EXAMPLES / "README.md") in logs
    db = str(tmp_path / "r.db")
    r = runner.invoke(app, ["replay", "--db", db, "--json", *logs])
    assert r.exit_code == 0, r.output
    got = {(i["job"], i["fault_class"], i["decision"]) for i in map(json.loads, r.stdout.splitlines())}
    assert got == expected  # the README's quotes of failures made 3 more incidents, one a `stop`
    assert f"skipped {EXAMPLES / 'README.md'}: a document (.md), not a log" in r.stderr
    # asked for, a document is replayed like any file
    r = runner.invoke(app, ["replay", "--db", str(tmp_path / "all.db"), "--json", "--all-files", *logs])
    assert r.exit_code == 0 and len(r.stdout.splitlines()) > len(expected) and "skipped" not in r.stderr


def test_replay_skips_binary_files_and_says_so(tmp_path):
    log = tmp_path / "slurm-5.out"
    log.write_text("2020-03-01 10:00:00,000 torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB\n")
    gz = tmp_path / "slurm-6.out.gz"
    gz.write_bytes(gzip.compress(log.read_bytes()))
    db = tmp_path / "recover.db"
    sqlite3.connect(db).execute("CREATE TABLE t (x)").connection.commit()
    r = runner.invoke(app, ["replay", "--db", str(tmp_path / "r.db"), str(log), str(gz), str(db)])
    assert r.exit_code == 0, r.output
    assert f"skipped {gz}: gzip-compressed, not a text log" in r.stderr
    assert f"skipped {db}: an SQLite database, not a text log" in r.stderr
    assert "1 incident(s) from 1 file(s)" in r.stdout
    r = runner.invoke(app, ["replay", "--db", str(tmp_path / "r.db"), str(gz)])
    assert r.exit_code == 2 and "no logs to replay" in r.stderr and "Traceback" not in r.output


# -- which job a log's file name names ------------------------------------------------------------
@pytest.mark.parametrize(
    "name, job",
    [
        ("slurm-4242.out", "4242"),
        ("slurm-4242_7.out", "4242_7"),
        ("resnet50-4242.out", "4242"),  # %x-%j.out, the most common custom -o
        ("exp-v2-4242.err", "4242"),
        ("train.4242.out", "4242"),  # %x.%j.out
        ("123-4242.out", "4242"),  # a job named 123: the job id is the last number
        ("exp-4242_7.log", "4242_7"),  # %x-%A_%a.log
        ("4242_7.out", "4242_7"),
        ("4242.out", "4242"),
        ("job4242-rank0.out", "4242"),
        ("train_4242.rank3.log", "4242"),
        ("run-2024-01.out", None),  # a date: no job id starts with 0
        ("epoch3.out", None),  # a number not set apart is no job id
        ("run-1234567890123.out", None),  # too long for a job id
        ("notes.out", None),
        ("slurm-4242.txt", None),
    ],
)
def test_job_from_a_log_file_name(name, job):
    assert job_from_filename(name) == job


def test_replay_ties_a_jobname_jobid_log_to_its_job(tmp_path):
    log = tmp_path / "llama-70b-4567.out"  # sbatch -o '%x-%j.out' for a job named llama-70b
    log.write_text("2020-03-01 10:00:00,000 torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB\n")
    r = runner.invoke(app, ["replay", "--db", str(tmp_path / "r.db"), "--json", str(log)])
    assert r.exit_code == 0, r.output
    (inc,) = map(json.loads, r.stdout.splitlines())
    assert (inc["job"], inc["fault_class"], inc["decision"]) == ("4567", "cuda_oom", "stop")
    assert ["scancel", "4567"] in inc["commands"]


def test_the_accepted_log_names_are_documented():
    text = (REPO / "docs" / "commands.md").read_text()
    assert "### Which job a log file belongs to" in text
    for shape in ("`%x-%j.out`", "`slurm-%A_%a.out`", "`%x-%A_%a.out`", "`123-4242.out`"):
        assert shape in text, shape


# -- no Python None in what people read ---------------------------------------------------------
def test_explain_says_in_words_what_an_incident_does_not_know(tmp_path):
    from engine.ops.explain import build, render_text
    from engine.store import Store

    store = Store(tmp_path / "r.db")
    no_scope = store.open_incident("text:1", None, None, None, 1.0e9)  # a line that named no job nor node
    no_attempt = store.open_incident("job:9", "9", None, None, 1.0e9)
    head = render_text(build(store, no_scope)).splitlines()[:3]
    assert head == [
        f"Incident {no_scope} — no job or node known — open",
        "  fault:    none yet (the incident is open)  nodes: -",
        "  decision: none yet (the incident is open)  (mode: -)",
    ]
    text = render_text(build(store, no_attempt))
    assert text.startswith(f"Incident {no_attempt} — job 9 attempt unknown — open")
    assert "None" not in text


# -- `recover` on PATH after scripts/demo.sh ------------------------------------------------------
def _demo_footer(tmp_path, monkeypatch, path: str) -> str:
    """`recover demo`'s output with the simulated run itself left out (its own test covers it)."""
    from types import SimpleNamespace

    import engine.ops.demo
    from engine.store import Store

    from engine.ops.goodput import report_from_store

    def no_run(db, **kw):
        store = Store(db)
        goodput = report_from_store(store, now=0.0, gpus_per_node=1, gpus_from="the demo")
        store.close()
        return SimpleNamespace(incidents=[], injected=[], seconds=0.0, goodput=goodput)

    monkeypatch.setattr(engine.ops.demo, "run_demo", no_run)
    monkeypatch.setenv("PATH", path)
    r = runner.invoke(app, ["demo", "--db", str(tmp_path / "demo.db")])
    assert r.exit_code == 0, r.output
    return r.stdout


def test_the_demo_says_how_to_get_recover_on_path(tmp_path, monkeypatch):
    # scripts/demo.sh runs .venv/bin/recover; the `recover explain N` the demo suggests next was
    # 'command not found' in the user's shell, with no word on why
    venv_bin = Path(sys.executable).parent
    out = _demo_footer(tmp_path, monkeypatch, "/usr/bin:/bin")
    assert f"(recover is not on your PATH: `source {venv_bin / 'activate'}` puts it there" in out
    assert f"or run {venv_bin / 'recover'})" in out
    out = _demo_footer(tmp_path, monkeypatch, f"{venv_bin}:/usr/bin:/bin")
    assert "not on your PATH" not in out  # on PATH already: nothing to say
    # and it ends with its goodput summary: the cluster's ETTR, its lost GPU-hours by cause
    tail = out.rstrip().splitlines()
    assert tail[-7].startswith("Goodput: cluster ETTR") and tail[-1].split()[:2] == ["queue", "after"]


def test_demo_sh_runs_the_demo_through_the_path_hint():
    script = (REPO / "scripts" / "demo.sh").read_text()
    assert ".venv/bin/recover demo" in script  # the hint above is what its user reads
    assert "source .venv/bin/activate" in (REPO / "README.md").read_text()


# -- packaging ----------------------------------------------------------------------------------
def test_pyproject_license_is_an_spdx_string_for_the_setuptools_it_asks_for():
    # `license = { text = ... }` made setuptools >= 77 print a deprecation warning on every
    # install; the SPDX string form needs setuptools >= 77, which the build must then ask for
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    doc = tomllib.loads((REPO / "pyproject.toml").read_text())
    license = doc["project"]["license"]
    assert isinstance(license, str) and re.fullmatch(r"[A-Za-z0-9.+-]+(?: (?:AND|OR|WITH) [A-Za-z0-9.+-]+)*", license)
    (req,) = [r for r in doc["build-system"]["requires"] if r.startswith("setuptools")]
    m = re.fullmatch(r"setuptools>=(\d+)(?:\.\d+)*", req.replace(" ", ""))
    assert m and int(m.group(1)) >= 77, req


def test_the_incident_table_shows_a_database_path_as_written(tmp_path, monkeypatch):
    # the table's title names the database; a folder named `[/x]` crashed it with a MarkupError
    monkeypatch.chdir(tmp_path)
    (tmp_path / "w[" / "x]").mkdir(parents=True)
    db = "w[/x]/r.db"
    log = tmp_path / "slurm-5.out"
    log.write_text("2020-03-01 10:00:00,000 torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB\n")
    r = runner.invoke(app, ["replay", "--db", db, str(log)], env={"COLUMNS": "300"})
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["incidents", "--db", db], env={"COLUMNS": "300"})
    assert r.exit_code == 0, r.output
    assert f"1 incident(s) in {db}" in r.stdout and "cuda_oom" in r.stdout
