"""Where line times come from, seen from outside the reader: the year of a yearless stamp comes
from the input (a December kern.log replayed in January stays in December), the log zone is the
rulebook's (``policy.log_timezone``, checked when it loads), and nothing in the deterministic
core reads the wall clock or the host's zone."""

from __future__ import annotations

import ast
import calendar
import os
from pathlib import Path

from engine.core.replay import replay
from engine.rulebook import load_rulebook, require_rulebook
from engine.store import Store

ROOT = Path(__file__).resolve().parents[2]


def utc(*fields: int) -> float:
    return float(calendar.timegm((*fields, 0, 0, 0)))


def test_the_rulebook_carries_the_zone_and_rejects_an_unknown_one(tmp_path):
    site = tmp_path / "site.yaml"
    site.write_text("policy:\n  log_timezone: Mars/Olympus\n")
    result = load_rulebook([site])
    assert not result.ok
    assert any("log_timezone" in str(e) and "Mars/Olympus" in str(e) for e in result.errors)
    site.write_text("policy:\n  log_timezone: America/New_York\n")
    assert load_rulebook([site]).compiled.policy["log_timezone"] == "America/New_York"


def test_replay_dates_a_december_kernel_log_replayed_in_january_in_december(tmp_path):
    """A kern.log written from 31 Dec into 1 Jan and replayed later: its Xids are four seconds
    apart, in the year the file was written, not in the year the replay runs (today's year put
    both in the future, and the January one eleven months before the December one)."""
    kern = tmp_path / "kern.log"
    kern.write_text(
        "Dec 31 23:59:58 n3 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python, GPU has fallen off the bus.\n"
        "Jan  1 00:00:02 n7 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python, GPU has fallen off the bus.\n"
    )
    written = utc(2027, 1, 1, 0, 0, 3)
    os.utime(kern, (written, written))
    seen = []
    replay([str(kern)], require_rulebook(), Store(str(tmp_path / "r.db")), on_fact=seen.append)
    xids = sorted(f.at for f in seen if f.kind == "xid")
    assert xids == [utc(2026, 12, 31, 23, 59, 58), utc(2027, 1, 1, 0, 0, 2)]


def test_the_deterministic_core_reads_no_wall_clock():
    """engine/core answers the same in replay, rule tests and live: no module there reads the
    wall clock or the host's zone (the check can fail: it finds them in a sample)."""
    banned_attrs = {
        ("time", "time"),
        ("time", "time_ns"),
        ("time", "gmtime"),
        ("time", "localtime"),
        ("time", "mktime"),
        ("time", "ctime"),
        ("time", "strftime"),
        ("time", "tzset"),
        ("datetime", "now"),
        ("datetime", "utcnow"),
        ("datetime", "today"),
        ("date", "today"),
    }

    def offences(source: str, name: str) -> list[str]:
        found = []
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                if (node.value.id, node.attr) in banned_attrs:
                    found.append(f"{name}:{node.lineno}: {node.value.id}.{node.attr}")
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute):
                if (node.value.attr, node.attr) in banned_attrs:
                    found.append(f"{name}:{node.lineno}: {node.value.attr}.{node.attr}")
            elif isinstance(node, ast.ImportFrom) and node.module == "time":
                found += [
                    f"{name}:{node.lineno}: from time import {a.name}" for a in node.names if a.name != "struct_time"
                ]
        return found

    sample = "import time\nfrom time import gmtime\nx = time.gmtime().tm_year\ny = datetime.datetime.now()\n"
    assert len(offences(sample, "sample")) == 3
    found = []
    for path in sorted((ROOT / "engine" / "core").rglob("*.py")):
        found += offences(path.read_text(), str(path.relative_to(ROOT)))
    assert found == []
