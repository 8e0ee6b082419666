"""The agent takes a new rulebook as the controller does (SIGHUP, or its files changing; an invalid
one is reported and the running one kept), with no line lost or read twice across the swap; and a
first start reads the kernel log from where it ended at launch, so an Xid logged while the agent
starts (loading the rulebook, starting NVML) is reported, once."""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from typer.testing import CliRunner

from engine.live.agent import EXIT_OK, default_state_dir, run_agent
from engine.sources.fake_nvml import FakeGpu, FakeNvml
from tests.helpers import wait_for

NODE = "gpu-n7"
REPO = Path(__file__).resolve().parents[2]
ONLY_A = "matchers:\n  - {id: aaa, pattern: 'AAA (?P<n>\\d+)', types: {n: int}}\n"
A_AND_B = ONLY_A + "  - {id: bbb, pattern: 'BBB (?P<n>\\d+)', types: {n: int}}\n"
BROKEN = "matchers:\n  - {id: aaa, pattern: 'AAA (?P<n>\\d+', types: {n: int}}\n"  # the group is not closed


def xid_line(pid: int) -> str:
    return f"Nov 29 17:00:01 {NODE} kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid={pid}, name=python3, GPU has fallen off the bus.\n"


def spool_facts(spool: Path) -> list[dict]:
    """Every fact line in the node's raw spool files, duplicates included."""
    out = []
    for p in sorted(spool.glob(f"{NODE}.jsonl*")):
        for line in p.read_bytes().split(b"\n"):
            try:
                out.append(json.loads(line))
            except ValueError:  # empty, or a line being written right now
                pass
    return out


def numbers(spool: Path, matcher: str) -> list[int]:
    return sorted(f["attrs"]["n"] for f in spool_facts(spool) if f["attrs"].get("matcher") == matcher)


def xid_pids(spool: Path) -> list[int]:
    return sorted(f["attrs"]["pid"] for f in spool_facts(spool) if f["kind"] == "xid")


def state_file(spool: Path) -> Path:
    return Path(default_state_dir(str(spool), NODE)) / "state.json"


class SlowNvml(FakeNvml):
    """NVML whose start takes a while, and during which the kernel logs an Xid."""

    def __init__(self, log: Path, pid: int) -> None:
        super().__init__([FakeGpu(uuid="GPU-00000001-0000-0000-0000-000000000000", bus_id="00000000:3B:00.0")])
        self.log, self.pid = log, pid

    def nvmlInit(self) -> None:
        with open(self.log, "a") as fh:
            fh.write(xid_line(self.pid))
        time.sleep(0.3)
        super().nvmlInit()


def _in_thread(**kwargs):
    stop = threading.Event()
    result: dict = {}
    t = threading.Thread(target=lambda: result.update(rc=run_agent(stop_event=stop, **kwargs)))
    t.start()
    return stop, t, result


def test_an_xid_logged_while_the_agent_starts_is_reported_once(tmp_path):
    spool, log = tmp_path / "spool", tmp_path / "kern.log"
    log.write_text(xid_line(0))  # before the launch: history, not news
    stop, t, result = _in_thread(
        node=NODE,
        spool_dir=str(spool),
        kernel_log=str(log),
        nvml=True,
        nvml_backend=SlowNvml(log, 1),  # Xid pid=1 is logged while NVML starts
        nvml_events=False,
        tick=0.02,
    )
    try:
        assert wait_for(state_file(spool).exists, timeout=20), "the agent did not start"
        with open(log, "a") as fh:
            fh.write(xid_line(2))  # once it runs
        assert wait_for(lambda: 2 in xid_pids(spool), timeout=10)
        time.sleep(0.3)
    finally:
        stop.set()
        t.join(timeout=10)
    assert result["rc"] == EXIT_OK
    assert xid_pids(spool) == [1, 2]
    # a restart resumes from its saved position, not from the launch: what came meanwhile is read
    with open(log, "a") as fh:
        fh.write(xid_line(3))
    stop, t, result = _in_thread(node=NODE, spool_dir=str(spool), kernel_log=str(log), nvml=False, tick=0.02)
    try:
        assert wait_for(lambda: 3 in xid_pids(spool), timeout=10)
        time.sleep(0.3)
    finally:
        stop.set()
        t.join(timeout=10)
    assert xid_pids(spool) == [1, 2, 3]


def test_the_cli_takes_the_launch_position_before_it_loads_the_rulebook(tmp_path, monkeypatch):
    """`recover agent` loads the rulebook (seconds on a cold cache) before the agent runs: an Xid
    logged meanwhile is read."""
    import importlib

    import engine.live.agent as agent_mod
    from engine.cli import app

    cli = importlib.import_module("engine.cli.main")  # the module (engine.cli.main is also a function's name)

    spool, log = tmp_path / "spool", tmp_path / "kern.log"
    log.write_text(xid_line(0))
    real_load, real_run = cli._load_or_exit, agent_mod.run_agent

    def slow_load(*a, **kw):
        with open(log, "a") as fh:
            fh.write(xid_line(1))  # while the rulebook loads
        return real_load(*a, **kw)

    def run_until_read(*a, **kw):
        stop = threading.Event()
        threading.Thread(
            target=lambda: (wait_for(lambda: xid_pids(spool), timeout=5), time.sleep(0.3), stop.set()), daemon=True
        ).start()
        return real_run(*a, **{**kw, "stop_event": stop})

    monkeypatch.setattr(cli, "_load_or_exit", slow_load)
    monkeypatch.setattr(agent_mod, "run_agent", run_until_read)
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        args = ["agent", "--node", NODE, "--spool", str(spool), "--kernel-log", str(log), "--no-nvml"]
        r = CliRunner().invoke(app, args + ["--expected-gpus", "0"])
    finally:
        for s, h in saved.items():
            signal.signal(s, h)
    assert r.exit_code == 0, r.output
    assert xid_pids(spool) == [1]


def test_a_changed_rulebook_is_taken_with_no_line_lost_or_doubled_and_a_bad_one_kept_out(tmp_path, caplog):
    spool, log, rules = tmp_path / "spool", tmp_path / "kern.log", tmp_path / "site.yaml"
    log.write_text("")
    rules.write_text(ONLY_A)
    from engine.rulebook import require_rulebook

    reload_event = threading.Event()
    with caplog.at_level(logging.INFO):
        stop, t, result = _in_thread(
            node=NODE,
            spool_dir=str(spool),
            kernel_log=str(log),
            nvml=False,
            tick=0.01,
            rulebook=require_rulebook([str(rules)], defaults=False),
            rules=[str(rules)],
            defaults=False,
            reload_check_s=0.05,
            reload_event=reload_event,
        )

        def said(text: str) -> int:
            return sum(text in r.getMessage() for r in caplog.records)

        written = 0

        def write(until: int, pause: float = 0.002) -> None:
            nonlocal written
            while written < until:
                with open(log, "a") as fh:
                    fh.write(f"AAA {written}\nBBB {written}\n")
                written += 1
                time.sleep(pause)

        try:
            assert wait_for(state_file(spool).exists, timeout=10)
            write(100)
            assert wait_for(lambda: numbers(spool, "aaa") == list(range(100)), timeout=10)  # read, by the old one
            rules.write_text(A_AND_B)  # noticed by itself
            while not said("rulebook reloaded"):  # lines keep coming during the swap
                write(written + 1)
                assert written < 5000, "the changed rulebook was not taken"
            taken_by = written
            write(taken_by + 100)
            rules.write_text(BROKEN)
            while not said("rulebook reload rejected"):
                write(written + 1)
                assert written < 10000, "the broken rulebook was not reported"
            reload_event.set()  # as SIGHUP: asked for again, still broken
            wait_for(lambda: not reload_event.is_set(), timeout=5)
            write(written + 100)
            assert wait_for(lambda: numbers(spool, "aaa") == list(range(written)), timeout=10)
            time.sleep(0.2)
        finally:
            stop.set()
            t.join(timeout=10)
    assert result["rc"] == EXIT_OK
    # every AAA line once: nothing lost or read twice across the swap or the rejected reloads
    assert numbers(spool, "aaa") == list(range(written))
    # BBB from some line on (the swap falls between two reads), to the end: the broken rulebook
    # never replaced the one that matches it
    bbb = numbers(spool, "bbb")
    assert bbb and 100 <= bbb[0] <= taken_by and bbb == list(range(bbb[0], written)), (bbb[:3], taken_by)
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert any("rulebook reload rejected, keeping the current rulebook" in m for m in errors), errors
    assert said("rulebook reloaded") == 1  # the broken one, twice rejected, was never taken


def test_sighup_reloads_the_agent_and_a_broken_rulebook_keeps_it_running(tmp_path):
    spool, log, rules = tmp_path / "spool", tmp_path / "kern.log", tmp_path / "site.yaml"
    log.write_text("")
    rules.write_text(ONLY_A)
    err = tmp_path / "agent.err"
    cmd = [sys.executable, "-m", "engine.cli", "agent", "--node", NODE, "--spool", str(spool)]
    cmd += ["--kernel-log", str(log), "--no-nvml", "--expected-gpus", "0", "--interval", "0.02", "--verbose"]
    cmd += ["--no-defaults", "--rules", str(rules)]
    with open(err, "wb") as errfh:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=errfh, cwd=str(REPO))
    try:
        assert wait_for(state_file(spool).exists, timeout=30), err.read_text()[-2000:]
        with open(log, "a") as fh:
            fh.write("BBB 1\nAAA 1\n")
        assert wait_for(lambda: numbers(spool, "aaa") == [1], timeout=10)
        rules.write_text(A_AND_B)
        proc.send_signal(signal.SIGHUP)
        assert wait_for(lambda: "rulebook reloaded" in err.read_text(), timeout=20), err.read_text()[-2000:]
        with open(log, "a") as fh:
            fh.write("BBB 2\n")
        assert wait_for(lambda: numbers(spool, "bbb") == [2], timeout=10)
        rules.write_text(BROKEN)
        proc.send_signal(signal.SIGHUP)
        assert wait_for(lambda: "rulebook reload rejected" in err.read_text(), timeout=20)
        with open(log, "a") as fh:
            fh.write("BBB 3\n")
        assert wait_for(lambda: numbers(spool, "bbb") == [2, 3], timeout=10)  # the last good one still reads
        assert proc.poll() is None
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=20)
    assert rc == EXIT_OK, err.read_text()[-2000:]
    assert numbers(spool, "aaa") == [1]


def test_kmsg_first_start_reads_from_the_last_record_at_launch(tmp_path):
    """/dev/kmsg (a file of its records here): the last sequence number at launch is where a
    first start begins; a record logged while the agent starts is read, the ones before are not."""
    from engine.live.agent import launch_positions

    def record(seq: int, code: int) -> str:
        return f"3,{seq},{seq * 1000},-;NVRM: Xid (PCI:0000:3b:00): {code}, pid=1, name=python3, x\n"

    dev = tmp_path / "kmsg"
    dev.write_text(record(1, 79) + record(2, 48))
    launch = launch_positions(kmsg=True, kmsg_path=str(dev))  # as `recover agent` does, first thing
    assert launch["kmsg"]["seq"] == 2
    with open(dev, "a") as fh:
        fh.write(record(3, 13))  # while it starts
    spool = tmp_path / "spool"
    stop, t, result = _in_thread(
        node=NODE, spool_dir=str(spool), kmsg=True, kmsg_path=str(dev), nvml=False, tick=0.02, launch=launch
    )
    try:
        assert wait_for(lambda: spool_facts(spool), timeout=10)
        time.sleep(0.3)
    finally:
        stop.set()
        t.join(timeout=10)
    assert result["rc"] == EXIT_OK
    assert [f["attrs"]["code"] for f in spool_facts(spool) if f["kind"] == "xid"] == [13]


def test_a_reload_gives_the_nvml_poller_the_new_thresholds(tmp_path):
    from engine.live.agent import Agent
    from engine.rulebook import require_rulebook

    rules = tmp_path / "site.yaml"
    rules.write_text("policy:\n  thresholds:\n    temperature_c: 90\n")
    gpu = FakeGpu(uuid="GPU-00000001-0000-0000-0000-000000000000", bus_id="00000000:3B:00.0")
    agent = Agent(
        NODE,
        str(tmp_path / "spool"),
        nvml=True,
        nvml_backend=FakeNvml([gpu]),
        nvml_events=False,
        rulebook=require_rulebook([str(rules)]),
        rules=[str(rules)],
    )
    try:
        assert agent.start() and agent.poller is not None
        assert agent.poller.devices[0].thresholds["temperature_c"] == 90
        rules.write_text("policy:\n  thresholds:\n    temperature_c: [hot]\n")  # not a number: rejected
        assert agent.reload() is False and agent.poller.devices[0].thresholds["temperature_c"] == 90
        rules.write_text("policy:\n  thresholds:\n    temperature_c: 70\n")
        assert agent.reload() is True and agent.poller.devices[0].thresholds["temperature_c"] == 70
    finally:
        agent.close()
