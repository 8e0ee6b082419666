"""One exception tree (engine/errors.py) and one error boundary in the CLI: every error Recover
raises on purpose is a RecoverError, and reaches a person as one line, never a traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest

import engine.errors as errors


def test_every_error_is_a_recover_error():
    import scheduler_adapters.base as base

    names = [n for n in errors.__all__ if n != "RecoverError"]
    assert len(names) >= 12
    for name in names:
        assert issubclass(getattr(errors, name), errors.RecoverError), name
    assert issubclass(base.CommandFailed, errors.SchedulerError)


@pytest.mark.parametrize(
    "args",
    [
        ["silence", "add", "--node", "n1", "--for", "1h", "--reason", "x", "--db", "{bad}"],
        ["silence", "list", "--db", "{bad}"],
    ],
)
def test_store_errors_are_one_line_not_a_traceback(tmp_path, args):
    bad = tmp_path / "not-a-db.db"
    bad.write_text("garbage, not SQLite\n" * 100)
    proc = subprocess.run(
        [sys.executable, "-m", "engine.cli", *[a.format(bad=bad) for a in args]],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "StoreError" in proc.stderr and str(bad) in proc.stderr
