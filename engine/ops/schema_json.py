"""JSON Schema (draft 2020-12) of one rulebook file, for editors and CI linters.

Derived from the tables the validator itself uses (``SECTION_KEYS``, ``ITEM_KEYS``, the fault
classes, decisions, sources, emit kinds, where-clause operators, the duration syntax), so the
two cannot drift apart silently; ``tests/ops/test_schema.py`` checks every shipped rulebook
against it. The validator stays the authority: the schema cannot express cross-file rules
(layering, references, regex and template compilation).

Usage::

    schema = rulebook_schema()
    json.dumps(schema, indent=2)      # what `recover rules schema` prints

A YAML file opts in with a modeline that the YAML language server reads::

    # yaml-language-server: $schema=recover-rulebook.schema.json
"""

from __future__ import annotations

import logging
from typing import Any

from engine.core.policy import DEFAULT_GUARDS
from engine.core.progress import HANG_DEFAULTS, STRAGGLER_DEFAULTS
from engine.rulebook import schema as _validator
from engine.rulebook.conditions import OPS
from engine.rulebook.model import DECISIONS, EMITS, SOURCES

logger = logging.getLogger(__name__)

__all__ = ["rulebook_schema", "SCHEMA_ID"]

SCHEMA_ID = "https://recover.invalid/schemas/rulebook.schema.json"

# Tables private to the validator; read from it so a change there changes the schema too.
_FACT_KINDS = tuple(_validator._FACT_KINDS_FOR_RULES)
_TYPES = tuple(_validator._TYPES)
_RESERVED = tuple(_validator._RESERVED_ATTRS)
_ID = _validator._ID_RE.pattern
_ALIAS = _validator._ALIAS_RE.pattern
_DURATION = _validator._DUR_RE.pattern
# Expectation keys of an embedded test (written inline in the validator's test checker).
_EXPECT_KEYS = _validator.ITEM_KEYS["expectation"]


def _shipped_fault_classes() -> list[str]:
    """The shipped class names, as examples: a site may declare more, so they are not an enum."""
    import yaml

    from engine.rulebook import fault_class_files

    names: list[str] = []
    for path in fault_class_files():
        names.extend((yaml.safe_load(path.read_text()) or {}).get("fault_classes", {}) or {})
    return names


_AUTONOMY = ("observe", "recommend", "act")
_ORDERED_OPS = ("gt", "ge", "lt", "le")

_SCALAR = {"type": ["string", "number", "integer", "boolean"]}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/$defs/{name}"}


def _object(keys: tuple[str, ...], props: dict[str, Any], what: str, **extra: Any) -> dict[str, Any]:
    """A closed object whose allowed keys are exactly ``keys`` (the validator's table)."""
    missing = [k for k in keys if k not in props]
    if missing:  # a key the validator accepts must never be rejected by the schema
        raise AssertionError(f"schema for {what} lacks {missing}")
    return {
        "type": "object",
        "description": what,
        "properties": {k: props[k] for k in keys},
        "additionalProperties": False,
        **extra,
    }


def _override(fields: tuple[str, ...]) -> dict[str, Any]:
    return {
        "description": "This item changes one an earlier file defined: true (replace the fields given) or "
        "field -> replace|append.",
        "oneOf": [
            {"const": True},
            {"const": "replace"},
            {
                "type": "object",
                "propertyNames": {"enum": list(fields)},
                "additionalProperties": {"enum": ["replace", "append"]},
            },
        ],
    }


def _op_tests() -> list[dict[str, Any]]:
    """One single-key object per where-clause operator."""
    out = []
    for op in OPS:
        if op in ("in", "not_in"):
            arg: dict[str, Any] = {
                "oneOf": [
                    {"type": "array", "items": _SCALAR},
                    {"type": "string", "pattern": "^@", "description": 'a list reference, e.g. "@fatal_xids"'},
                ]
            }
        elif op == "exists":
            arg = {"type": "boolean"}
        elif op in _ORDERED_OPS:
            arg = {"type": "number"}
        else:
            arg = _SCALAR
        out.append({"type": "object", "properties": {op: arg}, "required": [op], "additionalProperties": False})
    out.append(
        {
            "type": "object",
            "properties": {
                "same": {
                    "type": "string",
                    "pattern": r"^[A-Za-z_][A-Za-z0-9_]*\.[^.]+$",
                    "description": "ALIAS.attr of an earlier condition",
                }
            },
            "required": ["same"],
            "additionalProperties": False,
        }
    )
    return out


def _guard(name: str, defaults: dict[str, Any], description: str) -> dict[str, Any]:
    kinds = {
        "int": {"type": "integer", "minimum": 0},
        "num": {"type": "number", "minimum": 0},
        "bool": {"type": "boolean"},
        "dur": {"anyOf": [_ref("duration"), {"type": "null"}]},
        "autonomy": {"enum": list(_AUTONOMY)},
        "class_ints": {
            "type": "object",
            "propertyNames": {"pattern": _ID},
            "additionalProperties": {"type": "integer", "minimum": 0},
        },
    }
    props: dict[str, Any] = {}
    for key, kind in _validator.GUARD_KEYS[name].items():  # every key the validator accepts, and no other
        props[key] = dict(kinds[kind])
        if defaults.get(key) is not None and not isinstance(defaults.get(key), (dict, list, tuple, frozenset)):
            props[key]["default"] = defaults[key]
    return {"type": "object", "description": description, "properties": props, "additionalProperties": False}


def rulebook_schema() -> dict[str, Any]:
    """The JSON Schema of one rulebook file."""
    keys = _validator.ITEM_KEYS
    fault_class = {
        "type": "string",
        "pattern": _ID,
        "examples": _shipped_fault_classes(),
        "description": "A fault class declared under fault_classes: (shipped or the site's own).",
    }
    then_value = {"anyOf": [_SCALAR, {"type": "array", "items": _SCALAR}, {"type": "null"}]}

    matcher = _object(
        keys["matcher"],
        {
            "id": {"type": "string", "pattern": _ID, "description": "Unique; a later file overrides it by this id."},
            "description": {"type": "string"},
            "source": {
                "oneOf": [{"enum": list(SOURCES)}, {"type": "array", "items": {"enum": list(SOURCES)}, "minItems": 1}]
            },
            "pattern": {"type": "string", "description": "RE2 syntax; named groups become fact attributes."},
            "ignore_case": {"type": "boolean"},
            "emit": {"enum": list(EMITS), "default": "log"},
            "attrs": {
                "type": "object",
                "propertyNames": {"not": {"enum": list(_RESERVED)}},
                "additionalProperties": _SCALAR,
            },
            "types": {"type": "object", "additionalProperties": {"enum": list(_TYPES)}},
            "sample": {"type": "boolean", "description": "Only the last hit per read chunk (heartbeats)."},
            "enabled": {"type": "boolean"},
            "override": _override(keys["matcher"]),
        },
        "A matcher: a regex over log lines and the fact it emits.",
        required=["id"],
        anyOf=[{"required": ["pattern"]}, {"required": ["override"]}],
    )

    condition = _object(
        keys["condition"],
        {
            "as": {"type": "string", "pattern": _ALIAS, "description": "Alias for later conditions and templates."},
            "kind": {"enum": list(_FACT_KINDS)},
            "where": {"anyOf": [_ref("where"), {"type": "null"}]},
            "absent_for": _ref("duration"),
        },
        "One condition: a fact of this kind whose attributes pass the where-clause.",
        required=["kind"],
    )

    symptom = {
        "type": "object",
        "required": ["name"],
        "properties": {
            "name": {"type": "string"},
            "severity": {"enum": ["fatal", "error", "warning"], "default": "error"},
        },
        "propertyNames": {"not": {"enum": list(_RESERVED)}},
        "additionalProperties": then_value,
    }
    fault = {
        "type": "object",
        "required": ["fault_class"],
        "properties": {
            "fault_class": fault_class,
            "nodes": {"type": "array", "items": {"type": "string"}},
            "priority": {"type": "integer"},
            "reason": {"type": "string"},
        },
        "propertyNames": {"not": {"enum": list(_RESERVED)}},
        "additionalProperties": then_value,
    }
    rule = _object(
        keys["rule"],
        {
            "id": {"type": "string", "pattern": _ID},
            "description": {"type": "string"},
            "when": {"type": "array", "items": _ref("condition"), "minItems": 1},
            "join": {"type": "array", "items": {"type": "string"}},
            "within": _ref("duration"),
            "for": _ref("duration"),
            "then": {
                "type": "object",
                "properties": {"symptom": symptom, "fault": fault},
                "additionalProperties": False,
                "minProperties": 1,
                "maxProperties": 1,
            },
            "enabled": {"type": "boolean"},
            "override": _override(keys["rule"]),
        },
        "A rule: conditions over facts, and the symptom or fault it derives.",
        required=["id"],
        anyOf=[{"required": ["description", "when", "then"]}, {"required": ["override"]}],
    )

    action = _object(
        keys["action"],
        {
            "argv": {
                "type": "array",
                "items": {"type": ["string", "integer"]},
                "minItems": 1,
                "description": "One Jinja template per argument; run without a shell.",
            },
            "scheduler": {"type": "string", "default": "slurm"},
            "per": {"enum": ["job", "node"], "default": "job"},
            "verify": {"type": "string"},
            "timeout": _ref("duration"),
            "description": {"type": "string"},
            "override": _override(keys["action"]),
        },
        "A command template.",
        anyOf=[{"required": ["argv"]}, {"required": ["override"]}],
    )

    policy_props: dict[str, Any] = {
        "settle": _ref("duration"),
        "distinct_lines": {
            "type": "integer",
            "minimum": 1,
            "description": "Different lines of one matcher one job attempt holds in the rule engine; "
            "more are counted on the last one held.",
        },
        "decisions": {
            "type": "object",
            "propertyNames": {"pattern": _ID},
            "additionalProperties": {"enum": list(DECISIONS)},
        },
        "plans": {
            "type": "object",
            "propertyNames": {"enum": list(DECISIONS)},
            "additionalProperties": {"type": "array", "items": {"type": "string"}},
        },
        "priorities": {
            "type": "object",
            "propertyNames": {"pattern": _ID},
            "additionalProperties": {"type": "integer"},
        },
        "retry": _guard("retry", dict(DEFAULT_GUARDS["retry"]), "Restart budgets per job and per root cause."),
        "blast_radius": _guard(
            "blast_radius", dict(DEFAULT_GUARDS["blast_radius"]), "At most this many drains in a window."
        ),
        "autonomy": {
            "type": "object",
            "description": "Per decision kind, per action (cancel) and per fault class (classes): "
            "observe | recommend | act; a class not named under classes recommends.",
            "properties": {
                **{k: {"enum": list(_AUTONOMY)} for k in list(DECISIONS) + ["cancel"]},
                "classes": {
                    "type": "object",
                    "propertyNames": {"pattern": _ID},
                    "additionalProperties": {"enum": list(_AUTONOMY)},
                },
            },
            "additionalProperties": False,
        },
        "inhibit": _guard("inhibit", dict(DEFAULT_GUARDS["inhibit"]), "Nodes already drained are not drained again."),
        "isolate": {
            "type": "object",
            "description": "Fatal node hardware drained and requeued at once; drain retries.",
            "properties": {
                "at_once": {"type": "array", "items": {"type": "string", "pattern": _ID}},
                "drain_retry_for": {"anyOf": [{"type": "number"}, _ref("duration")], "default": 600.0},
            },
            "additionalProperties": False,
        },
        "hang": _guard("hang", dict(HANG_DEFAULTS), "Hang detection: no progress for longer than the bound."),
        "straggler": _guard("straggler", dict(STRAGGLER_DEFAULTS), "Straggler detection from per-node step times."),
    }
    for key in keys["policy"]:
        policy_props.setdefault(key, {"type": "object"})
    policy = _object(keys["policy"], policy_props, "Decisions, plans and the guards between them.")

    test_input = _object(
        keys["input"],
        {
            "file": {"type": "string", "description": "A file name as replay sees it (the job id may come from it)."},
            "source": {"enum": list(SOURCES)},
            "lines": {"type": "string"},
        },
        "Log lines fed to the pipeline.",
        required=["lines"],
    )
    expectation = _object(
        _EXPECT_KEYS,
        {
            "fault_class": fault_class,
            "decision": {"enum": list(DECISIONS)},
            "nodes": {"type": "array", "items": {"type": "string"}},
            "rules": {"type": "array", "items": {"type": "string"}},
            "not_rules": {"type": "array", "items": {"type": "string"}},
            "job": {"type": ["string", "integer"]},
            "attempt": {"type": "integer"},
            "commands": {"type": "array", "items": {"type": "array", "items": {"type": "string"}}},
        },
        "One incident the test expects.",
    )
    test = _object(
        keys["test"],
        {
            "name": {"type": "string", "description": "Unique; a later file supersedes it with override: true."},
            "description": {"type": "string"},
            "enabled": {"type": "boolean", "description": "false (with override: true) disables a shipped test."},
            "override": {
                "enum": [True, "replace"],
                "description": "This test replaces an earlier one of the same name.",
            },
            "input": {"type": "array", "items": test_input},
            "context": {"type": "object", "description": "What the scheduler would say: job, attempt, nodes."},
            "facts": {"type": "array", "items": {"type": "object"}},
            "expect": {"type": "array", "items": expectation, "description": "[] means: nothing may fire."},
        },
        "An embedded test.",
        required=["name"],
        anyOf=[{"required": ["expect"]}, {"required": ["override"]}],
    )
    fault_class_def = _object(
        keys["fault_class"],
        {
            "description": {"type": "string"},
            "decision": {"enum": list(DECISIONS), "description": "The default decision for this class."},
            "priority": {
                "type": "integer",
                "description": "The highest priority in an incident wins; root causes above their cascade.",
            },
            "retry": {
                "type": "integer",
                "minimum": 0,
                "description": "At most this many restarts of one job for this class per retry window.",
            },
            "plan": {
                "type": "array",
                "items": {"type": "string"},
                "description": "The actions this class's decision runs, instead of policy.plans of its decision.",
            },
            "override": _override(keys["fault_class"]),
        },
        "A fault class.",
        anyOf=[{"required": ["description", "decision", "priority"]}, {"required": ["override"]}],
    )

    list_def = {
        "oneOf": [
            {"type": "array", "items": _SCALAR},
            {
                "type": "object",
                "properties": {
                    "items": {"type": "array", "items": _SCALAR},
                    "override": {"enum": ["replace", "append"]},
                },
                "additionalProperties": False,
            },
        ]
    }
    where = {
        "type": "object",
        "description": "attribute -> test; all must hold. any: [...] (one must hold), macro: NAME.",
        "properties": {
            "any": {"type": "array", "items": {"$ref": "#/$defs/where"}, "minItems": 1},
            "macro": {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]},
        },
        "additionalProperties": {"oneOf": [_SCALAR, *_op_tests()]},
    }
    sections = {
        "fault_classes": {
            "type": "object",
            "propertyNames": {"pattern": _ID},
            "additionalProperties": _ref("fault_class"),
        },
        "lists": {"type": "object", "propertyNames": {"pattern": _ID}, "additionalProperties": list_def},
        "macros": {
            "type": "object",
            "additionalProperties": {
                "oneOf": [
                    {
                        "type": "object",
                        "properties": {"where": _ref("where"), "override": {"enum": [True, "replace"]}},
                        "required": ["where"],
                        "additionalProperties": False,
                    },
                    _ref("where"),
                ]
            },
        },
        "matchers": {"type": "array", "items": _ref("matcher")},
        "rules": {"type": "array", "items": _ref("rule")},
        "actions": {"type": "object", "propertyNames": {"pattern": _ID}, "additionalProperties": _ref("action")},
        "policy": _ref("policy"),
        "tests": {"type": "array", "items": _ref("test")},
    }
    top = _object(_validator.SECTION_KEYS, sections, "One Recover rulebook file (see docs/rulebook.md).")
    top["type"] = ["object", "null"]  # an empty file is a valid (empty) rulebook
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "Recover rulebook",
        **{k: v for k, v in top.items() if k != "description"},
        "description": top["description"],
        "$defs": {
            "duration": {
                "description": "Seconds, or e.g. 90s, 10m, 1h30m, 250ms.",
                "anyOf": [
                    {"type": "number", "minimum": 0},
                    {"type": "string", "allOf": [{"pattern": _DURATION}, {"pattern": r"\d"}]},
                ],
            },
            "where": where,
            "condition": condition,
            "matcher": matcher,
            "rule": rule,
            "action": action,
            "policy": policy,
            "test": test,
            "fault_class": fault_class_def,
        },
    }
