"""The policy's defaults live only in rules/50-policy.yaml (review M11).

- Every number the engine reads from the policy comes from that file: a copy with every value
  changed changes what the compiled ``Policy`` and the core's readers (Engine, ProgressTracker,
  the guards) use.
- No Python value stands in for one the file lacks: a copy without a key is refused at compile
  time (E-POLICY, naming the key), where a fallback in code would have filled it silently.
- No policy default is written in engine/ Python: an AST scan finds no ``.get("<policy key>",
  <number>)`` and no dict literal of policy keys to numbers (as ``DEFAULT_GUARDS``,
  ``HANG_DEFAULTS`` and ``STRAGGLER_DEFAULTS`` were).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

import engine.rulebook as rulebook
from engine.core.incidents import Engine
from engine.core.policy import GuardContext, decide
from engine.rulebook import load_rulebook
from engine.rulebook.spec import GUARDS, POLICY
from engine.store import Store

ROOT = Path(__file__).resolve().parents[2]
(SHIPPED,) = [p for p in rulebook.default_rule_files() if p.name.endswith("-policy.yaml")]

#: every scalar the shipped policy sets, changed (durations in seconds so they compare directly)
CHANGED = {
    "settle": 7.0,
    "cascade": 11.0,
    "distinct_lines": 13,
    "retry": {"max_per_job": 9, "max_per_fingerprint": 8, "window": 17.0, "no_progress_attempts": 6},
    "blast_radius": {"max_drains": 19, "max_fraction": 0.75, "window": 23.0},
    "inhibit": {"drained_nodes": False},
    "isolate": {"drain_retry_for": 29.0},
    "hang": {
        "bound": 31.0,
        "factor": 2.5,
        "min_bound": 37.0,
        "min_samples": 5,
        "require_running": False,
        "any_output": True,
        "fact_ttl": 41.0,
    },
    "straggler": {
        "factor": 3.5,
        "duration": 43.0,
        "min_peers": 4,
        "window": 12,
        "warmup": 7,
        "baseline": 6,
        "slow_points": 5,
    },
}


def _shipped() -> dict:
    return yaml.safe_load(SHIPPED.read_text())


def _load(monkeypatch, tmp_path, doc: dict):
    path = tmp_path / "50-policy.yaml"
    path.write_text(yaml.safe_dump(doc))
    monkeypatch.setattr(rulebook, "policy_files", lambda: [path])
    return load_rulebook([], defaults=False)


def test_the_shipped_file_sets_every_setting_the_engine_reads():
    policy = _shipped()["policy"]
    for key, values in CHANGED.items():
        assert key in policy, key
        if isinstance(values, dict):
            assert set(values) <= set(policy[key]), key
    for guard in ("retry", "blast_radius", "inhibit", "hang", "straggler"):
        # all of them, every one (per_class: the fault classes' own retry budgets, in 05-fault-classes.yaml)
        assert set(policy[guard]) == set(GUARDS[guard].props) - {"per_class"}, guard


def test_changing_the_yaml_changes_what_the_engine_reads(monkeypatch, tmp_path):
    doc = _shipped()
    for key, value in CHANGED.items():
        doc["policy"][key] = {**doc["policy"][key], **value} if isinstance(value, dict) else value
    result = _load(monkeypatch, tmp_path, doc)
    assert result.ok, [str(d) for d in result.errors]
    p = result.compiled.policy
    assert (p.settle, p.cascade, p.distinct_lines) == (7.0, 11.0, 13)
    for guard in ("retry", "blast_radius", "inhibit", "hang", "straggler", "isolate"):
        for key, value in CHANGED[guard].items():
            assert getattr(getattr(p, guard), key) == value, f"{guard}.{key}"

    engine = Engine(result.compiled, Store(":memory:"))
    assert (engine.settle, engine.cascade, engine.fact_ttl) == (7.0, 11.0, 41.0)
    assert engine.memory.distinct_lines == 13
    assert engine.tracker.hang.bound == 31.0 and engine.tracker.straggler.min_peers == 4

    # the retry guard counts against the YAML's budget (9 per job) within the YAML's window (17 s)
    def restarts(n: int) -> list[dict]:
        return [
            {"decision": "restart", "fingerprint": f"x{i}", "fault_class": "x", "closed_at": 100.0} for i in range(n)
        ]

    def decided(n: int, now: float) -> str:
        ctx = GuardContext(job="1", attempt=0, now=now, history=restarts(n))
        return decide(result.compiled, "storage_io_error", (), "r", ctx).decision

    assert (decided(8, 101.0), decided(9, 101.0), decided(9, 118.0)) == ("restart", "stop", "restart")


SETTINGS = [(k, None) for k in ("settle", "cascade", "distinct_lines")] + [
    (g, k)
    for g in ("retry", "blast_radius", "inhibit", "hang", "straggler", "isolate")
    for k in GUARDS[g].props
    if k != "per_class"
]


@pytest.mark.parametrize(("section", "key"), SETTINGS, ids=[f"{s}.{k}" if k else s for s, k in SETTINGS])
def test_a_setting_missing_from_the_yaml_is_an_error_not_a_python_default(monkeypatch, tmp_path, section, key):
    doc = _shipped()
    if key is None:
        del doc["policy"][section]
        name = f"policy.{section}"
    else:
        doc["policy"][section].pop(key, None)
        name = f"policy.{section}.{key}"
    result = _load(monkeypatch, tmp_path, doc)
    # (hang.bound may be null, meaning learned; left out, it is missing like any other key)
    assert not result.ok
    assert any(d.code == "E-POLICY" and name in d.message for d in result.errors), [str(d) for d in result.errors]


_POLICY_WORDS = set(POLICY.keys) | {k for g in GUARDS.values() for k in g.props}


def _numeric(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool)


def _defaults_in(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            args = node.args
            if len(args) == 2 and isinstance(args[0], ast.Constant) and args[0].value in _POLICY_WORDS:
                if _numeric(args[1]):
                    found.append(f"{path.name}:{node.lineno} .get({args[0].value!r}, number)")
        if isinstance(node, ast.Dict):
            named = [
                k.value
                for k, v in zip(node.keys, node.values)
                if isinstance(k, ast.Constant) and k.value in _POLICY_WORDS and _numeric(v)
            ]
            if len(named) >= 2:
                found.append(f"{path.name}:{node.lineno} dict of {named}")
    return found


def test_no_policy_default_is_written_in_python():
    found = [f"{p.parent.name}/{hit}" for p in sorted((ROOT / "engine").rglob("*.py")) for hit in _defaults_in(p)]
    assert found == []


def test_the_scan_sees_a_default_written_in_python(tmp_path):
    """The scan above can fail: it finds both shapes the old defaults had."""
    probe = tmp_path / "probe.py"
    probe.write_text('D = {"max_drains": 4, "window": 3600.0}\nx = {}.get("settle", 120.0)\n')
    assert len(_defaults_in(probe)) == 2
