"""Counters are rulebook data, and a missing GPU is a fault: the node agent on a fake NVML, its
spool read back and judged by the engine as the controller does, each case reaching a verdict.

- a GPU that disappears from enumeration is gpu_fell_off_bus on that node;
- so is a node whose NVML cannot count its GPUs any more (the count remembered across restarts);
- a threshold a site changes in its YAML file changes what the agent reports, and the verdict.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from engine.errors import SchedulerUnavailable

from engine.live.agent import default_state_dir, run_agent
from engine.core.incidents import Engine
from engine.core.context import ClusterContext
from engine.rulebook import require_rulebook
from engine.sources.fake_nvml import FakeGpu, FakeNvml
from engine.sources.spool import SpoolReader
from engine.store import Store
from tests.helpers import wait_for

NODE = "gpu07"
REPO = Path(__file__).resolve().parents[2]
UUIDS = [f"GPU-aaaaaaaa-0000-0000-0000-00000000000{i}" for i in range(4)]


class Agent:
    """run_agent in a thread, on a fake NVML, with its spool read back as the controller would."""

    def __init__(self, tmp: Path, nv: FakeNvml, rulebook=None, **kw):
        self.spool = tmp / "spool"
        self.reader = SpoolReader(str(self.spool))
        self.facts: list = []
        self.stop = threading.Event()
        self.rc: list[int] = []
        args = {
            "nvml": True,
            "nvml_backend": nv,
            "poll_interval": 0.05,
            "tick": 0.02,
            "nvml_events": False,
            "rulebook": rulebook,
            "stop_event": self.stop,
            "nvml_retry_s": 0.05,
        }
        args.update(kw)
        self.thread = threading.Thread(
            target=lambda: self.rc.append(run_agent(NODE, str(self.spool), **args)), daemon=True
        )
        self.thread.start()

    def started(self, timeout: float = 30.0) -> dict:
        """Wait until the agent has sampled NVML (its state holds the samples) and return that state."""
        path = Path(default_state_dir(str(self.spool), NODE)) / "state.json"

        def sampled() -> dict | None:
            try:
                state = json.loads(path.read_text())
            except (OSError, ValueError):  # not written yet, or being replaced
                return None
            return state if state.get("nvml") and any(d.get("last") for d in state["nvml"].values()) else None

        return wait_for(sampled, timeout, 0.02, what="the agent to sample NVML")

    def wait_for(self, pred, timeout: float = 20.0):
        def hit():
            self.facts.extend(self.reader.read())
            return next(((f,) for f in self.facts if pred(f)), None)  # a tuple: truthy whatever the fact

        found = wait_for(hit, timeout, 0.02, fail=False)
        if not found:
            raise AssertionError(f"no such fact; got {[(f.kind, dict(f.attrs)) for f in self.facts]}")
        return found[0]

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)
        assert not self.thread.is_alive() and self.rc == [0]


def verdict(facts, tmp: Path, rulebook=None):
    engine = Engine(
        rulebook or require_rulebook(), Store(str(tmp / f"v{time.monotonic_ns()}.db")), cluster=ClusterContext()
    )
    for f in sorted(facts, key=lambda f: f.at):
        engine.ingest(f)
    return [(i.decision.fault_class, i.decision.decision, i.decision.nodes) for i in engine.finish()]


def test_a_gpu_that_disappears_from_enumeration_fell_off_the_bus(tmp_path):
    nv = FakeNvml([FakeGpu(uuid=u, bus_id=f"00000000:{0x10 + i:02X}:00.0") for i, u in enumerate(UUIDS)])
    agent = Agent(tmp_path, nv)
    try:
        assert agent.started()["expected_gpus"] == 4  # the count first seen, remembered
        nv.gpus.pop(2)  # the driver no longer enumerates it
        missing = agent.wait_for(lambda f: f.get("state") == "gpus_missing")
    finally:
        agent.close()
    assert (missing.get("count"), missing.get("expected"), missing.get("node")) == (3, 4, NODE)
    assert verdict(agent.facts, tmp_path) == [("gpu_fell_off_bus", "isolate_and_restart", (NODE,))]


def test_nvml_that_cannot_count_after_a_restart_is_a_missing_gpu(tmp_path):
    nv = FakeNvml([FakeGpu(uuid=u) for u in UUIDS[:2]])
    first = Agent(tmp_path, nv)
    first.started()
    first.close()
    assert first.facts == [] or all(f.get("state") != "gpus_missing" for f in first.facts)
    # the agent restarts on a node whose driver now fails to count its devices
    nv.count_error = __import__("pynvml").NVMLError_Unknown
    second = Agent(tmp_path, nv)
    try:
        missing = second.wait_for(lambda f: f.get("state") == "gpus_missing")
    finally:
        second.close()
    assert (missing.get("count"), missing.get("expected")) == (0, 2)
    assert "nvmlDeviceGetCount" in missing.get("error")
    assert verdict(second.facts, tmp_path) == [("gpu_fell_off_bus", "isolate_and_restart", (NODE,))]


def test_nvml_failing_to_start_on_a_node_that_should_have_gpus_is_a_missing_gpu(tmp_path):
    nv = FakeNvml(driver_not_loaded=True)
    agent = Agent(tmp_path, nv, expected_gpus=8)
    try:
        missing = agent.wait_for(lambda f: f.get("state") == "gpus_missing")
    finally:
        agent.close()
    assert (missing.get("count"), missing.get("expected")) == (0, 8)
    assert verdict(agent.facts, tmp_path) == [("gpu_fell_off_bus", "isolate_and_restart", (NODE,))]


def test_a_site_threshold_changed_in_yaml_reaches_a_verdict(tmp_path):
    site = tmp_path / "site.yaml"
    site.write_text("policy:\n  thresholds:\n    row_remap_uncorrectable_max: 99\n")
    results = {}
    for name, rulebook in (("shipped", require_rulebook()), ("site", require_rulebook([str(site)]))):
        gpu = FakeGpu(uuid=UUIDS[0])
        run = tmp_path / name
        agent = Agent(run, FakeNvml([gpu]), rulebook=rulebook)
        try:
            agent.started()  # the baseline sample
            gpu.remap_uncorrectable = 100  # above the site's 99, below the shipped 511
            fact = agent.wait_for(lambda f: f.get("counter") == "row_remap_uncorrectable")
        finally:
            agent.close()
        results[name] = (fact.get("exceeded"), fact.get("limit"), verdict(agent.facts, run, rulebook))
    assert results["shipped"] == (False, 511, [])
    assert results["site"] == (True, 99, [("gpu_memory_uncorrectable", "isolate_and_restart", (NODE,))])


def test_a_threshold_per_gpu_model(tmp_path):
    site = tmp_path / "site.yaml"
    site.write_text('policy:\n  thresholds:\n    models:\n      "H100": {temperature_c: 70}\n')
    from engine.sources.nvml import NvmlPoller

    hot = [
        FakeGpu(uuid=UUIDS[0], name="NVIDIA H100 80GB HBM3", temperature=75),
        FakeGpu(uuid=UUIDS[1], name="NVIDIA A100-SXM4-80GB", temperature=75),
    ]
    p = NvmlPoller(NODE, backend=FakeNvml(hot), thresholds=require_rulebook([str(site)]).policy["thresholds"])
    p.start()
    states = [(f.get("gpu"), f.get("state"), f.get("limit")) for f in p.poll(1.0) if f.kind == "gpu_state"]
    assert states == [(0, "temperature_high", 70.0)]


class FakeScheduler:
    """An adapter that only says how many GPUs a node has, and which nodes it was asked about."""

    name = "fake"

    def __init__(self, count=None, error: Exception | None = None):
        self.count, self.error, self.asked = count, error, []

    def node_gpu_count(self, node: str):
        self.asked.append(node)
        if self.error is not None:
            raise self.error
        return self.count


def test_the_scheduler_s_gpu_count_is_what_the_agent_expects_without_a_subprocess(tmp_path, monkeypatch):
    def no_subprocess(*a, **k):
        raise AssertionError(f"the agent ran a command itself: {a}")

    monkeypatch.setattr(subprocess, "Popen", no_subprocess)
    monkeypatch.setattr(subprocess, "run", no_subprocess)
    scheduler = FakeScheduler(count=4)
    nv = FakeNvml([FakeGpu(uuid=u, bus_id=f"00000000:{0x10 + i:02X}:00.0") for i, u in enumerate(UUIDS[:2])])
    agent = Agent(tmp_path, nv, expected_gpus="gres", scheduler=scheduler)
    try:
        missing = agent.wait_for(lambda f: f.get("state") == "gpus_missing")
        assert agent.started()["expected_gpus"] == 4
    finally:
        agent.close()
    assert scheduler.asked == [NODE]
    assert (missing.get("count"), missing.get("expected")) == (2, 4)


@pytest.mark.parametrize(
    "scheduler",
    [
        None,  # --scheduler none
        FakeScheduler(error=SchedulerUnavailable("sinfo: Unable to contact slurm controller")),
        FakeScheduler(error=RuntimeError("a site adapter's bug")),
        FakeScheduler(count=None),  # the scheduler does not know the node
        FakeScheduler(count=0),
        object(),  # an adapter that cannot say
    ],
    ids=["none", "unavailable", "broken", "unknown", "zero", "cannot-say"],
)
def test_a_scheduler_that_cannot_say_leaves_the_count_nvml_first_gives(tmp_path, scheduler):
    nv = FakeNvml([FakeGpu(uuid=u) for u in UUIDS[:2]])
    agent = Agent(tmp_path, nv, expected_gpus="gres", scheduler=scheduler)
    try:
        assert agent.started()["expected_gpus"] == 2
        time.sleep(0.2)
        agent.facts.extend(agent.reader.read())
    finally:
        agent.close()
    assert not [f for f in agent.facts if f.get("state") == "gpus_missing"]


def test_recover_agent_asks_slurm_through_the_adapter_and_survives_bytes_that_are_not_utf8(tmp_path):
    """`recover agent` (--expected-gpus gres and --scheduler slurm by default) on a node whose
    Slurm prints bytes that are not UTF-8 (fake sinfo and scontrol first on PATH): the count is
    read and the agent runs. It used to decode `scontrol show node` strictly and die."""
    fake = tmp_path / "bin"
    fake.mkdir()
    asked = tmp_path / "asked"
    (fake / "sinfo").write_text(f"#!/bin/sh\necho \"$@\" >> {asked}\nprintf '{NODE}|gpu:4(S:0),\\377gres:1\\n'\n")
    (fake / "scontrol").write_text(
        f"#!/bin/sh\nprintf 'NodeName={NODE} Arch=x86_64 Gres=gpu:4(S:0) State=IDLE Reason=bad\\377\\376name\\n'\n"
    )
    for tool in ("sinfo", "scontrol"):
        (fake / tool).chmod(0o755)
    spool, log, err = tmp_path / "spool", tmp_path / "kern.log", tmp_path / "agent.err"
    log.write_text("")
    cmd = [sys.executable, "-m", "engine.cli", "agent", "--node", NODE, "--spool", str(spool)]
    cmd += ["--kernel-log", str(log), "--no-nvml", "--interval", "0.02", "--verbose"]
    env = {**os.environ, "PATH": f"{fake}:{os.environ.get('PATH', '')}"}
    state = Path(default_state_dir(str(spool), NODE)) / "state.json"
    with open(err, "wb") as errfh:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=errfh, cwd=str(REPO), env=env)
    try:
        wait_for(lambda: state.exists() or proc.poll() is not None, 60, fail=False)
        assert state.exists(), err.read_text(errors="replace")[-3000:]
        assert json.loads(state.read_text())["expected_gpus"] == 4
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=20)
    assert rc == 0, err.read_text(errors="replace")[-3000:]
    assert asked.read_text().split() == ["-h", "-N", "-n", NODE, "-o", "%N|%G"]
    assert "Traceback" not in err.read_text(errors="replace")
