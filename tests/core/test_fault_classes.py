"""Fault classes are data: declared in the rulebook with a description, a default decision, a
priority and an optional retry budget; a site adds its own or changes a shipped one."""

from engine.core.policy import GuardContext, decide
from engine.rulebook import load_rulebook

SITE = """
fault_classes:
  lustre_ost_down:
    description: A Lustre OST the job reads from went down.
    decision: restart
    priority: 58
    retry: 1
  cuda_oom: {override: true, decision: restart}
"""


def book(tmp_path, text=SITE, defaults=True):
    path = tmp_path / "site.yaml"
    path.write_text(text)
    result = load_rulebook([path], defaults=defaults)
    assert result.ok, [str(d) for d in result.diagnostics]
    return result.compiled


def test_a_site_class_gets_its_decision_and_priority(tmp_path):
    c = book(tmp_path)
    assert c.fault_classes["lustre_ost_down"].description.startswith("A Lustre OST")
    assert c.policy["decisions"]["lustre_ost_down"] == "restart"
    assert c.policy["priorities"]["lustre_ost_down"] == 58
    assert c.policy["decisions"]["cuda_oom"] == "restart"  # a shipped class changed by override
    assert c.policy["priorities"]["cuda_oom"] == 45  # its other fields kept


def test_the_class_retry_budget_stops_the_next_restart(tmp_path):
    c = book(tmp_path)
    history = [
        {"attempt": 0, "decision": "restart", "fault_class": "lustre_ost_down", "fingerprint": "x", "closed_at": 100.0}
    ]
    ctx = GuardContext(job="77", attempt=1, now=200.0, history=history)
    d = decide(c, "lustre_ost_down", (), "ost down", ctx)
    assert d.decision == "stop"
    assert any(g["guard"] == "retry_budget" and "retry budget is 1" in g["why"] for g in d.guards)
    # another class, same history: the budget is per class
    assert decide(c, "nccl_network_error", (), "net", ctx).decision == "restart"


def test_shipped_classes_are_known_without_the_default_rules(tmp_path):
    c = book(
        tmp_path,
        "rules:\n  - {id: r, description: d, when: [{kind: xid}], then: {fault: {fault_class: gpu_fell_off_bus}}}\n",
        defaults=False,
    )
    assert c.policy["decisions"]["gpu_fell_off_bus"] == "isolate_and_restart"
    assert "gpu_fell_off_bus" in c.fault_classes


def test_a_second_declaration_needs_override(tmp_path):
    path = tmp_path / "site.yaml"
    path.write_text("fault_classes:\n  cuda_oom: {description: d, decision: restart, priority: 1}\n")
    result = load_rulebook([path])
    assert [d.code for d in result.errors] == ["E-DUP-ID"]
    assert result.errors[0].mark.line == 2


def test_policy_retry_per_class_overrides_the_class_budget(tmp_path):
    c = book(tmp_path, SITE + "policy:\n  retry: {per_class: {lustre_ost_down: 3, unknown: 0}}\n")
    assert dict(c.policy["retry"]["per_class"]) == {"lustre_ost_down": 3, "unknown": 0}
    ctx = GuardContext(job="77", attempt=0, now=200.0)
    d = decide(c, "unknown", (), "no rule explains it", ctx)
    assert d.decision == "stop" and "retry budget is 0" in d.guards[0]["why"]


def test_per_class_names_a_declared_class(tmp_path):
    path = tmp_path / "site.yaml"
    path.write_text("policy:\n  retry: {per_class: {lustre_ots_down: 1}}\n")
    result = load_rulebook([path])
    assert [(d.code, d.mark.line) for d in result.errors] == [("E-VALUE", 2)]
