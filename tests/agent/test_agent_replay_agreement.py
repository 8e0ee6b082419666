"""One parser per source: every Xid of NVIDIA's catalog, in every line form, read by the node
agent (its kernel-log reader, then the spool, then the engine as the controller runs it) and by
replay gives the same facts, the same fault classes and the same decisions.

The catalog is ../shared/reference/xid-catalog.csv (or $RECOVER_XID_CATALOG).
"""

from __future__ import annotations

import csv
import dataclasses
import os
import time
from pathlib import Path

import pytest

from engine.clock import FakeClock
from engine.facts import Fact
from engine.core.incidents import Engine
from engine.core.context import ClusterContext
from engine.core.replay import file_input, replay_inputs, Input
from engine.sources.kmsg import KernelLogSource, default_rulebook
from engine.sources.spool import SpoolReader, SpoolWriter
from engine.store import Store
from tests.helpers import HOST_ZONES, host_zone

ROOT = Path(__file__).resolve().parents[2]
NODE = "n7"
T0 = 1_795_971_601  # 2026-11-29T17:00:01Z
STEP = 3600  # one Xid an hour: every line is an incident of its own


def _catalog() -> list[int]:
    env = os.environ.get("RECOVER_XID_CATALOG")
    for cand in ([Path(env)] if env else []) + [
        ROOT.parent / "shared" / "reference" / "xid-catalog.csv",
        Path("/work/shared/reference/xid-catalog.csv"),
    ]:
        if cand.is_file():
            with open(cand, newline="") as fh:
                return sorted({int(row["code"]) for row in csv.DictReader(fh)})
    pytest.skip("xid-catalog.csv not found (set RECOVER_XID_CATALOG)")


CODES = _catalog()
RECOVERY = ["None", "Drain P2P", "Drain and Reset", "GPU Reset Required", "Node Reboot Required"]
HEADS = {  # how the driver prints what precedes the detail
    "current": "NVRM: Xid (PCI:0000:3b:00): {code}, pid=2345, name=python3, ",
    "unknown_pid": "NVRM: Xid (PCI:0000:3b:00): {code}, pid='<unknown>', name=<unknown>, ",
    "old": "NVRM: Xid (0000:3b:00): {code}, ",
    "domain": "NVRM: Xid (PCI:00000008:01:00.0): {code}, ",
}


def details(code: int) -> list[str]:
    """The detail texts a code is printed with (the decode words matter for 144-150 and 154)."""
    if 144 <= code <= 150:
        return [
            "NETIR_LINK_EVT  Fatal   XC0 i0 Link 01 (0x021425c6 0x00000000 0x00000000)",
            "RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2 0x00000008 0x00000001)",
            "SAW_MVB Link-Fatal XC0 i0 Link 02 (0x00000001 0x00000002)",
        ]
    if code == 154:
        return [f"GPU recovery action changed from 0x0 (None) to 0x{i} ({word})" for i, word in enumerate(RECOVERY)]
    if code == 45:
        return ["Ch 00000001 caused by previous Xid 79", "Ch 00000008"]
    if code == 79:
        return ["GPU has fallen off the bus."]
    return [f"Ch 00000010, detail of Xid {code}"]


def bodies(heads=tuple(HEADS.values())) -> list[str]:
    return [head.format(code=code) + detail for head in heads for code in CODES for detail in details(code)]


def iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t * 1e6) % 1_000_000:06d}+00:00"


def agent_facts(src: KernelLogSource) -> list[Fact]:
    out: list[Fact] = []
    while True:
        got = src.poll()
        if not got:
            return out
        out.extend(got)


def through_spool(facts: list[Fact], tmp: Path) -> list[Fact]:
    """What the controller reads back from the agent's spool."""
    with SpoolWriter(str(tmp / "spool"), NODE) as w:
        w.write(facts)
    return SpoolReader(str(tmp / "spool")).read()


def line_facts(facts: list[Fact]) -> list[Fact]:
    """The facts of a replay that lines gave: not the ``log_end`` a replayed kernel log gets at
    its end (streams8), which a live agent never sends (a node's kernel log does not end)."""
    return [f for f in facts if f.kind != "log_end"]


def replay_facts(inp: Input, tmp: Path, name: str) -> tuple[list[Fact], list]:
    seen: list[Fact] = []
    result = replay_inputs([inp], default_rulebook(), Store(str(tmp / f"{name}.db")), nodes=[NODE], on_fact=seen.append)
    ends = [f for f in seen if f.kind == "log_end"]
    assert len(ends) == 1 and "job" not in ends[0].attrs, ends  # one, naming no job
    return line_facts(seen), result.incidents


def comparable(f: Fact) -> tuple:
    # the raw text differs only by the prefix the reader strips (/dev/kmsg); everything else must agree
    return (f.kind, tuple(sorted((k, v) for k, v in f.attrs.items() if k != "text")))


def verdicts(incidents) -> list[tuple]:
    return sorted(
        (round(i.at), i.decision.fault_class, i.decision.decision, tuple(i.decision.nodes), i.job) for i in incidents
    )


@pytest.fixture(scope="module")
def kernel_log(tmp_path_factory) -> tuple[Path, list[str]]:
    """Every Xid body once, with a syslog timestamp (both sides date a line by it), an hour apart."""
    tmp = tmp_path_factory.mktemp("kern")
    lines = [f"{iso(T0 + i * STEP)} {NODE} kernel: {body}" for i, body in enumerate(bodies())]
    path = tmp / "kern.log"
    path.write_text("\n".join(lines) + "\n")
    return path, lines


def test_every_catalog_code_and_form_gives_the_same_facts_faults_and_decisions(kernel_log, tmp_path):
    path, lines = kernel_log
    src = KernelLogSource(NODE, str(path), replay=True, rulebook=default_rulebook())
    mine = through_spool(agent_facts(src), tmp_path)
    theirs, replay_incidents = replay_facts(
        Input(str(path), file_input(str(path)).chunks, source="kernel"), tmp_path, "r"
    )
    # facts: every line gives one (a Xid 45 that names its cause gives a second, the cause) on both
    # sides, equal in everything but where they were read
    assert len(lines) <= len(theirs) <= len(lines) + sum("caused by previous Xid" in t for t in lines)
    assert sorted(map(comparable, mine)) == sorted(map(comparable, theirs))
    assert sorted(f.at for f in mine) == sorted(f.at for f in theirs)
    assert {f.get("code") for f in mine if f.kind == "xid"} == set(CODES)
    # the agent's evidence names the line by its number
    assert sorted({int(f.origin.rsplit(":", 1)[1]) for f in mine}) == list(range(1, len(lines) + 1))
    # fault classes and decisions: the engine as the controller runs it, over the spool's facts
    engine = Engine(default_rulebook(), Store(str(tmp_path / "agent.db")), cluster=ClusterContext())
    for f in sorted(mine, key=lambda f: f.at):
        engine.ingest(f)
    agent_incidents = engine.finish()
    assert verdicts(agent_incidents) == verdicts(replay_incidents)
    classes = {v[1] for v in verdicts(agent_incidents)}
    # the catalog reaches the node-isolating classes (a test that can fail: not everything is silent)
    assert {"gpu_fell_off_bus", "gpu_memory_uncorrectable", "nvlink_error", "gpu_hardware_other"} <= classes


@pytest.mark.parametrize("head", sorted(HEADS))
@pytest.mark.parametrize("prefix", ["", "[155044.078590] ", "[ T1946] ", "Nov 29 17:00:01 n7 kernel: ", "kernel: "])
def test_prefixes_and_kmsg_records_give_the_same_facts(prefix, head, tmp_path):
    # one head per stream: the same Xid printed twice in a row with another pid is a flood that
    # replay collapses into its first fact (as the controller does), which is not what is compared here
    texts = [prefix + body for body in bodies((HEADS[head],))]
    path = tmp_path / "kern.log"
    path.write_text("\n".join(texts) + "\n")
    mine = agent_facts(KernelLogSource(NODE, str(path), replay=True, rulebook=default_rulebook()))
    theirs, _ = replay_facts(Input(str(path), file_input(str(path)).chunks, source="kernel"), tmp_path, "r")
    assert len(texts) <= len(mine) <= len(texts) + sum("caused by previous Xid" in t for t in texts)
    assert sorted(map(comparable, mine)) == sorted(map(comparable, theirs))
    # /dev/kmsg records: the agent strips the record header; the facts are the same
    dev = tmp_path / "kmsg"
    dev.write_text("".join(f"6,{i + 1},{1000 * i},-;{t}\n" for i, t in enumerate(texts)))
    kmsg = KernelLogSource(NODE, kmsg=True, kmsg_path=str(dev), replay=True, rulebook=default_rulebook())
    kmsg.open()
    from_kmsg = agent_facts(kmsg)
    kmsg.close()
    assert sorted(map(comparable, from_kmsg)) == sorted(map(comparable, theirs))
    assert all(f.origin.startswith(f"kmsg:{NODE}:") for f in from_kmsg)


# -- the same time on both sides, whatever the host's zone and the stamp's form ----------------

WRITTEN = 1_796_126_400  # 2026-12-01T12:00:00Z: when the log was last written (its mtime; the agent reads it then)


def _fmt(t: float, pattern: str) -> str:
    return time.strftime(pattern, time.gmtime(t))


#: how each stamp form of the corpus prints the time t (UTC fields; the log zone says what they mean)
STAMPS = {
    "bsd_syslog": lambda t: _fmt(t, "%b %e %H:%M:%S") + f" {NODE} kernel: ",
    "iso_naive": lambda t: _fmt(t, "%Y-%m-%dT%H:%M:%S") + f".250000 {NODE} kernel: ",
    "iso_offset": lambda t: _fmt(t + 3600, "%Y-%m-%dT%H:%M:%S") + f".250000+01:00 {NODE} kernel: ",
    "python_logging": lambda t: _fmt(t, "%Y-%m-%d %H:%M:%S") + ",250 - ",
    "slurm_bracketed": lambda t: _fmt(t, "[%Y-%m-%dT%H:%M:%S") + ".250] ",
    "dmesg_T": lambda t: _fmt(t, "[%a %b %e %H:%M:%S %Y] "),
    "glog": lambda t: _fmt(t, "E%m%d %H:%M:%S") + ".113452 1234 x.cc:1] ",
    "glog_rank": lambda t: _fmt(t, "[rank0]:[E%m%d %H:%M:%S") + ".113452871 ProcessGroupNCCL.cpp:616] ",
    "rfc2822": lambda t: _fmt(t, "%a, %d %b %Y %H:%M:%S +0000 "),
    "vllm": lambda t: _fmt(t, "ERROR %m-%d %H:%M:%S x.py:1] "),
}


@pytest.fixture(params=HOST_ZONES)
def host_tz(request):
    """The process's own time zone, set for one test and put back after it."""
    yield from host_zone(request)


def _rulebook(tmp: Path, zone: str | None):
    if zone is None:
        return default_rulebook()
    from engine.rulebook import load_rulebook

    site = tmp / "zone.yaml"
    site.write_text(f"policy:\n  log_timezone: {zone}\n")
    return load_rulebook([site]).compiled


def _line_no(f: Fact) -> int:
    return int(f.origin.rsplit(":", 1)[1])


@pytest.mark.parametrize("log_zone", [None, "Asia/Kolkata"])
def test_agent_and_replay_date_every_stamp_form_alike_under_any_host_zone(log_zone, host_tz, tmp_path):
    """The node agent and replay read the same kernel log: the same instant for each line, the
    same verdicts, for every stamp form, under each host ``TZ``, with the default log zone (UTC)
    and another. Each Xid line is followed by an undated one (a dmesg uptime stamp), which both
    sides date by the line before it."""
    compiled = _rulebook(tmp_path, log_zone)
    codes = [79, 48, 13, 74, 31]
    lines: list[str] = []
    want: dict[int, float] = {}  # line number -> its instant
    for i, form in enumerate(sorted(STAMPS)):
        t = T0 + i * STEP
        shift = 0 if log_zone is None or form in ("iso_offset", "rfc2822") else -19800  # Kolkata: UTC+5:30
        code = codes[i % len(codes)]
        lines.append(STAMPS[form](t) + HEADS["current"].format(code=code) + details(code)[0])
        want[len(lines)] = t + shift + STAMP_FRACTION.get(form, 0.0)
        lines.append(f"[{9811 + i}.302114] " + HEADS["old"].format(code=45) + f"Ch 0000000{i}")
        want[len(lines)] = want[len(lines) - 1]
    path = tmp_path / "kern.log"
    path.write_text("\n".join(lines) + "\n")
    os.utime(path, (WRITTEN, WRITTEN))
    src = KernelLogSource(NODE, str(path), replay=True, rulebook=compiled, clock=FakeClock(start=float(WRITTEN)))
    mine = through_spool(agent_facts(src), tmp_path)
    theirs: list[Fact] = []
    result = replay_inputs(
        [dataclasses.replace(file_input(str(path)), source="kernel")],  # read as a file: its mtime too
        compiled,
        Store(str(tmp_path / "r.db")),
        nodes=[NODE],
        on_fact=theirs.append,
    )
    theirs = line_facts(theirs)
    assert sorted(map(comparable, mine)) == sorted(map(comparable, theirs))
    # the instants: each stamp read in the log zone (UTC unless set), never in the host's TZ
    by_line = {n: pytest.approx(at, abs=1e-6) for n, at in want.items()}
    assert {_line_no(f): f.at for f in mine} == by_line, sorted(STAMPS)
    assert {_line_no(f): f.at for f in theirs} == by_line, sorted(STAMPS)
    engine = Engine(compiled, Store(str(tmp_path / "agent.db")), cluster=ClusterContext())
    for f in sorted(mine, key=lambda f: f.at):
        engine.ingest(f)
    assert verdicts(engine.finish()) == verdicts(result.incidents)
    assert verdicts(result.incidents), "the Xids are incidents: the comparison is not of nothing"


STAMP_FRACTION = {
    "iso_naive": 0.25,
    "iso_offset": 0.25,
    "python_logging": 0.25,
    "slurm_bracketed": 0.25,
    "glog": 0.113452,
    "glog_rank": 0.113452871,
}


def test_a_reloaded_rulebook_brings_its_log_zone_to_the_agents_kernel_log(tmp_path):
    """The agent swaps a source's ``lines`` on reload (the read position stays): the lines read
    after it are dated in the new rulebook's ``policy.log_timezone``."""
    path = tmp_path / "kern.log"
    xid = HEADS["current"].format(code=79) + details(79)[0]
    path.write_text(f"Nov 29 17:00:01 {NODE} kernel: {xid}\n")
    src = KernelLogSource(
        NODE, str(path), replay=True, rulebook=default_rulebook(), clock=FakeClock(start=float(WRITTEN))
    )
    assert [f.at for f in agent_facts(src)] == [T0]
    src.lines = src.lines_for(_rulebook(tmp_path, "Europe/Berlin"))
    with open(path, "a") as fh:
        fh.write(f"Nov 29 18:00:01 {NODE} kernel: {xid}\n")
    assert [f.at for f in agent_facts(src)] == [T0 + 3600 - 3600]  # 18:00:01 in Berlin (UTC+1) is 17:00:01Z
