"""Engine behaviour the default rulebook depends on, where an early engine and docs/rulebook.md
disagreed (all four were fixed in the engine; these are now regression tests).

1. (was broken) "Every matched line's time is taken from its own timestamp when it has one, else the last
   time seen in that file (line order)": the engine saw only timestamps on lines a matcher hit,
   so an untimestamped error line after a timestamped but unmatched line gets an older time
   (or 0.0 when nothing before it matched).
2. (was broken) Correlation within 10 minutes (docs: "an NCCL timeout in a job whose node logged a fatal Xid
   within 10 minutes"): an incident closes after `settle` (2m) and its facts are retracted, so
   the default 10-minute NCCL watchdog that fires ~10 min after Xid 79 can no longer be joined
   with it; the second incident becomes a plain nccl_timeout (restart, no isolation).
3. (was broken) Replay order: node -> job mapping is learned while scanning, so a kernel log scanned before
   the job log that names the job's nodes (`recover replay examples/*` sorts kern-* first) gives
   node-scoped incidents and the job's own incident loses its hardware cause.
4. (was broken) join [job, attempt] matched when one side lacks the attribute (durable_rules compares with a
   missing value): without the `job: {exists: true}` guards in rules/30-faults.yaml, a Xid on a
   node of no known job is blamed on any job failing at the same time.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

engine = pytest.importorskip("engine.ops.ruletest")
from engine.rulebook import load_rulebook
from engine.rulebook.model import RuleTest, TestInput as _Input
from engine.core.rete import ReteNetwork
from engine.ops.ruletest import run_one


@pytest.fixture(scope="module")
def book():
    result = load_rulebook()
    assert result.ok, [str(d) for d in result.errors]
    return result.compiled


def _run(book, inputs, expect, context=None, network=None):
    test = RuleTest(
        "gap", tuple(_Input(f, s, textwrap.dedent(l)) for f, s, l in inputs), tuple(expect), None, context or {}
    )
    return run_one(book, test, network or ReteNetwork(book))


def test_untimestamped_line_takes_the_last_time_seen_in_the_file(book):
    out = _run(
        book,
        [
            (
                "kern-n3.log",
                "kernel",
                """\
            2026-11-29T10:29:50.000000+00:00 n3 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python, GPU has fallen off the bus.
            """,
            ),
            (
                "slurm-9101.out",
                "job",
                """\
            2026-11-29T10:00:00Z step=10 loss=2.0
            2026-11-29T10:30:00Z rank 0 reports a collective timeout
            [rank0]:[E1129 10:30:00.000000000 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=60000) ran for 60010 milliseconds before timing out.
            """,
            ),
        ],
        [{"fault_class": "gpu_fell_off_bus", "nodes": ["n3"]}],
        context={"job": "9101", "attempt": 0, "nodes": ["n1", "n3"]},
    )
    assert out.passed, out.problems


def test_default_watchdog_ten_minutes_after_xid79_still_blames_the_gpu(book):
    out = _run(
        book,
        [
            (
                "kern-n3.log",
                "kernel",
                """\
            2026-11-29T18:00:05.000211+00:00 n3 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=70011, name=pt_main_thread, GPU has fallen off the bus.
            """,
            ),
            (
                "slurm-9102.out",
                "job",
                """\
            2026-11-29T17:59:58.440Z step=1200 loss=2.0012
            2026-11-29T18:09:59.902Z [rank0]:[E1129 18:09:59.902110001 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=4412, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600083 milliseconds before timing out.
            """,
            ),
        ],
        [],
        context={"job": "9102", "attempt": 0, "nodes": ["n1", "n2", "n3", "n4"]},
    )
    classes = {(i["fault_class"], tuple(i["nodes"])) for i in out.incidents}
    assert classes == {("gpu_fell_off_bus", ("n3",))}, out.incidents


def test_kernel_log_scanned_before_the_job_log(book):
    from engine.core.replay import file_input, replay_inputs
    from engine.store import Store

    root = Path(__file__).resolve().parents[2] / "examples"
    store = Store(":memory:")
    # the order `recover replay examples/*` uses: kern-n3.log sorts before slurm-4242.out
    result = replay_inputs(
        [file_input(str(root / "kern-n3.log")), file_input(str(root / "slurm-4242.out"))], book, store
    )
    rows = [store.incident(c.id) for c in result.incidents]
    assert [(r.job, r.fault_class, tuple(r.nodes)) for r in rows] == [("4242", "gpu_fell_off_bus", ("n3",))]


def test_examples_in_job_first_order(book):
    """With the job logs first, the examples give exactly one incident per failing job."""
    from engine.core.replay import file_input, replay_inputs
    from engine.store import Store

    root = Path(__file__).resolve().parents[2] / "examples"
    files = sorted(root.glob("slurm-*.out")) + sorted(root.glob("kern-*.log")) + [root / "slurmctld.log"]
    store = Store(":memory:")
    result = replay_inputs([file_input(str(p)) for p in files], book, store)
    got = sorted(
        (
            store.incident(c.id).job,
            store.incident(c.id).fault_class,
            store.incident(c.id).decision,
            tuple(store.incident(c.id).nodes),
        )
        for c in result.incidents
    )
    assert got == [
        ("4242", "gpu_fell_off_bus", "isolate_and_restart", ("n3",)),
        ("4243", "cuda_oom", "stop", ()),
        ("4244", "nccl_network_error", "restart", ()),
        ("4245", "job_time_limit", "observe", ()),
        ("4246", "node_failure", "isolate_and_restart", ("n12",)),
        ("4247", "app_error", "stop", ()),
        ("4249", "gpu_memory_uncorrectable", "isolate_and_restart", ("n7",)),
    ]


def test_join_does_not_match_a_missing_attribute(tmp_path):
    """The default rulebook with its `job: {exists: true}` guards removed: a Xid on n99 (no
    known job) must still not be joined with job 9104's NCCL timeout."""
    rules = Path(__file__).resolve().parents[2] / "rules"
    for p in sorted(rules.glob("[0-5]*.yaml")):
        if p.name.endswith("fault-classes.yaml"):
            continue  # the shipped fault classes are loaded even with defaults=False
        (tmp_path / p.name).write_text(p.read_text().replace("job: {exists: true}, ", ""))
    result = load_rulebook(sorted(tmp_path.glob("*.yaml")), defaults=False)
    assert result.ok, [str(d) for d in result.errors]
    out = _run(
        result.compiled,
        [
            (
                "kern-n99.log",
                "kernel",
                "2026-11-29T17:00:05.000000+00:00 n99 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, GPU has fallen off the bus.\n",
            ),
            (
                "slurm-9104.out",
                "job",
                """\
            SLURM_JOB_NODELIST=n[1-2]
            2026-11-29T17:00:00Z step=5 loss=2.0
            [rank0]:[E1129 17:00:06.000000000 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600001 milliseconds before timing out.
            """,
            ),
        ],
        [],
    )
    fired = {r for i in out.incidents if i["job"] == "9104" for r in i["rules"]}
    assert "corr.victim_of_gpu_fell_off_bus" not in fired, out.incidents


def test_examples_in_glob_order_get_the_job_incidents_right(book):
    """In `recover replay examples/*` order (kernel logs first) the job incidents are still right,
    thanks to the corr.node_victim_of_* rules; only the extra node-scoped incidents of gap 3
    remain."""
    from engine.core.replay import file_input, replay_inputs
    from engine.store import Store

    root = Path(__file__).resolve().parents[2] / "examples"
    files = sorted(p for p in root.iterdir() if p.suffix in (".out", ".err", ".log"))
    store = Store(":memory:")
    result = replay_inputs([file_input(str(p)) for p in files], book, store)
    rows = [store.incident(c.id) for c in result.incidents]
    got = sorted((r.job, r.fault_class, r.decision, tuple(r.nodes)) for r in rows if r.job is not None)
    assert got == [
        ("4242", "gpu_fell_off_bus", "isolate_and_restart", ("n3",)),
        ("4243", "cuda_oom", "stop", ()),
        ("4244", "nccl_network_error", "restart", ()),
        ("4245", "job_time_limit", "observe", ()),
        ("4246", "node_failure", "isolate_and_restart", ("n12",)),
        ("4247", "app_error", "stop", ()),
        ("4249", "gpu_memory_uncorrectable", "isolate_and_restart", ("n7",)),
    ]
    assert {(r.fault_class, tuple(r.nodes)) for r in rows if r.job is None} <= {
        ("gpu_fell_off_bus", ("n3",)),
        ("gpu_memory_uncorrectable", ("n7",)),
    }
