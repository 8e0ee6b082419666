"""The rulebook's keys and their types, declared once.

Every key a rulebook file may hold, and the type of its value, is written here as a tree of
small type objects (``Obj``, ``Int``, ``Dur``, ``Enum``..., in ``spec_types.py``). Two things are generated from it:

- the validator's tables (``schema.SECTION_KEYS``, ``ITEM_KEYS``, ``GUARD_KEYS``), so an unknown
  key is refused and a policy guard's setting is type-checked by its declared type;
- the JSON Schema that ``recover rules schema`` prints (``json_schema``), for editors and CI.

A key added here is accepted by both; a key only one of them knows is caught by
``tests/rules/test_spec_agreement.py``. The validator stays the authority on what a schema cannot
say: cross-file references, layering, regex and template compilation.
"""

from __future__ import annotations

from typing import Any, Mapping

from engine.facts import DECISIONS, SOURCE_KIND_ORDER
from engine.rulebook.conditions import OPS
from engine.rulebook.model import ACTION_KINDS, EMITS, SOURCES
from engine.rulebook.policy_model import SCOPE_MODES
from engine.rulebook.spec_types import (
    ALIAS_PATTERN,
    DUR_PATTERN,
    ID_PATTERN,
    SCALAR,
    Bool,
    Dur,
    Enum,
    Int,
    ListOf,
    MapOf,
    Num,
    Obj,
    Override,
    Raw,
    Str,
    Type,
    parse_duration,
    ref,
)

__all__ = [
    "Type",
    "Int",
    "Num",
    "Bool",
    "Str",
    "Dur",
    "Enum",
    "ListOf",
    "MapOf",
    "Obj",
    "Raw",
    "Override",
    "FILE",
    "ITEMS",
    "POLICY",
    "GUARDS",
    "json_schema",
    "parse_duration",
]

#: what a rule condition may name: what sources produce, and what rules derive before decisions
FACT_KINDS_FOR_RULES = (*SOURCE_KIND_ORDER, "symptom", "fault")
RESERVED_ATTRS = ("kind", "at", "id", "origin")
#: the group the scan sets on an ending line that a specific matcher also read
#: (engine.core.logend); a pattern may not name a group so, or log text could set it
READ_BY = "read_by"
ATTR_TYPES = ("int", "float", "str")
AUTONOMY = ("observe", "recommend", "act")
_ORDERED_OPS = ("gt", "ge", "lt", "le")


# -- the spec -------------------------------------------------------------------------------------

_MODE = Enum(values=AUTONOMY, want_text="observe, recommend or act")
_SCOPE_MODE = Enum(values=SCOPE_MODES, want_text="act, recommend or ignore")
#: a Slurm partition name, as a site writes it in policy.scope.partitions
PARTITION_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,63}$"
_NAME = Str(pattern=ID_PATTERN)
_CLASS_NAMES = ListOf(item=_NAME, want_text="a list of fault class names")


def _guard(description: str, **props: Type) -> Obj:
    return Obj(description=description, props=props)


#: the policy guards: mappings whose settings are checked by their declared type alone (what is
#: not declared is read by nothing, so it is an error rather than a silent no-op)
GUARDS: Mapping[str, Obj] = {
    "retry": _guard(
        "Restart budgets per job and per root cause.",
        max_per_job=Int(),
        max_per_fingerprint=Int(),
        window=Dur(),
        no_progress_attempts=Int(),
        per_class=MapOf(  # fault class -> restarts; the names are checked after layering
            keys=_NAME, value=Int(), want_text="a mapping of fault class -> whole number >= 0"
        ),
    ),
    "blast_radius": _guard(
        "At most this many drains, and requeues, in a window.",
        max_drains=Int(),
        max_fraction=Num(),
        max_requeues=Int(),
        window=Dur(),
    ),
    # per decision kind, per action where one needs its own (cancel), and per fault class
    # (classes: a class acts only where it is granted here as well as its decision kind)
    "autonomy": _guard(
        "Per decision kind, per action (cancel) and per fault class (classes): "
        "observe | recommend | act; a class not named under classes recommends.",
        **dict.fromkeys(DECISIONS, _MODE),
        cancel=_MODE,
        drain_suspect=_MODE,
        classes=MapOf(
            keys=_NAME, value=_MODE, want_text="a mapping of fault class -> observe, recommend or act", per_entry=True
        ),
    ),
    "inhibit": _guard("Nodes already drained are not drained again.", drained_nodes=Bool()),
    "hang": _guard(
        "Hang detection: no progress for longer than the bound.",
        bound=Dur(nullable=True),  # null: learn the bound from the job's own progress intervals
        factor=Num(),
        min_bound=Dur(),
        min_samples=Int(),
        require_running=Bool(),
        any_output=Bool(),
        fact_ttl=Dur(),
    ),
    "straggler": _guard(
        "Straggler detection from per-node step times.",
        factor=Num(),
        duration=Dur(),
        min_peers=Int(),
        window=Int(),
        warmup=Int(),
        baseline=Int(),
        slow_points=Int(),
        table_factor=Num(),
        table_min_peers=Int(),
    ),
    "suspects": _guard(
        "Suspects of a collective timeout (ranks the evidence points at): excluded from the "
        "restart; a node that is a suspect of failed attempts of different jobs, repeatedly, is "
        "drained for diagnosis (its own autonomy: autonomy.drain_suspect).",
        classes=_CLASS_NAMES,
        max_silent=Num(),
        exclude=Bool(),
        drain_after=Int(),
        window=Dur(),
    ),
    "shared_outage": _guard(
        "Many jobs of different users failing with the same class within a short window are one "
        "shared outage: one incident, one page, the jobs' requeues held until it ends (no new "
        "failure of the class for quiet, hold_limit, or recover outage end).",
        classes=_CLASS_NAMES,
        min_jobs=Int(minimum=2),
        min_users=Int(minimum=1),
        window=Dur(),
        quiet=Dur(),
        hold_limit=Dur(),
    ),
    "isolate": _guard(
        "Fatal node hardware drained and requeued at once; drain retries.",
        at_once=_CLASS_NAMES,
        drain_retry_for=Dur(),
    ),
    "scope": _guard(
        "What Recover may touch, per Slurm partition: act, recommend or ignore (partitions; "
        "default for the rest). A node's actions follow the strictest mode of its partitions. "
        "job_comment: a job's comment may opt it out or lower its restarts (recover:off, "
        "recover:max_restarts=N), never raise them.",
        default=_SCOPE_MODE,
        partitions=MapOf(
            keys=Str(pattern=PARTITION_PATTERN),
            value=_SCOPE_MODE,
            want_text="a mapping of partition name -> act, recommend or ignore",
            per_entry=True,
        ),
        job_comment=Bool(),
    ),
}

POLICY = Obj(
    description="Decisions, plans and the guards between them.",
    props={
        "settle": Dur(),
        "cascade": Dur(),
        "decisions": MapOf(keys=_NAME, value=Enum(values=DECISIONS)),
        "plans": MapOf(keys=Enum(values=DECISIONS), value=ListOf(item=Str())),
        "priorities": MapOf(keys=_NAME, value=Int(minimum=None)),
        "retry": GUARDS["retry"],
        "blast_radius": GUARDS["blast_radius"],
        "autonomy": GUARDS["autonomy"],
        "inhibit": GUARDS["inhibit"],
        "hang": GUARDS["hang"],
        "straggler": GUARDS["straggler"],
        "suspects": GUARDS["suspects"],
        "shared_outage": GUARDS["shared_outage"],
        "thresholds": Raw(schema_={"type": "object"}),  # checked by rulebook.thresholds
        "isolate": GUARDS["isolate"],
        "scope": GUARDS["scope"],
        "distinct_lines": Int(
            minimum=1,
            description="Different lines of one matcher one job attempt holds in the rule engine; "
            "more are counted on the last one held.",
        ),
        "log_timezone": Str(
            description="The time zone (IANA name, default UTC) of log stamps that name none: BSD "
            "syslog, naive ISO, glog. The same for replay, the controller and the node agent, "
            "whatever TZ they run in.",
        ),
    },
)


def _op_tests() -> list[dict[str, Any]]:
    """One single-key object per where-clause operator."""
    out = []
    for op in OPS:
        if op in ("in", "not_in"):
            arg: dict[str, Any] = {
                "oneOf": [
                    {"type": "array", "items": SCALAR},
                    {"type": "string", "pattern": "^@", "description": 'a list reference, e.g. "@fatal_xids"'},
                ]
            }
        elif op == "exists":
            arg = {"type": "boolean"}
        elif op in _ORDERED_OPS:
            arg = {"type": "number"}
        else:
            arg = SCALAR
        out.append({"type": "object", "properties": {op: arg}, "required": [op], "additionalProperties": False})
    same = {
        "type": "string",
        "pattern": r"^[A-Za-z_][A-Za-z0-9_]*\.[^.]+$",
        "description": "ALIAS.attr of an earlier condition",
    }
    out.append({"type": "object", "properties": {"same": same}, "required": ["same"], "additionalProperties": False})
    return out


_WHERE = {
    "type": "object",
    "description": "attribute -> test; all must hold. any: [...] (one must hold), macro: NAME.",
    "properties": {
        "any": {"type": "array", "items": ref("where"), "minItems": 1},
        "macro": {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]},
    },
    "additionalProperties": {"oneOf": [SCALAR, *_op_tests()]},
}
_THEN_VALUE = {"anyOf": [SCALAR, {"type": "array", "items": SCALAR}, {"type": "null"}]}
_FAULT_CLASS_REF = Raw(schema_=ref("fault_class_name"))


def _then() -> dict[str, Any]:
    symptom = {
        "type": "object",
        "required": ["name"],
        "properties": {
            "name": {"type": "string"},
            "severity": {"enum": ["fatal", "error", "warning"], "default": "error"},
        },
        "propertyNames": {"not": {"enum": list(RESERVED_ATTRS)}},
        "additionalProperties": _THEN_VALUE,
    }
    fault = {
        "type": "object",
        "required": ["fault_class"],
        "properties": {
            "fault_class": ref("fault_class_name"),
            "nodes": {"type": "array", "items": {"type": "string"}},
            "priority": {"type": "integer"},
            "reason": {"type": "string"},
        },
        "propertyNames": {"not": {"enum": list(RESERVED_ATTRS)}},
        "additionalProperties": _THEN_VALUE,
    }
    return {
        "type": "object",
        "properties": {"symptom": symptom, "fault": fault},
        "additionalProperties": False,
        "minProperties": 1,
        "maxProperties": 1,
    }


_STRINGS = ListOf(item=Str())

#: each kind of item a file holds, by the name the validator's messages use
ITEMS: Mapping[str, Obj] = {
    "matcher": Obj(
        description="A matcher: a regex over log lines and the fact it emits.",
        props={
            "id": Str(pattern=ID_PATTERN, description="Unique; a later file overrides it by this id."),
            "description": Str(),
            "source": Raw(
                schema_={
                    "oneOf": [
                        {"enum": list(SOURCES)},
                        {"type": "array", "items": {"enum": list(SOURCES)}, "minItems": 1},
                    ]
                }
            ),
            "pattern": Str(description="RE2 syntax; named groups become fact attributes."),
            "ignore_case": Bool(),
            "emit": Raw(schema_={"enum": list(EMITS), "default": "log"}),
            "attrs": Raw(
                schema_={
                    "type": "object",
                    "propertyNames": {"not": {"enum": list(RESERVED_ATTRS)}},
                    "additionalProperties": SCALAR,
                }
            ),
            "types": MapOf(value=Enum(values=ATTR_TYPES)),
            "sample": Bool(description="Only the last hit per read chunk (heartbeats)."),
            "enabled": Bool(),
            "override": Override(),
        },
        required=("id",),
        any_of=(("pattern",), ("override",)),
    ),
    "rule": Obj(
        description="A rule: conditions over facts, and the symptom or fault it derives.",
        props={
            "id": Str(pattern=ID_PATTERN),
            "description": Str(),
            "when": ListOf(item=Raw(schema_=ref("condition")), min_items=1),
            "join": _STRINGS,
            "within": Dur(),
            "for": Dur(),
            "then": Raw(schema_=_then()),
            "enabled": Bool(),
            "override": Override(),
        },
        required=("id",),
        any_of=(("description", "when", "then"), ("override",)),
    ),
    "condition": Obj(
        description="One condition: a fact of this kind whose attributes pass the where-clause.",
        props={
            "as": Str(pattern=ALIAS_PATTERN, description="Alias for later conditions and templates."),
            "kind": Enum(values=FACT_KINDS_FOR_RULES),
            "where": Raw(schema_={"anyOf": [ref("where"), {"type": "null"}]}),
            "absent_for": Dur(),
        },
        required=("kind",),
    ),
    "action": Obj(
        description="A command template.",
        props={
            "argv": Raw(
                schema_={
                    "type": "array",
                    "items": {"type": ["string", "integer"]},
                    "minItems": 1,
                    "description": "One Jinja template per argument; run without a shell.",
                }
            ),
            "scheduler": Raw(schema_={"type": "string", "default": "slurm"}),
            "per": Raw(schema_={"enum": ["job", "node"], "default": "job"}),
            "kind": Enum(
                values=ACTION_KINDS,
                description="What the action does: page, drain, resume, requeue, exclude, hold, release, cancel, "
                "or other (a site's own command). The engine treats actions by kind, never by name.",
            ),
            "verify": Str(),
            "timeout": Dur(),
            "description": Str(),
            "override": Override(),
        },
        any_of=(("argv",), ("override",)),
    ),
    "test": Obj(
        description="An embedded test.",
        props={
            "name": Str(description="Unique; a later file supersedes it with override: true."),
            "description": Str(),
            "input": ListOf(item=Raw(schema_=ref("test_input"))),
            "context": Raw(
                schema_={"type": "object", "description": "What the scheduler would say: job, attempt, nodes."}
            ),
            "facts": ListOf(item=Raw(schema_={"type": "object"})),
            "expect": ListOf(item=Raw(schema_=ref("expectation")), description="[] means: nothing may fire."),
            "enabled": Bool(description="false (with override: true) disables a shipped test."),
            "override": Enum(
                values=(True, "replace"), description="This test replaces an earlier one of the same name."
            ),
        },
        required=("name",),
        any_of=(("expect",), ("override",)),
    ),
    "input": Obj(
        description="Log lines fed to the pipeline.",
        props={
            "file": Str(description="A file name as replay sees it (the job id may come from it)."),
            "source": Enum(values=SOURCES),
            "lines": Str(),
        },
        required=("lines",),
    ),
    "expectation": Obj(
        description="One incident the test expects.",
        props={
            "fault_class": _FAULT_CLASS_REF,
            "decision": Enum(values=DECISIONS),
            "nodes": _STRINGS,
            "rules": _STRINGS,
            "job": Raw(schema_={"type": ["string", "integer"]}),
            "attempt": Int(minimum=None),
            "commands": ListOf(item=_STRINGS),
            "not_rules": _STRINGS,
        },
    ),
    "fault_class": Obj(
        description="A fault class.",
        props={
            "description": Str(),
            "decision": Enum(values=DECISIONS, description="The default decision for this class."),
            "priority": Int(
                minimum=None,
                description="The highest priority in an incident wins; root causes above their cascade.",
            ),
            "retry": Int(description="At most this many restarts of one job for this class per retry window."),
            "plan": ListOf(
                item=Str(),
                description="The actions this class's decision runs, instead of policy.plans of its decision.",
            ),
            "keywords": ListOf(
                item=Str(pattern=r".*\S"),
                description="Weak evidence: error tokens (words or phrases, any case) that put an otherwise "
                "unexplained failure in this class; compiled into the matcher weak.<class>.",
            ),
            "override": Override(),
        },
        any_of=(("description", "decision", "priority"), ("override",)),
    ),
    "policy": POLICY,
}

_LIST = Raw(
    schema_={
        "oneOf": [
            {"type": "array", "items": SCALAR},
            {
                "type": "object",
                "properties": {
                    "items": {"type": "array", "items": SCALAR},
                    "override": {"enum": ["replace", "append"]},
                },
                "additionalProperties": False,
            },
        ]
    }
)
_MACRO = Raw(
    schema_={
        "oneOf": [
            {
                "type": "object",
                "properties": {"where": ref("where"), "override": {"enum": [True, "replace"]}},
                "required": ["where"],
                "additionalProperties": False,
            },
            ref("where"),
        ]
    }
)

#: one rulebook file: its sections, in the order the validator lists them
FILE = Obj(
    description="One Recover rulebook file (see docs/rulebook.md).",
    props={
        "fault_classes": MapOf(keys=_NAME, value=Raw(schema_=ref("fault_class"))),
        "lists": MapOf(keys=_NAME, value=_LIST),
        "macros": MapOf(value=_MACRO),
        "matchers": ListOf(item=Raw(schema_=ref("matcher"))),
        "rules": ListOf(item=Raw(schema_=ref("rule"))),
        "actions": MapOf(keys=_NAME, value=Raw(schema_=ref("action"))),
        "policy": Raw(schema_=ref("policy")),
        "tests": ListOf(item=Raw(schema_=ref("test"))),
    },
)


def json_schema(
    schema_id: str, fault_class_examples: list[str], defaults: Mapping[str, Mapping[str, Any]] | None = None
) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of one rulebook file, generated from the spec above.
    ``defaults``: the shipped policy's guard settings, shown to editors as each key's default."""
    policy = POLICY.schema()
    for guard, values in (defaults or {}).items():
        props = policy["properties"].get(guard, {}).get("properties", {})
        for key, value in (values or {}).items():
            if key in props and isinstance(value, (str, int, float, bool)):
                props[key]["default"] = value
    top = FILE.schema()
    top["type"] = ["object", "null"]  # an empty file is a valid (empty) rulebook
    defs: dict[str, Any] = {
        "duration": {
            "description": "Seconds, or e.g. 90s, 10m, 1h30m, 250ms.",
            "anyOf": [
                {"type": "number", "minimum": 0},
                {"type": "string", "allOf": [{"pattern": DUR_PATTERN}, {"pattern": r"\d"}]},
            ],
        },
        "where": _WHERE,
        "fault_class_name": {
            "type": "string",
            "pattern": ID_PATTERN,
            "examples": fault_class_examples,
            "description": "A fault class declared under fault_classes: (shipped or the site's own).",
        },
        **{name: obj.schema() for name, obj in ITEMS.items() if name != "input"},
        "test_input": ITEMS["input"].schema(),
        "policy": policy,
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": schema_id,
        "title": "Recover rulebook",
        **{k: v for k, v in top.items() if k != "description"},
        "description": top["description"],
        "$defs": defs,
    }
