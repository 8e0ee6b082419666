"""Fixtures for the operator tools: a tiny rulebook, a store filled through the real replay of
small logs plus live incidents with known detection latencies, and a CLI runner."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from engine.facts import Fact
from engine.core.replay import replay
from engine.rulebook import require_rulebook
from engine.store import Store

REPO = Path(__file__).resolve().parents[2]

TINY_RULES = textwrap.dedent("""\
    matchers:
      - {id: xid, source: [kernel], emit: xid,
         pattern: '(?P<node>n\\d+) kernel: NVRM: Xid \\(PCI:(?P<pci>[0-9a-f:]+)\\): (?P<code>\\d+)'}
      - {id: nccl_timeout, source: [job], pattern: 'Watchdog caught collective operation timeout'}
      - {id: cuda_oom, source: [job], pattern: 'CUDA out of memory'}
    rules:
      - id: sym.xid_off_bus
        description: Xid 79
        when: [{as: x, kind: xid, where: {code: 79}}]
        then: {symptom: {name: off_bus, severity: fatal}}
      - id: fault.off_bus
        description: the GPU fell off the bus
        when: [{as: s, kind: symptom, where: {name: off_bus}}]
        then: {fault: {fault_class: gpu_fell_off_bus, nodes: ["{{ s.node }}"]}}
      - id: sym.nccl
        description: NCCL watchdog timeout
        when: [{as: l, kind: log, where: {matcher: nccl_timeout}}]
        then: {symptom: {name: nccl_timeout}}
      - id: fault.nccl
        description: a collective timed out
        when: [{as: s, kind: symptom, where: {name: nccl_timeout}}]
        then: {fault: {fault_class: nccl_timeout}}
      - id: fault.oom
        description: CUDA out of memory
        when: [{as: l, kind: log, where: {matcher: cuda_oom}}]
        then: {fault: {fault_class: cuda_oom}}
    actions:
      requeue: {per: job, argv: [scontrol, requeue, "{{ job }}"]}
      exclude: {per: job, argv: [scontrol, update, "JobId={{ job }}", "ExcNodeList={{ nodes|join(',') }}"]}
      drain: {per: node, argv: [scontrol, update, "NodeName={{ node }}", State=DRAIN]}
      notify: {per: job, argv: [logger, "incident {{ incident }}"]}
    """)

# replayed incidents (virtual times in March 2020): ids 1-4 in this order
REPLAYED_LOGS = {
    "slurm-101.out": "2020-03-01 10:00:00,000 [rank3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1)\n",
    "slurm-102.out": "2020-03-02 11:00:00,000 [rank1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9)\n",
    "slurm-103.out": "2020-03-02 12:00:00,000 torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n",
    "kern-n3.log": "2020-03-03T09:00:00+00:00 n3 kernel: NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n",
}
# live incidents (ids 5-8): (job, fault_class, decision, latency seconds)
LIVE = [
    ("201", "nccl_timeout", "restart", 0.5),
    ("202", "nccl_timeout", "restart", 3.0),
    ("203", "nccl_timeout", "restart", 12.0),
    ("204", "cuda_oom", "stop", 40.0),
]


@pytest.fixture(scope="session")
def tiny_rules(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("rules") / "tiny.yaml"
    path.write_text(TINY_RULES)
    return path


def add_live_incident(store: Store, job: str, fault_class: str, decision: str, latency: float, rule: str) -> int:
    """A closed incident as the live controller leaves it: engine time = wall time, evidence
    stamped on arrival ``latency`` seconds before the incident opened."""
    now = time.time()
    inc = store.open_incident(f"job:{job}:0", job, 0, None, now)
    evidence = Fact.make("log", {"matcher": "m", "job": job, "attempt": 0}, now - latency, f"slurm-{job}.out:1")
    store.add_fact(inc, evidence)
    fault = Fact.make("fault", {"fault_class": fault_class, "job": job, "attempt": 0}, now, f"rule:{rule}")
    store.add_firing(inc, rule, "tiny.yaml:1:1", "live", {"l": evidence.id}, fault.id, now)
    store.add_fact(inc, fault)
    store.close_incident(inc, now + 120, fault_class, decision, (), fault.id, "live test")
    return inc


@pytest.fixture
def populated_db(tmp_path, tiny_rules) -> Path:
    """8 closed incidents: 4 replayed from logs through the real pipeline, 4 live; no reviews."""
    compiled = require_rulebook([tiny_rules], defaults=False)
    db = tmp_path / "recover.db"
    store = Store(db)
    paths = []
    for name, text in REPLAYED_LOGS.items():
        p = tmp_path / name
        p.write_text(text)
        paths.append(str(p))
    for p in paths:  # one at a time, so incident ids follow the table above
        replay([p], compiled, store)
    for job, fc, dec, lat in LIVE:
        add_live_incident(store, job, fc, dec, lat, "fault.nccl" if fc == "nccl_timeout" else "fault.oom")
    rows = store.incidents()
    assert [(r.id, r.fault_class, r.decision) for r in rows] == [
        (1, "nccl_timeout", "restart"),
        (2, "nccl_timeout", "restart"),
        (3, "cuda_oom", "stop"),
        (4, "gpu_fell_off_bus", "isolate_and_restart"),
        (5, "nccl_timeout", "restart"),
        (6, "nccl_timeout", "restart"),
        (7, "nccl_timeout", "restart"),
        (8, "cuda_oom", "stop"),
    ]
    store.close()
    return db


def recover(
    *args: str, cwd: Path | None = None, env: dict | None = None, timeout: int = 120
) -> subprocess.CompletedProcess:
    """Run the real CLI in a subprocess (exit codes and stderr as a user sees them)."""
    full_env = dict(os.environ, COLUMNS="200", **(env or {}))
    return subprocess.run(
        [sys.executable, "-m", "engine.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd or REPO,
        env=full_env,
        timeout=timeout,
    )
