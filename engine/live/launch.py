"""Start ``recover run`` as a child process and know when it reads its input: the benchmarks and
the live tests run the real service this way, with one command line and one readiness check.

    argv = run_argv(db, rules=[rules], defaults=False, follow=["logs/*.out"], poll=1.0)
    proc = start(argv, log=tmp / "controller.log", cwd=ROOT)   # returns once it logged READY
    ...
    stop(proc)
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Callable, Sequence

from engine.clock import SYSTEM, Clock

__all__ = ["READY", "run_argv", "start", "stop", "wait_ready"]

#: the line the controller logs once it reads its input (see Controller.run)
READY = "recover run: mode="


def run_argv(
    db: str | os.PathLike[str],
    *,
    rules: Sequence[str | os.PathLike[str]] = (),
    defaults: bool = True,
    follow: Sequence[str | os.PathLike[str]] = (),
    spool: str | os.PathLike[str] | None = None,
    scheduler: str | None = None,
    poll: float | None = None,
    metrics_port: int | None = None,
    dry_run: bool = True,
    extra: Sequence[str] = (),
) -> list[str]:
    """The command line of ``recover run`` with this Python (``extra``: any other options, last)."""
    argv = [sys.executable, "-m", "engine.cli", "run"]
    if dry_run:
        argv.append("--dry-run")
    if not defaults:
        argv.append("--no-defaults")
    for r in rules:
        argv += ["-r", str(r)]
    argv += ["--db", str(db)]
    for f in follow:
        argv += ["--follow", str(f)]
    if spool is not None:
        argv += ["--spool", str(spool)]
    if scheduler is not None:
        argv += ["--scheduler", scheduler]
    if poll:
        argv += ["--poll", str(poll)]
    if metrics_port:
        argv += ["--metrics-port", str(metrics_port)]
    return argv + list(extra)


def wait_ready(
    proc: subprocess.Popen,
    output: Callable[[], str],
    timeout: float = 30.0,
    every: float = 0.05,
    clock: Clock = SYSTEM,
) -> float:
    """Wait until the controller's ``output`` shows READY; the seconds it took. RuntimeError, with
    what it wrote, when it exits first or does not get there within ``timeout``."""
    t0 = clock.monotonic()
    while READY not in output():
        if proc.poll() is not None or clock.monotonic() - t0 > timeout:
            raise RuntimeError(f"the controller did not start:\n{output()[-3000:]}")
        clock.sleep(every)
    return clock.monotonic() - t0


def start(
    argv: Sequence[str],
    log: Path,
    *,
    cwd: str | os.PathLike[str] | None = None,
    timeout: float = 30.0,
    env: dict[str, str] | None = None,
) -> subprocess.Popen:
    """Run ``argv`` with its stdout and stderr appended to ``log``; return once it is READY (what
    ``log`` held before does not count)."""
    mark = log.stat().st_size if log.exists() else 0

    def output() -> str:
        with open(log, "rb") as fh:
            fh.seek(mark)
            return fh.read().decode("utf-8", "replace")

    with open(log, "ab") as out:
        proc = subprocess.Popen(
            list(argv),
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env={**(env if env is not None else os.environ), "PYTHONUNBUFFERED": "1"},
        )
    try:
        wait_ready(proc, output, timeout)
    except BaseException:
        stop(proc)
        raise
    return proc


def stop(proc: subprocess.Popen, timeout: float = 10.0) -> None:
    """SIGTERM, then SIGKILL if it has not exited within ``timeout``."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
