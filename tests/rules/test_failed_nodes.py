"""Lines that name several failed nodes (a Slurm hostlist in ``failed_nodes``): which nodes the
fact may name depends on who wrote the line (DESIGN.md, "who may say what"). slurmctld's log
names them; a job's output only confirms nodes of its allocation. The rule tests in
rules/93-tests-slurm.yaml cover replay; these run the converter as the live controller does,
with a scheduler (``HitConverter.scheduler``), and feed hostile lines."""

from __future__ import annotations

import pytest

from engine.core import context, converter
from engine.core.context import ClusterContext, FileContext
from engine.core.converter import HitConverter
from engine.core.replay import scan_chunks
from engine.core.scanner import scanner_for
from engine.facts import Fact
from engine.rulebook import require_rulebook

ALLOCATION = {"gpu01", "gpu02", "gpu03", "gpu04"}


@pytest.fixture(scope="module")
def compiled():
    return require_rulebook()


def _facts(compiled, line: str, source: str, scheduler: bool, allocation=ALLOCATION, cluster=None):
    conv = HitConverter(list(compiled.matchers), cluster or ClusterContext())
    conv.scheduler = scheduler
    if source == "job":
        ctx = FileContext(path="/logs/slurm-700.out", source="job", job="700", attempt=1, nodes=set(allocation))
        conv.cluster.assign("700", 1, allocation, 0.0)
    else:
        ctx = FileContext(path="/var/log/slurmctld.log", source=source)
    scanner, index_map = scanner_for(compiled, source)
    facts = [f for f in scan_chunks([(line + "\n").encode()], scanner, conv, ctx, index_map) if isinstance(f, Fact)]
    return facts, conv.refused


def _node_failure(facts):
    (fact,) = [f for f in facts if f.get("matcher") in ("srun_node_failure", "ctld_node_down")]
    return fact


@pytest.mark.parametrize("scheduler", [True, False])
def test_a_job_log_confirms_only_nodes_of_its_allocation(compiled, scheduler):
    facts, refused = _facts(compiled, "srun: error: Node failure on gpu[03-09],login01", "job", scheduler)
    fact = _node_failure(facts)
    assert fact.get("failed_nodes") == ("gpu03", "gpu04")
    assert fact.get("node") is None
    assert refused.get("other_node") == 1


def test_one_node_of_the_allocation_becomes_the_lines_node(compiled):
    facts, _ = _facts(compiled, "srun: error: Node failure on gpu[04-05]", "job", True)
    fact = _node_failure(facts)
    assert fact.get("node") == "gpu04" and fact.get("failed_nodes") is None


@pytest.mark.parametrize("scheduler", [True, False])
def test_a_job_log_naming_only_other_nodes_names_none(compiled, scheduler):
    facts, refused = _facts(compiled, "srun: error: Node failure on mgmt[01-02]", "job", scheduler)
    fact = _node_failure(facts)
    assert fact.get("failed_nodes") is None and fact.get("node") is None
    assert refused.get("other_node") == 1


def test_under_a_scheduler_a_job_with_no_allocation_known_names_none(compiled):
    facts, _ = _facts(compiled, "srun: error: Node failure on gpu[03-04]", "job", True, allocation=set())
    fact = _node_failure(facts)
    assert fact.get("failed_nodes") is None and fact.get("node") is None


@pytest.mark.parametrize(
    "hostlist",
    ["n[1-99999999]", "n[1-99999]", "n[1-17]", "r[1-16]n[1-16]m[1-16]k[1-16]", "n[1-99999999999999999999]"],
)
@pytest.mark.parametrize("source", ["job", "slurm"])
def test_a_huge_range_names_no_node_and_is_never_expanded(compiled, monkeypatch, hostlist, source):
    def refuse(text):  # the bound is checked first: a hostile range costs no expansion
        raise AssertionError(f"expanded {text!r}")

    monkeypatch.setattr(converter, "expand_hostlist", refuse)
    line = (
        f"srun: error: Node failure on {hostlist}"
        if source == "job"
        else f"Nodes {hostlist} not responding, setting DOWN"
    )
    allocation = {f"n{i}" for i in range(1, 40)}
    facts, refused = _facts(compiled, line, source, True, allocation=allocation)
    fact = _node_failure(facts)
    assert fact.get("failed_nodes") is None and fact.get("node") is None
    assert refused.get("hostlist_too_large") == 1


def test_slurmctld_names_the_nodes_and_the_one_job_running_there(compiled):
    cluster = ClusterContext()
    cluster.assign("812", 2, ["gpu03", "gpu04", "gpu05"], 0.0)
    line = "[2026-11-29T09:00:30.551] error: Nodes gpu[03-04],gpu09 not responding, setting DOWN"
    facts, _ = _facts(compiled, line, "slurm", True, cluster=cluster)
    fact = _node_failure(facts)
    # slurmctld is the scheduler: gpu09 (no job there) is named too
    assert fact.get("failed_nodes") == ("gpu03", "gpu04", "gpu09")
    assert (fact.get("job"), fact.get("attempt")) == ("812", 2)


def test_slurmctld_nodes_of_two_jobs_name_no_job(compiled):
    cluster = ClusterContext()
    cluster.assign("812", 0, ["gpu03"], 0.0)
    cluster.assign("813", 0, ["gpu04"], 0.0)
    facts, _ = _facts(compiled, "Nodes gpu[03-04] not responding, setting DOWN", "slurm", True, cluster=cluster)
    fact = _node_failure(facts)
    assert fact.get("failed_nodes") == ("gpu03", "gpu04") and fact.get("job") is None


@pytest.mark.parametrize(
    "text",
    ["gpu[03-04]", "n[1-3,5],gpu07", "r[1-2]n[1-2]", "a[1-16]", "x[08-10],y[1],z", "q2-st-t2large-[1-2]", "n[3-1]"],
)
def test_the_bound_is_never_below_the_expansion(text):
    assert HitConverter._hostlist_bound(text) >= len(context.expand_hostlist(text))


def test_the_rule_has_a_place_for_every_node_a_line_may_name(compiled):
    rule = compiled.book.rule("fault.node_failure_hostlist")
    assert rule is not None
    slots = [t for t in rule.then_attrs["nodes"] if "failed_nodes[" in str(t)]
    assert len(slots) == HitConverter.MAX_FAILED_NODES
