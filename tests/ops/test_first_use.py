"""Papercuts a first-time user meets (issue 18): what `recover` prints must be true and readable
the first time someone tries it, and log text shown to people must not steer their terminal."""

from __future__ import annotations

import glob
import gzip
import json
import re
import sqlite3
from pathlib import Path

from typer.testing import CliRunner

from engine.cli import app
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
