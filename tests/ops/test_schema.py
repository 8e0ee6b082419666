"""`recover rules schema`: a JSON Schema (draft 2020-12) that every shipped rulebook satisfies and
that rejects what the validator rejects on its own (unknown keys, bad enums, bad durations)."""

from __future__ import annotations

import json
import textwrap

import pytest
import yaml
from jsonschema import Draft7Validator, Draft202012Validator
from typer.testing import CliRunner

from engine.cli import app
from engine.rulebook import default_rule_files
from engine.rulebook.model import DECISIONS, SOURCES
from engine.rulebook.schema import GUARD_KEYS, ITEM_KEYS, SECTION_KEYS
from engine.ops.schema_json import rulebook_schema

SCHEMA = rulebook_schema()
SHIPPED = default_rule_files()


def errors(doc, validator=Draft202012Validator):
    return sorted(validator(SCHEMA).iter_errors(doc), key=lambda e: list(e.absolute_path))


def test_schema_is_valid_draft_2020_12():
    assert SCHEMA["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    Draft202012Validator.check_schema(SCHEMA)
    Draft7Validator.check_schema(SCHEMA)  # editors that only know draft-7 can read it too


def test_shipped_rulebooks_exist():
    assert len(SHIPPED) >= 5


@pytest.mark.parametrize("path", SHIPPED, ids=[p.name for p in SHIPPED])
def test_every_shipped_rulebook_validates(path):
    doc = yaml.safe_load(path.read_text())
    problems = [f"{'/'.join(map(str, e.absolute_path))}: {e.message[:200]}" for e in errors(doc)]
    assert problems == []
    assert [e.message for e in errors(doc, Draft7Validator)] == []


def test_schema_is_derived_from_the_validator_tables():
    defs = SCHEMA["$defs"]
    assert set(SCHEMA["properties"]) == set(SECTION_KEYS)
    for item in ("matcher", "rule", "condition", "action", "test", "policy"):
        assert set(defs[item]["properties"]) == set(ITEM_KEYS[item]), item
    assert set(defs["fault_class"]["properties"]) == set(ITEM_KEYS["fault_class"])
    for guard, keys in GUARD_KEYS.items():
        spec = defs["policy"]["properties"][guard]
        allowed = spec["properties"] if "properties" in spec else spec["propertyNames"]["enum"]
        assert set(allowed) == set(keys), guard
    assert defs["policy"]["properties"]["decisions"]["additionalProperties"]["enum"] == list(DECISIONS)
    assert defs["matcher"]["properties"]["source"]["oneOf"][0]["enum"] == list(SOURCES)


BAD = {
    "unknown top-level key": ("rulez: []", "rulez"),
    "unknown matcher key": ("matchers: [{id: m, pattern: x, patern: y}]", "patern"),
    "matcher without pattern": ("matchers: [{id: m}]", "pattern"),
    "bad source": ("matchers: [{id: m, pattern: x, source: journal}]", "journal"),
    "bad emit": ("matchers: [{id: m, pattern: x, emit: metric}]", "metric"),
    "bad type": ("matchers: [{id: m, pattern: x, types: {n: long}}]", "long"),
    "misspelled guard setting": ("policy: {retry: {max_per_fingreprint: 2}}", "max_per_fingreprint"),
    "fault class without priority": ("fault_classes: {ib_link_flap: {description: d, decision: restart}}", "priority"),
    "two then kinds": (
        """
        rules:
          - id: r
            description: d
            when: [{kind: log}]
            then: {fault: {fault_class: unknown}, symptom: {name: s}}""",
        "then",
    ),
    "bad duration": (
        """
        rules:
          - id: r
            description: d
            within: ten minutes
            when: [{kind: log}]
            then: {symptom: {name: s}}""",
        "ten minutes",
    ),
    "unknown operator": (
        """
        rules:
          - id: r
            description: d
            when: [{kind: log, where: {code: {between: [1, 2]}}}]
            then: {symptom: {name: s}}""",
        "between",
    ),
    "ordered test on text": (
        """
        rules:
          - id: r
            description: d
            when: [{kind: log, where: {code: {gt: "5"}}}]
            then: {symptom: {name: s}}""",
        "gt",
    ),
    "bad decision": ("policy: {decisions: {cuda_oom: retry}}", "retry"),
    "bad autonomy": ("policy: {autonomy: {restart: yes-please}}", "yes-please"),
    "bad per": ("actions: {drain: {argv: [scontrol], per: cluster}}", "cluster"),
    "test without expect": ("tests: [{name: t}]", "expect"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_schema_rejects(case):
    text, needle = BAD[case]
    doc = yaml.safe_load(textwrap.dedent(text))
    found = errors(doc)
    assert found, f"{case}: accepted"
    assert any(
        needle in json.dumps(e.instance) or needle in e.message or needle in map(str, e.absolute_path)
        for e in [*found, *(c for e in found for c in (e.context or []))]
    ), [e.message for e in found]


def test_schema_accepts_the_documented_forms():
    doc = yaml.safe_load(
        textwrap.dedent("""
        lists: {fatal: [48, 79], more: {items: [63], override: append}}
        macros: {hw: {name: {in: "@fatal"}}, hw2: {where: {name: x}, override: true}}
        matchers:
          - {id: m, pattern: 'x', source: [job, kernel], emit: xid, types: {code: int}, sample: false}
          - {id: m2, override: {pattern: replace}}
        rules:
          - id: r
            description: d
            join: [job]
            within: 10m
            for: 90s
            when:
              - {as: x, kind: xid, where: {code: {in: "@fatal"}, node: {exists: true}, any: [{a: 1}, {b: {ne: 2}}]}}
              - {as: y, kind: log, where: {node: {same: x.node}, macro: hw}, absent_for: 1h30m}
            then: {fault: {fault_class: gpu_fell_off_bus, nodes: ["{{ x.node }}"], priority: 3, extra: [a, b]}}
          - {id: r2, override: {when: append}, when: [{kind: log}]}
        actions: {drain: {argv: [scontrol, "{{ node }}"], per: node, timeout: 30s, verify: node_drained}}
        policy: {settle: 2m, blast_radius: {max_drains: 2, window: 1h}, autonomy: {restart: act}, hang: {bound: 15m}}
        tests: [{name: t, input: [{file: a.out, source: job, lines: "x\\n"}], context: {job: "1"}, expect: []}]
        """)
    )
    assert [e.message for e in errors(doc)] == []
    assert errors(None) == []  # an empty file


def test_cli_prints_and_writes_the_schema(tmp_path):
    r = CliRunner().invoke(app, ["rules", "schema"])
    assert r.exit_code == 0
    assert json.loads(r.stdout) == SCHEMA
    out = tmp_path / "recover-rulebook.schema.json"
    r = CliRunner().invoke(app, ["rules", "schema", "-o", str(out)])
    assert r.exit_code == 0 and json.loads(out.read_text()) == SCHEMA
    r = CliRunner().invoke(app, ["rules", "schema", "-o", str(tmp_path / "no" / "such" / "dir.json")])
    assert r.exit_code == 2
