"""The validator and the JSON schema are generated from one spec (engine/rulebook/spec.py); this
checks they agree, key by key and type by type, in both directions:

- every key the validator's tables accept is a property of the schema at the same place, and
  the schema has no property the validator would refuse as unknown;
- for each policy guard setting, a value of its declared type is accepted by both, and a value
  of another type is refused by both (so "same type" is checked by behaviour, not by name).

A key added to one side only (a hand-written table entry in the validator, a hand-edited schema
fragment) fails here."""

from __future__ import annotations

import json

import pytest
from jsonschema import Draft202012Validator

from engine.ops.schema_json import rulebook_schema
from engine.rulebook import spec
from engine.rulebook.schema import GUARD_KEYS, ITEM_KEYS, SECTION_KEYS, check_file
from engine.rulebook.yamlmarks import load_marked

SCHEMA = rulebook_schema()
DEFS = SCHEMA["$defs"]
#: where each validator table's item lives in the schema
PLACES = {
    "matcher": DEFS["matcher"],
    "rule": DEFS["rule"],
    "condition": DEFS["condition"],
    "action": DEFS["action"],
    "test": DEFS["test"],
    "input": DEFS["test_input"],
    "expectation": DEFS["expectation"],
    "fault_class": DEFS["fault_class"],
    "policy": DEFS["policy"],
}


def validator_keys() -> set[tuple[str, ...]]:
    out = {("file", k) for k in SECTION_KEYS}
    out |= {(item, k) for item, keys in ITEM_KEYS.items() for k in keys}
    out |= {("policy", g, k) for g, keys in GUARD_KEYS.items() for k in keys}
    return out


def schema_keys(schema: dict) -> set[tuple[str, ...]]:
    defs = schema["$defs"]
    places = {item: defs[name] for item, name in _DEF_NAMES.items()}
    out = {("file", k) for k in schema["properties"]}
    out |= {(item, k) for item, d in places.items() for k in d["properties"]}
    for g in GUARD_KEYS:
        out |= {("policy", g, k) for k in defs["policy"]["properties"][g]["properties"]}
    return out


_DEF_NAMES = {
    "matcher": "matcher",
    "rule": "rule",
    "condition": "condition",
    "action": "action",
    "test": "test",
    "input": "test_input",
    "expectation": "expectation",
    "fault_class": "fault_class",
    "policy": "policy",
}


def test_every_validator_key_is_in_the_schema_and_back():
    assert set(ITEM_KEYS) == set(_DEF_NAMES), "a validator table without a place in the schema"
    assert validator_keys() == schema_keys(SCHEMA)
    for item, d in PLACES.items():  # closed at every level: the schema refuses what the validator does
        assert d["additionalProperties"] is False, item
    assert SCHEMA["additionalProperties"] is False


def test_the_agreement_check_sees_a_key_on_one_side_only(monkeypatch):
    """The check above can fail: a key the validator gains alone, or the schema gains alone."""
    monkeypatch.setitem(GUARD_KEYS, "retry", {**GUARD_KEYS["retry"], "max_per_node": spec.Int()})
    assert validator_keys() != schema_keys(SCHEMA)
    monkeypatch.undo()
    grown = rulebook_schema()
    grown["$defs"]["policy"]["properties"]["hang"]["properties"]["max_hangs"] = {"type": "integer"}
    assert validator_keys() != schema_keys(grown)


def validator_errors(tmp_path, text: str) -> list[str]:
    path = tmp_path / "r.yaml"
    path.write_text(text)
    tree, problems = load_marked(text, str(path))
    assert not problems
    _, diags = check_file(tree, str(path))
    return [f"{d.code} {d.message}" for d in diags if d.severity == "error"]


def schema_errors(doc) -> list[str]:
    return [e.message for e in Draft202012Validator(SCHEMA).iter_errors(doc)]


#: one value of each declared type, and one of another type
GOOD = {spec.Int: 3, spec.Num: 0.5, spec.Bool: True, spec.Dur: "90s", spec.ListOf: ["gpu_fell_off_bus"]}
BAD = {spec.Int: "three", spec.Num: "half", spec.Bool: "yes", spec.Dur: "ten minutes", spec.ListOf: "gpu"}


def _values(kind: spec.Type) -> tuple[object, object]:
    if isinstance(kind, spec.Enum):
        return kind.values[-1], "sometimes"
    if isinstance(kind, spec.MapOf):
        good, bad = _values(kind.value)
        return {"gpu_fell_off_bus": good}, {"gpu_fell_off_bus": bad}
    return GOOD[type(kind)], BAD[type(kind)]


CASES = [(g, k) for g, keys in GUARD_KEYS.items() for k in keys]


@pytest.mark.parametrize(("guard", "key"), CASES, ids=[f"{g}.{k}" for g, k in CASES])
def test_each_guard_setting_has_the_same_type_on_both_sides(tmp_path, guard, key):
    good, bad = _values(GUARD_KEYS[guard][key])
    for value, accepted in ((good, True), (bad, False)):
        doc = {"policy": {guard: {key: value}}}
        text = json.dumps(doc)  # JSON is YAML
        v, s = validator_errors(tmp_path, text), schema_errors(doc)
        assert (not v) == accepted, (value, v)
        assert (not s) == accepted, (value, s)


SCALAR_POLICY = [k for k, t in spec.POLICY.props.items() if isinstance(t, (spec.Dur, spec.Int))]


@pytest.mark.parametrize("key", SCALAR_POLICY)
def test_each_scalar_policy_key_has_the_same_type_on_both_sides(tmp_path, key):
    """settle, cascade, distinct_lines: the hand-written schema once typed cascade as an object."""
    good, bad = _values(spec.POLICY.props[key])
    for value, accepted in ((good, True), (bad, False)):
        doc = {"policy": {key: value}}
        v, s = validator_errors(tmp_path, json.dumps(doc)), schema_errors(doc)
        assert (not v) == accepted, (value, v)
        assert (not s) == accepted, (value, s)
