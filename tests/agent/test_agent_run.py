"""run_agent end to end: kill -9 mid-burst loses and doubles nothing; no NVML; no source at all."""

from __future__ import annotations

import json
import logging
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

from tests.helpers import wait_for
from engine.live.agent import EXIT_NO_SOURCE, EXIT_OK, default_state_dir, run_agent
from engine.sources.fake_nvml import FakeGpu, FakeNvml
from engine.sources.spool import SpoolReader

NODE = "gpu-n7"


def xid_line(i: int) -> str:
    return f"Nov 29 17:00:01 {NODE} kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid={i}, name=python3, GPU has fallen off the bus.\n"


def start_agent(spool: Path, log: Path, stderr) -> subprocess.Popen:
    cmd = [
        sys.executable,
        "-m",
        "engine.cli",
        "agent",
        "--node",
        NODE,
        "--spool",
        str(spool),
        "--kernel-log",
        str(log),
        "--no-nvml",
        "--interval",
        "0.02",
        "--verbose",
    ]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=stderr, cwd=str(Path(__file__).resolve().parents[2]))


def running_lines(errlog: Path) -> int:
    """How many agents sharing this stderr file have logged that they run (signals handled)."""
    return errlog.read_bytes().count(b": running (")


def state_file(spool: Path) -> Path:
    return Path(default_state_dir(str(spool), NODE)) / "state.json"


def spool_pids(spool: Path) -> list[int]:
    """Every xid pid in the raw spool files, duplicates included."""
    out = []
    for p in sorted(spool.glob(f"{NODE}.jsonl*")):
        for line in p.read_bytes().split(b"\n"):
            try:
                out.append(json.loads(line)["attrs"]["pid"])
            except ValueError:  # empty, or a line being written right now
                pass
    return out


def test_kill_minus_nine_mid_burst_neither_loses_nor_doubles(tmp_path):
    spool, log = tmp_path / "spool", tmp_path / "kern.log"
    log.write_text("")
    errlog = open(tmp_path / "agent.err", "wb")
    total = 3000
    rng = random.Random(7)
    proc = start_agent(spool, log, errlog)
    assert wait_for(state_file(spool).exists), "the agent did not start"

    appended = threading.Event()
    killed = threading.Condition()
    kills = kills_mid_burst = 0
    runs_before = 0
    # The appender may run at most this many lines ahead of the kills: on a loaded machine a
    # restart (which loads the rulebook) takes seconds, and an appender on its own clock would be
    # done before the second kill; this way at least five kills land while lines keep coming.
    per_kill = total // 6

    def appender():
        i = 0
        while i < total:
            with killed:
                killed.wait_for(lambda: i < (kills + 1) * per_kill, timeout=60)
            burst = rng.randint(1, 60)
            with open(log, "a") as fh:
                for _ in range(min(burst, total - i)):
                    fh.write(xid_line(i))
                    i += 1
            time.sleep(rng.random() * 0.12)  # in bursts, so that kills land between them too
        appended.set()

    t = threading.Thread(target=appender)
    t.start()
    try:
        while (not appended.is_set() or kills < 4) and kills < 40:
            # kill only once the restarted agent is busy writing, at a random moment
            before = len(spool_pids(spool))
            wait_for(lambda: len(spool_pids(spool)) > before or appended.is_set(), timeout=20, step=0.01, fail=False)
            time.sleep(rng.uniform(0.0, 0.05))
            mid = not appended.is_set()
            proc.kill()  # SIGKILL: no cleanup, possibly between spool write and state save
            proc.wait()
            with killed:
                kills += 1
                kills_mid_burst += mid
                killed.notify_all()
            runs_before = running_lines(tmp_path / "agent.err")  # its forerunners are all dead
            proc = start_agent(spool, log, errlog)
        t.join()
        reader = SpoolReader(str(spool))
        seen: list[int] = []

        def complete():
            seen.extend(f.get("pid") for f in reader.read())
            return len(set(seen)) >= total

        assert wait_for(complete, timeout=60), f"only {len(set(seen))} of {total} facts arrived"
        # the facts can all be in the spool before the last agent has even started (its forerunner
        # wrote them): a SIGTERM before its handler is set would kill it (rc -15), so wait for its
        # "running" line, logged once the handler is in place
        assert wait_for(lambda: running_lines(tmp_path / "agent.err") > runs_before, timeout=60), (
            "the last agent never ran"
        )
        # a late double would come from the running agent: once it has exited nothing more can
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=30)
        seen.extend(f.get("pid") for f in reader.read())
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        errlog.close()
    assert rc == EXIT_OK
    print("kills", kills, "mid-burst", kills_mid_burst)
    assert kills >= 4 and kills_mid_burst >= 2, (kills, kills_mid_burst)
    counts = Counter(seen)
    assert sorted(counts) == list(range(total))
    assert max(counts.values()) == 1, "the reader returned a fact twice"
    # the writer side already prevents doubles: the raw spool holds each fact once
    raw = Counter(spool_pids(spool))
    assert sorted(raw) == list(range(total)) and max(raw.values()) == 1


def test_crash_between_spool_write_and_state_save_is_harmless(tmp_path):
    """Deterministic version of the window: the state on disk is older than the spool."""
    spool, log = tmp_path / "spool", tmp_path / "kern.log"
    log.write_text("")
    with open(tmp_path / "agent.err", "wb") as err:
        proc = start_agent(spool, log, err)
        assert wait_for(state_file(spool).exists)
        with open(log, "a") as fh:
            fh.writelines(xid_line(i) for i in range(50))
        assert wait_for(lambda: len(spool_pids(spool)) == 50)
        old_state = state_file(spool).read_bytes()
        with open(log, "a") as fh:
            fh.writelines(xid_line(i) for i in range(50, 120))
        assert wait_for(lambda: len(spool_pids(spool)) == 120)
        proc.kill()
        proc.wait()
        # as if the kill had come after the spool write and before the state save
        state_file(spool).write_bytes(old_state)
        proc = start_agent(spool, log, err)
        with open(log, "a") as fh:
            fh.writelines(xid_line(i) for i in range(120, 130))
        assert wait_for(lambda: len(spool_pids(spool)) >= 130)
        # a doubling agent would write the re-read lines before the new ones: they are there
        # already, and nothing more comes once it has exited (read after the exit)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == EXIT_OK
    raw = spool_pids(spool)
    assert sorted(raw) == list(range(130)), "lines re-read after the crash were written again"
    assert sorted(f.get("pid") for f in SpoolReader(str(spool)).read()) == list(range(130))


def _run_in_thread(**kwargs):
    stop = threading.Event()
    result = {}

    def target():
        result["rc"] = run_agent(stop_event=stop, **kwargs)

    t = threading.Thread(target=target)
    t.start()
    return stop, t, result


def test_without_nvml_the_kernel_log_keeps_running_and_it_is_said_once(tmp_path, caplog):
    spool, log = tmp_path / "spool", tmp_path / "kern.log"
    log.write_text("")
    with caplog.at_level(logging.INFO):
        # the real pynvml on this machine; NVML is retried often and must not be reported again
        stop, t, result = _run_in_thread(
            node=NODE,
            spool_dir=str(spool),
            kernel_log=str(log),
            nvml=True,
            nvml_backend=None,
            poll_interval=0.05,
            tick=0.02,
            nvml_retry_s=0.05,
        )
        try:
            assert wait_for(state_file(spool).exists, timeout=10)
            for i in range(3):
                with open(log, "a") as fh:
                    fh.write(xid_line(i))
                time.sleep(0.15)
            assert wait_for(lambda: len(spool_pids(spool)) == 3, timeout=10)
        finally:
            stop.set()
            t.join(timeout=10)
    assert result["rc"] == EXIT_OK
    said = [r for r in caplog.records if "NVML unavailable" in r.getMessage()]
    assert len(said) == 1, [r.getMessage() for r in said]
    assert said[0].levelno == logging.WARNING
    assert "kernel-log source keeps running" in said[0].getMessage()


def test_no_source_at_all_returns_non_zero(tmp_path, caplog):
    spool = tmp_path / "spool"
    # NVML asked for but unavailable (real pynvml), and nothing else
    assert run_agent(NODE, str(spool), nvml=True, stop_event=threading.Event()) == EXIT_NO_SOURCE
    # nothing asked for
    assert run_agent(NODE, str(spool), nvml=False, stop_event=threading.Event()) == EXIT_NO_SOURCE
    # kmsg that cannot be opened and a fake NVML without a library
    rc = run_agent(
        NODE,
        str(spool),
        kmsg=True,
        kmsg_path=str(tmp_path / "no-kmsg"),
        nvml=True,
        nvml_backend=FakeNvml(library_missing=True),
        stop_event=threading.Event(),
    )
    assert rc == EXIT_NO_SOURCE
    assert any("no source can run" in r.getMessage() for r in caplog.records)


def test_no_source_from_the_command_line(tmp_path):
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "engine.cli",
            "agent",
            "--node",
            NODE,
            "--spool",
            str(tmp_path / "s"),
            "--expected-gpus",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == EXIT_NO_SOURCE
    assert r.stderr.count("NVML unavailable") == 1


def test_with_a_fake_gpu_counters_and_events_reach_the_spool(tmp_path):
    spool = tmp_path / "spool"
    nv = FakeNvml([FakeGpu(uuid="GPU-11111111-2222-3333-4444-555555555555", bus_id="00000000:3B:00.0")])
    stop, t, result = _run_in_thread(
        node=NODE,
        spool_dir=str(spool),
        nvml=True,
        nvml_backend=nv,
        poll_interval=0.05,
        tick=0.02,
    )
    reader = SpoolReader(str(spool))
    facts = []
    try:
        assert wait_for(state_file(spool).exists, timeout=10)
        assert wait_for(lambda: nv.calls["nvmlEventSetWait"] > 0, timeout=10)
        time.sleep(0.2)  # past the baseline poll
        nv.gpus[0].bump("ecc_uncorrected_volatile", 2)
        nv.inject_xid(0, 48)

        def got_both():
            facts.extend(reader.read())
            kinds = {(f.kind, f.get("counter") or f.get("code")) for f in facts}
            return {("gpu_counter", "ecc_uncorrected_volatile"), ("xid", 48)} <= kinds

        assert wait_for(got_both, timeout=10)
    finally:
        stop.set()
        t.join(timeout=10)
    assert result["rc"] == EXIT_OK
    xid = [f for f in facts if f.kind == "xid"][0]
    assert xid.origin == f"nvml-event:{NODE}:gpu0" and xid.get("pci") == "0000:3b:00"
    # the NVML samples are part of the saved state, so a restart does not re-report
    saved = json.loads(state_file(spool).read_text())
    assert "GPU-11111111-2222-3333-4444-555555555555" in saved["nvml"]


def test_sigterm_stops_the_agent_cleanly(tmp_path):
    spool, log = tmp_path / "spool", tmp_path / "kern.log"
    log.write_text("")
    proc = start_agent(spool, log, subprocess.DEVNULL)
    try:
        assert wait_for(state_file(spool).exists)
    finally:
        proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == EXIT_OK


def test_unusable_state_is_replaced(tmp_path):
    spool, log = tmp_path / "spool", tmp_path / "kern.log"
    log.write_text(xid_line(0))
    sd = Path(default_state_dir(str(spool), NODE))
    sd.mkdir(parents=True)
    (sd / "state.json").write_bytes(b"\x00{not json")
    stop, t, result = _run_in_thread(
        node=NODE, spool_dir=str(spool), kernel_log=str(log), nvml=False, tick=0.02, replay=True
    )
    try:
        assert wait_for(lambda: spool_pids(spool) == [0], timeout=10)
    finally:
        stop.set()
        t.join(timeout=10)
    assert result["rc"] == EXIT_OK
    assert json.loads((sd / "state.json").read_text())["node"] == NODE
    shutil.rmtree(sd)


def test_state_never_runs_ahead_of_the_spool(tmp_path, monkeypatch):
    """While the spool cannot be written the saved kernel-log offset stays put, and the facts
    read meanwhile are written once the spool works again."""
    from engine.sources import spool as spool_mod

    spool, log = tmp_path / "spool", tmp_path / "kern.log"
    log.write_text("")
    real_write = spool_mod.SpoolWriter.write
    broken = threading.Event()
    broken.set()
    refused: list[int] = []

    def write(self, facts):
        facts = list(facts)
        if broken.is_set() and facts:
            refused.append(len(facts))
            raise OSError(28, "No space left on device")
        return real_write(self, facts)

    monkeypatch.setattr(spool_mod.SpoolWriter, "write", write)
    stop, t, result = _run_in_thread(node=NODE, spool_dir=str(spool), kernel_log=str(log), nvml=False, tick=0.02)
    try:
        assert wait_for(state_file(spool).exists, timeout=10)
        with open(log, "a") as fh:
            fh.writelines(xid_line(i) for i in range(5))
        # it read them and tried to write them (twice: once more after the first refusal)
        wait_for(lambda: sum(refused) >= 10, 30, what="the refused writes")
        assert json.loads(state_file(spool).read_text())["kernel_log"]["offset"] == 0
        assert spool_pids(spool) == []
        broken.clear()
        assert wait_for(lambda: sorted(spool_pids(spool)) == list(range(5)), timeout=10)
        assert wait_for(lambda: json.loads(state_file(spool).read_text())["kernel_log"]["offset"] == log.stat().st_size)
    finally:
        stop.set()
        t.join(timeout=10)
    assert result["rc"] == EXIT_OK
