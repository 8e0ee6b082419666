"""The ``policy:`` section of a rulebook file, checked against its declared types (spec.POLICY).

Split from ``schema.py`` so each stays one concern: the policy is the part of a rulebook that
says what may act, and its guards' settings are checked by the types ``spec.GUARDS`` declares,
the same declaration the JSON schema is generated from.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engine.facts import DECISIONS
from engine.rulebook.spec import GUARDS, POLICY, MapOf
from engine.rulebook.thresholds import check_thresholds
from engine.rulebook.yamlmarks import mark_of
from engine.rulebook.zones import check_zone

if TYPE_CHECKING:
    from engine.rulebook.schema import _Checker as Checker

__all__ = ["check_policy", "plain"]


def plain(value: Any) -> Any:
    """A marked YAML tree as plain dicts and lists."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def check_policy(c: Checker, node: Any, marks: dict) -> dict:
    """The ``policy:`` section of one file: each key checked by its declared type, the guard
    settings by ``spec.GUARDS`` alone."""
    if not c.keys(node, POLICY.keys, "policy"):
        return {}
    out: dict[str, Any] = {}
    for key, value in node.items():
        marks[key] = mark_of(node, key)
        if key in ("settle", "cascade"):
            d = c.duration(node, key, "policy")
            if d is not None:
                out[key] = d
        elif key == "decisions":
            if not isinstance(value, dict):
                c.err(mark_of(node, key), "E-TYPE", "policy.decisions must map fault_class -> decision")
                continue
            for fc, dec in value.items():
                if dec not in DECISIONS:
                    c.err(
                        mark_of(value, fc),
                        "E-VALUE",
                        f"unknown decision {dec!r}",
                        f"one of: {', '.join(DECISIONS)}",
                    )
            out[key] = dict(value)
        elif key == "plans":
            if not isinstance(value, dict):
                c.err(mark_of(node, key), "E-TYPE", "policy.plans must map decision -> [action names]")
                continue
            for dec, names in value.items():
                if dec not in DECISIONS:
                    c.err(
                        mark_of(value, dec),
                        "E-VALUE",
                        f"unknown decision {dec!r}",
                        f"one of: {', '.join(DECISIONS)}",
                    )
                if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
                    c.err(mark_of(value, dec), "E-TYPE", f"policy.plans.{dec} must be a list of action names")
            out[key] = {k: tuple(v) for k, v in value.items() if isinstance(v, list)}
        elif key == "priorities":
            if not isinstance(value, dict) or not all(
                isinstance(v, int) and not isinstance(v, bool) for v in value.values()
            ):
                c.err(mark_of(node, key), "E-TYPE", "policy.priorities must map fault_class -> integer")
                continue
            out[key] = dict(value)
        elif key == "log_timezone":
            problem = check_zone(value)
            if problem is not None:
                c.err(
                    mark_of(node, key),
                    "E-VALUE",
                    f"policy.log_timezone: {problem}",
                    "the zone of log stamps that name none (syslog, naive ISO, glog); default UTC",
                )
                continue
            out[key] = value
        elif key == "distinct_lines":
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                c.err(
                    mark_of(node, key),
                    "E-TYPE",
                    "policy.distinct_lines must be a whole number of at least 1",
                    "the log facts of one matcher one job attempt holds in the rule engine (default 256)",
                )
                continue
            out[key] = value
        elif key == "thresholds" and isinstance(value, dict):

            def report(where: Any, code: str, message: str, hint: str, value: Any = value, key: str = key) -> None:
                mark = mark_of(node, key)
                if isinstance(where, tuple):  # ("models", name[, key])
                    inner: Any = value.get("models")
                    mark = mark_of(value, "models")
                    for part in where[1:]:
                        if isinstance(inner, dict) and part in inner:
                            mark = mark_of(inner, part)
                            inner = inner.get(part)
                elif where in value:
                    mark = mark_of(value, where)
                c.err(mark, code, message, hint)

            check_thresholds(value, report)
            out[key] = plain(value)
        else:
            # guard settings (retry, blast_radius, ...): plain mappings, checked by the policy layer
            if not isinstance(value, dict):
                c.err(mark_of(node, key), "E-TYPE", f"policy.{key} must be a mapping")
                continue
            _guard(c, key, value)
            out[key] = plain(value)
            if key == "autonomy":  # each grant keeps where it was written: explain names it
                for k in value:
                    marks[f"autonomy.{k}"] = mark_of(value, k)
                classes = value.get("classes")
                for fc in classes if isinstance(classes, dict) else ():
                    marks[f"autonomy.classes.{fc}"] = mark_of(classes, fc)
    return out


def _guard(c: Checker, name: str, value: dict) -> None:
    allowed = GUARDS[name].props if name in GUARDS else {}
    if not c.keys(value, tuple(allowed), f"policy.{name}"):
        return
    for k, v in value.items():
        kind = allowed.get(k)
        if kind is None:  # reported as an unknown key
            continue
        if isinstance(kind, MapOf) and kind.per_entry and isinstance(v, dict):
            for entry, x in v.items():  # fault class -> value; the names are checked after layering
                if kind.value.bad(x):
                    c.err(
                        mark_of(v, entry),
                        "E-VALUE",
                        f"policy.{name}.{k}.{entry} must be {kind.value.want}, got {x!r}",
                    )
        elif kind.bad(v):
            c.err(mark_of(value, k), "E-VALUE", f"policy.{name}.{k} must be {kind.want}, got {v!r}")
