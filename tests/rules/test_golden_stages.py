"""Golden files for each stage of the rulebook compiler on three small, representative rulebooks
(tests/rules/golden/*.yaml): the layered model, the engine-neutral condition trees, the
durable_rules definition, and the diagnostics. A compiler change shows up here as a diff to
review; to accept one on purpose, run with RECOVER_UPDATE_GOLDEN=1 and read the diff."""

from __future__ import annotations

import dataclasses
import enum
import json
import os
from pathlib import Path
from types import MappingProxyType

import pytest

from engine.core.rete import ReteNetwork
from engine.rulebook import load_rulebook

HERE = Path(__file__).resolve().parent / "golden"
CASES = {
    "single": ["single.yaml"],
    "correlation": ["correlation.yaml"],
    "overlay": ["correlation.yaml", "overlay.yaml"],
}


def plain(obj):
    """JSON-able, deterministic: dataclasses as dicts, marks as line:col, templates as source."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        if type(obj).__name__ == "Mark":
            return f"{Path(obj.file).name}:{obj.line}:{obj.col}"
        return {"_": type(obj).__name__} | {f.name: plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (dict, MappingProxyType)):
        return {str(k): plain(v) for k, v in sorted(obj.items(), key=lambda kv: str(kv[0]))}
    if isinstance(obj, (list, tuple)):
        return [plain(v) for v in obj]
    if isinstance(obj, (set, frozenset)):
        return sorted(plain(v) for v in obj)
    if isinstance(obj, enum.Enum):
        return obj.value
    if hasattr(obj, "source") and type(obj).__name__.endswith("Template"):
        return {"template": obj.source}
    if isinstance(obj, (str, int, float, bool)) or obj is None:
        return obj
    return repr(obj)


def stages(files: list[str]) -> dict[str, object]:
    result = load_rulebook([str(HERE / f) for f in files], defaults=False)
    assert result.ok, [str(d) for d in result.errors]
    c = result.compiled
    book = c.book
    return {
        "model": plain(
            {
                "fault_classes": book.fault_classes,
                "lists": book.lists,
                "macros": book.macros,
                "matchers": book.matchers,
                "rules": book.rules,
                "policy": book.policy,
            }
        ),
        "trees": {cr.rule.id: plain(cr.trees) for cr in c.rules},
        "rete": json.loads(ReteNetwork(c).definition_json()),
        "diagnostics": sorted(str(d).replace(str(HERE) + "/", "") for d in result.diagnostics),
    }


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_stage_matches_its_golden_file(name):
    got = stages(CASES[name])
    for stage, value in got.items():
        path = HERE / f"{name}.{stage}.json"
        text = json.dumps(value, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
        if os.environ.get("RECOVER_UPDATE_GOLDEN"):
            path.write_text(text)
        assert path.exists(), f"{path.name} missing: run with RECOVER_UPDATE_GOLDEN=1 to write it"
        assert path.read_text() == text, f"{name}: stage {stage} differs from {path.name}"


def test_the_overlay_changes_what_it_says_and_nothing_else():
    base, site = stages(CASES["correlation"]), stages(CASES["overlay"])
    assert base["trees"].keys() - site["trees"].keys() == {"symptom.feeder"}  # disabled
    changed = {k for k in base["trees"] if k in site["trees"] and base["trees"][k] != site["trees"][k]}
    assert changed == {"symptom.widget"}  # its list grew by one code
    assert site["model"]["lists"]["bad_codes"] != base["model"]["lists"]["bad_codes"]


def test_policy_durations_are_parsed_once_by_the_compiler(tmp_path):
    site = tmp_path / "site.yaml"
    site.write_text(
        "policy:\n  settle: 90s\n  cascade: 20m\n  retry: {window: 2h}\n  blast_radius: {window: 30m}\n"
        "  isolate: {drain_retry_for: 5m}\n  hang: {min_bound: 10m}\n  straggler: {duration: 1m}\n"
    )
    policy = load_rulebook([str(site)]).compiled.policy
    assert (policy["settle"], policy["cascade"]) == (90.0, 1200.0)
    assert policy["retry"]["window"] == 7200.0 and policy["blast_radius"]["window"] == 1800.0
    assert policy["isolate"]["drain_retry_for"] == 300.0
    assert policy["hang"]["min_bound"] == 600.0 and policy["straggler"]["duration"] == 60.0
    core = Path(__file__).resolve().parents[2] / "engine" / "core"
    assert not [p.name for p in core.glob("*.py") if "parse_duration" in p.read_text()]  # the core reads numbers


def test_the_core_never_reads_the_wall_clock():
    core = Path(__file__).resolve().parents[2] / "engine" / "core"
    readers = [
        p.name
        for p in core.glob("*.py")
        if any(c in p.read_text() for c in ("time.time(", "time.monotonic(", "datetime.now("))
    ]
    assert not readers, f"engine/core must take time from its facts: {readers}"
