"""Helpers for the live tests: run the real ``recover run`` in a subprocess, with a small rulebook
of our own, and read its store from here (another process) while it runs."""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

import engine.clock
from engine.live.launch import READY, run_argv
from tests.helpers import wait_for

ROOT = Path(__file__).resolve().parents[2]

#: EVT lines: one log fact each (distinct n), an error symptom each (distinct too: the engine
#: keeps one fact with a count for a conclusion drawn again), so each fact joins an incident.
#: BOOM lines: a fault with a plan (a `touch` that dry-run must never run).
RULES = """
matchers:
  - {id: evt, pattern: 'EVT (?P<n>\\d+)', types: {n: int}}
  - {id: boom, pattern: 'BOOM (?P<what>\\w+)'}
rules:
  - id: s.evt
    description: an event line
    when: [{as: e, kind: log, where: {matcher: evt}}]
    then: {symptom: {name: evt, n: "{{ e.n }}"}}
  - id: s.boom
    description: a boom line
    when: [{as: b, kind: log, where: {matcher: boom}}]
    then: {symptom: {name: boom}}
  - id: f.boom
    description: a boom is a failure that a requeue fixes
    when: [{as: s, kind: symptom, where: {name: boom}}]
    then: {fault: {fault_class: nccl_timeout, reason: "boom"}}
  - id: s.xid
    description: a fatal xid from an agent
    when: [{as: x, kind: xid, where: {code: 79}}]
    then: {symptom: {name: gpu_fatal}}
  - id: f.xid
    description: a fatal xid is a GPU off the bus
    when: [{as: s, kind: symptom, where: {name: gpu_fatal}}]
    then: {fault: {fault_class: gpu_fell_off_bus, nodes: ["{{ s.node }}"]}}
actions:
  requeue:
    scheduler: slurm
    per: job
    argv: [touch, "MARKER/requeue-{{ job }}"]
policy:
  settle: 1s
  plans: {restart: [requeue], isolate_and_restart: [requeue]}
  # every EVT line is a probe of its own (read once, never twice): none is counted on another
  distinct_lines: 1000000
"""


def write_rules(path: Path, marker_dir: Path, extra: str = "") -> Path:
    path.write_text(RULES.replace("MARKER", str(marker_dir)) + extra)
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Live:
    """One ``recover run`` process over a tmp folder: logs/, the db, a log of its stderr."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.logs = tmp / "logs"
        self.logs.mkdir(exist_ok=True)
        self.db = tmp / "recover.db"
        self.markers = tmp / "markers"
        self.markers.mkdir(exist_ok=True)
        self.rules = write_rules(tmp / "rules.yaml", self.markers)
        self.proc: subprocess.Popen | None = None
        self.runs = 0
        self.log_path = tmp / "controller.log"
        self.metrics_port: int | None = None
        self._marks: set[int] = set()

    # -- the process ------------------------------------------------------------------------
    def start(self, *extra: str, follow: str | None = "logs/*.out", metrics: bool = False, wait: bool = True) -> "Live":
        if metrics:
            self.metrics_port = free_port()
        args = run_argv(
            self.db,
            rules=[self.rules],
            defaults=False,
            follow=[self.tmp / follow] if follow else (),
            metrics_port=self.metrics_port if metrics else None,
            extra=extra,
        )
        self.runs += 1
        self._log = open(self.log_path, "a")
        self._log.write(f"===== run {self.runs}: {' '.join(args)}\n")
        self._log.flush()
        self._mark = self.log_path.stat().st_size
        # stderr through a pipe copied here: the controller's own writes may be made to fail
        self.proc = subprocess.Popen(
            args,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            cwd=str(ROOT),
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self._copier = threading.Thread(target=self._copy, args=(self.proc.stderr, self._log), daemon=True)
        self._copier.start()
        if wait:
            wait_for(lambda: READY in self.output() or self.proc.poll() is not None, 20, what="startup")
            assert self.proc.poll() is None, self.output()
        return self

    @staticmethod
    def _copy(src, dst) -> None:
        for line in iter(src.readline, b""):
            dst.write(line.decode("utf-8", "replace"))
            dst.flush()
        src.close()

    def _closelog(self) -> None:
        self._copier.join(5)
        self._log.close()

    def output(self) -> str:
        """What this run wrote to stderr so far."""
        with open(self.log_path, "rb") as fh:
            fh.seek(self._mark)
            return fh.read().decode("utf-8", "replace")

    def all_output(self) -> str:
        return self.log_path.read_text("utf-8", "replace")

    def wait_reloaded(self, times: int = 1, timeout: float = 30.0) -> None:
        """Until the controller said ``rulebook reloaded`` ``times`` times; fails at once, with its
        output, if it exits instead (durable_rules' crash with two rulesets, see DESIGN.md). A
        changed rulebook is compiled cold (no cache entry): seconds on a loaded machine."""

        def probe() -> bool:
            if self.proc.poll() is not None:  # pytest.fail, not assert: wait_for goes on after an assert
                pytest.fail(f"the controller exited {self.proc.returncode}:\n{self.output()[-3000:]}", pytrace=False)
            return self.output().count("rulebook reloaded") >= times

        wait_for(probe, timeout, what="the reload")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def stop(self, timeout: float = 5.0) -> float:
        """SIGTERM; returns how long it took to exit."""
        t0 = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout)
        took = time.monotonic() - t0
        self._closelog()
        return took

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(5)
        self._closelog()

    def close(self) -> None:
        if self.alive():
            self.proc.kill()
            self.proc.wait(5)
        if self.proc is not None:
            self._closelog()

    # -- the store, read from here ------------------------------------------------------------
    def query(self, sql: str, args=()) -> list[tuple]:
        if not self.db.exists():
            return []
        con = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=5)
        try:
            return con.execute(sql, args).fetchall()
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                return []
            raise
        finally:
            con.close()

    def log_facts(self) -> list[tuple[dict, str, int]]:
        """(attrs, origin, count) of every stored log fact."""
        return [
            (json.loads(a), o, c) for a, o, c in self.query("SELECT attrs, origin, count FROM facts WHERE kind = 'log'")
        ]

    def evt_numbers(self) -> Counter:
        return Counter(a["n"] for a, _, _ in self.log_facts() if a.get("matcher") == "evt")

    def wait_evts(self, expected: set[int], timeout: float = 15.0) -> Counter:
        def done():
            got = self.evt_numbers()
            return (got,) if set(got) >= expected else None  # a tuple: truthy even when empty

        found = wait_for(done, timeout, fail=False)
        if found:
            return found[0]
        got = self.evt_numbers()  # which are missing, and what the controller said meanwhile
        raise AssertionError(
            f"waited {timeout:g} s; missing EVT facts: {sorted(expected - set(got))[:20]}... "
            f"({len(set(got) & expected)}/{len(expected)})\n{self.output()[-3000:]}"
        )

    def drain(self, *paths: Path) -> set[int]:
        """A positive sign to count on, instead of a sleep: one more EVT line appended to each of
        ``paths``, waited for. A file is read in order, so once its new last line is stored every
        earlier one has been handled, a re-read of that file included. Returns every number it
        has used so far, which the test adds to those it expects (exactly once, like the others)."""
        for path in paths:
            n = 900_000 + len(self._marks)
            append(path, evts(n, n + 1))
            self._marks.add(n)
        self.wait_evts(self._marks)
        return set(self._marks)

    def metrics_text(self) -> str:
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as r:
            return r.read().decode()

    def metric(self, name: str, **labels) -> float:
        """The value of one sample (0 when absent)."""
        want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        for line in self.metrics_text().splitlines():
            if line.startswith("#"):
                continue
            key, _, value = line.rpartition(" ")
            if key == (f"{name}{{{want}}}" if want else name):
                return float(value)
        return 0.0

    def recover(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "engine.cli", *args], capture_output=True, text=True, cwd=str(ROOT), timeout=30
        )


def append(path: Path, text: str | bytes) -> None:
    data = text.encode() if isinstance(text, str) else text
    with open(path, "ab") as fh:
        fh.write(data)


def evts(a: int, b: int, prefix: str = "") -> str:
    """Lines EVT a .. EVT b-1."""
    return "".join(f"{prefix}2026-11-29T17:00:00 rank0: EVT {i} something happened\n" for i in range(a, b))


def assert_exactly_once(counter: Counter, expected: set[int]) -> None:
    doubled = {n: c for n, c in counter.items() if c != 1}
    assert not doubled, f"facts stored more than once: {dict(list(doubled.items())[:20])}"
    assert set(counter) == expected, (
        f"missing {sorted(expected - set(counter))[:20]}, unexpected {sorted(set(counter) - expected)[:20]}"
    )


class FakeClock(engine.clock.FakeClock):
    """engine.clock's FakeClock with its wall and monotonic time starting together at ``t``, and
    callable for that time: the live parts take it instead of the machine's clock, so a unit test
    needs no sleeping, and says ``clock()`` for "now" in either sense."""

    def __init__(self, t: float = 1000.0):
        super().__init__(start=t, mono=t)

    def __call__(self) -> float:
        return self.monotonic()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def live(tmp_path: Path):
    lv = Live(tmp_path)
    yield lv
    lv.close()
