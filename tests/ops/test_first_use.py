"""Papercuts a first-time user meets (issue 18): what `recover` prints must be true and readable
the first time someone tries it, and log text shown to people must not steer their terminal."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from engine.cli import app
from engine.facts import clean_text

runner = CliRunner()


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
