"""Every command that reads the store gives the same answer from PostgreSQL as from SQLite
(issue 22 item 1): the examples replayed into one store of each, then ``incidents``, ``explain``,
``status``, ``goodput`` and ``report`` read from both and compared, wall-clock stamps aside."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from engine.cli import app

runner = CliRunner()
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
#: stamped with the wall time of the run that wrote or read them: differ between any two runs
_WALL = {"detected_wall", "closed_wall", "created_at", "updated_at", "generated_at", "now", "db", "seen_at"}


def _stable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _stable(v) for k, v in value.items() if k not in _WALL}
    if isinstance(value, list):
        return [_stable(v) for v in value]
    return value


def _run(args: list[str]) -> Any:
    out = runner.invoke(app, args)
    assert out.exit_code == 0, (args, out.output)
    return json.loads(out.stdout)


def test_the_read_commands_agree_on_sqlite_and_postgresql(tmp_path, pg_dsn):
    logs = sorted(str(p) for p in EXAMPLES.glob("*") if p.suffix in (".out", ".log"))
    stores = {"sqlite": str(tmp_path / "r.db"), "postgresql": pg_dsn}
    for db in stores.values():
        out = runner.invoke(app, ["replay", "--db", db, *logs])
        assert out.exit_code == 0, out.output
    answers: dict[str, dict[str, Any]] = {}
    for name, db in stores.items():
        got: dict[str, Any] = {}
        inc = runner.invoke(app, ["incidents", "--db", db, "--json"])
        assert inc.exit_code == 0, inc.output
        got["incidents"] = [json.loads(line) for line in inc.stdout.splitlines() if line.strip()]
        for row in got["incidents"]:
            got[f"explain {row['id']}"] = _run(["explain", str(row["id"]), "--db", db, "--json"])
        got["status"] = _run(["status", "--db", db, "--json"])
        got["goodput"] = _run(["goodput", "--db", db, "--json"])
        got["report"] = _run(["report", "--db", db, "--json"])
        answers[name] = _stable(got)
    sqlite, pg = answers["sqlite"], answers["postgresql"]
    assert len(sqlite["incidents"]) >= 7  # the examples' incidents (examples/README.md)
    assert any(a["actions"] for k, a in sqlite.items() if k.startswith("explain"))
    for key in sqlite:
        assert pg[key] == sqlite[key], key
