"""engine.live.launch: the one way benchmarks and the live tests start ``recover run``."""

from __future__ import annotations

import sys

import pytest

from engine.live.launch import READY, run_argv, start, stop


def test_run_argv_names_every_option_it_is_given():
    argv = run_argv(
        "r.db", rules=["a.yaml", "b/"], defaults=False, follow=["logs/*.out"], spool="sp", poll=1.5, extra=["-v"]
    )
    assert argv[:4] == [sys.executable, "-m", "engine.cli", "run"]
    assert argv[4:] == [
        "--dry-run",
        "--no-defaults",
        "-r",
        "a.yaml",
        "-r",
        "b/",
        "--db",
        "r.db",
        "--follow",
        "logs/*.out",
        "--spool",
        "sp",
        "--poll",
        "1.5",
        "-v",
    ]
    assert "--dry-run" not in run_argv("r.db", dry_run=False)


def test_start_returns_once_the_service_says_it_reads(tmp_path):
    log = tmp_path / "controller.log"
    log.write_text(f"an earlier run: {READY}act\n")  # what the log held before does not count
    code = f"import sys, time; time.sleep(0.3); print({READY!r} + 'recommend', file=sys.stderr); time.sleep(60)"
    proc = start([sys.executable, "-c", code], log, timeout=20)
    try:
        assert proc.poll() is None and log.read_text().count(READY) == 2
    finally:
        stop(proc)
    assert proc.returncode is not None


def test_a_service_that_exits_first_is_reported_with_what_it_said(tmp_path):
    code = "import sys; print('rulebook: E101 unknown key', file=sys.stderr); sys.exit(2)"
    with pytest.raises(RuntimeError, match="E101 unknown key"):
        start([sys.executable, "-c", code], tmp_path / "controller.log", timeout=20)
