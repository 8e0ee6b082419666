"""Site layering: later files replace or extend earlier items by name, per field, explicitly.

A later item with the name of an earlier one must say ``override:``; then each field it gives
replaces the earlier value, or is appended to it where the override says ``append`` (structured
fields only: conditions, join, sources, argv, list items, attrs). An override of a name that no
earlier file defines is an error. ``policy`` mappings merge key by key (``autonomy.classes``
class by class, ``scope.partitions`` partition by partition).

Tests are replaced whole: a later test with the name of an earlier one and ``override: true``
supersedes it; with ``enabled: false`` as well it disables it (``rules show`` and ``rules test``
say where).
"""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType
from typing import Any, Mapping, Sequence

from engine.rulebook.model import Diagnostic, FileModel, Rulebook, frozen
from engine.rulebook.weak import QUIET_LIST, WEAK_PREFIX, weak_matchers
from engine.rulebook.yamlmarks import Mark

__all__ = ["layer"]

# YAML field name -> model attribute(s), per item type
_RULE_FIELDS = {
    "when": ("conditions",),
    "then": ("then_kind", "then_attrs", "then_marks"),
    "for": ("for_s",),
    "join": ("join",),
    "within": ("within",),
    "description": ("description",),
    "enabled": ("enabled",),
    "id": (),
    "override": (),
}
_MATCHER_FIELDS = {
    "source": ("sources",),
    "pattern": ("pattern",),
    "emit": ("emit",),
    "attrs": ("attrs",),
    "types": ("types",),
    "sample": ("sample",),
    "ignore_case": ("ignore_case",),
    "description": ("description",),
    "enabled": ("enabled",),
    "id": (),
    "override": (),
}
_FAULT_CLASS_FIELDS = {
    "description": ("description",),
    "decision": ("decision",),
    "priority": ("priority",),
    "retry": ("retry",),
    "plan": ("plan",),
    "keywords": ("keywords",),
    "override": (),
}
_ACTION_FIELDS = {
    "argv": ("argv",),
    "scheduler": ("scheduler",),
    "per": ("per",),
    "verify": ("verify",),
    "timeout": ("timeout",),
    "description": ("description",),
    "kind": ("kind",),
    "override": (),
}


def _singular(section: str) -> str:
    return "fault class" if section == "fault_classes" else section[:-1]


def _combine(old: Any, new: Any, mode: str) -> Any | None:
    if mode == "replace":
        return new
    if isinstance(old, tuple) and isinstance(new, tuple):
        return old + new
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        return MappingProxyType({**old, **new})
    return None


def _merge_item(
    old: Any,
    new: Any,
    given: Mapping[str, str],
    modes: Mapping[str, str],
    fields: Mapping[str, tuple],
    what: str,
    mark: Mark,
    diags: list[Diagnostic],
) -> Any:
    changes: dict[str, Any] = {}
    for yaml_field in given:
        for attr in fields.get(yaml_field, ()):
            mode = modes.get(yaml_field, modes.get("*", "replace"))
            value = _combine(getattr(old, attr), getattr(new, attr), mode)
            if value is None:
                diags.append(
                    Diagnostic(mark, "E-OVERRIDE", f"{what}: field {yaml_field!r} cannot be appended to", "use replace")
                )
                continue
            changes[attr] = value
    return replace(old, **changes, mark=new.mark) if changes else old


def layer(files: Sequence[FileModel]) -> tuple[Rulebook, list[Diagnostic]]:
    diags: list[Diagnostic] = []
    lists: dict[str, tuple] = {}
    macros: dict[str, Any] = {}
    matchers: dict[str, Any] = {}
    rules: dict[str, Any] = {}
    actions: dict[str, Any] = {}
    policy: dict[str, Any] = {}
    tests: dict[str, Any] = {}
    disabled_tests: dict[str, Mark] = {}
    fault_classes: dict[str, Any] = {}
    origins: dict[tuple[str, str], tuple[Mark, ...]] = {}

    def note(section: str, name: str, mark: Mark) -> None:
        origins[(section, name)] = origins.get((section, name), ()) + (mark,)

    def merge_list(old, new, modes, fm, section, name, mark):
        return old + new if next(iter(modes.values())) == "append" and section == "lists" else new

    def merge_fields(fields):
        def merge(old, new, modes, fm, section, name, mark):
            given = fm.overrides.get((section + ".fields", name), {})
            return _merge_item(old, new, given, modes, fields, f"{_singular(section)} {name}", mark, diags)

        return merge

    hints = {
        "lists": "write {name}: {{override: replace|append, items: [...]}}",
        "macros": "write {name}: {{override: true, where: ...}}",
    }
    for fm in files:
        # lists and macros are replaced (lists may be appended to) whole; matchers, rules and
        # actions are merged field by field
        sections: tuple[tuple[str, dict[str, Any], dict[str, Any], Any], ...] = (
            ("fault_classes", dict(fm.fault_classes), fault_classes, merge_fields(_FAULT_CLASS_FIELDS)),
            ("lists", dict(fm.lists), lists, merge_list),
            ("macros", dict(fm.macros), macros, merge_list),
            ("matchers", {m.id: m for m in fm.matchers}, matchers, merge_fields(_MATCHER_FIELDS)),
            ("rules", {r.id: r for r in fm.rules}, rules, merge_fields(_RULE_FIELDS)),
            ("actions", dict(fm.actions), actions, merge_fields(_ACTION_FIELDS)),
        )
        for section, items, store, merge in sections:
            for name, item in items.items():
                mark = fm.marks[(section, name)]
                ov = fm.overrides.get((section, name))
                if name in store and ov is None:
                    first = origins[(section, name)][0]
                    hint = hints.get(section, "add override: true (or override: {{field: append}})").format(name=name)
                    diags.append(
                        Diagnostic(
                            mark,
                            "E-DUP-ID",
                            f"{_singular(section)} {name!r} is already defined at {first}",
                            f"to change it, {hint}",
                        )
                    )
                    continue
                if name in store:
                    store[name] = merge(store[name], item, ov, fm, section, name, mark)
                else:
                    if ov is not None:
                        diags.append(
                            Diagnostic(
                                mark,
                                "E-OVERRIDE-NOTHING",
                                f"override of {_singular(section)} {name!r}, which no earlier file defines",
                                "remove override: to define it",
                            )
                        )
                    store[name] = item
                note(section, name, mark)
        for key, value in fm.policy.items():
            if isinstance(value, Mapping) and isinstance(policy.get(key), Mapping):
                merged = {**policy[key], **value}
                inner = {"autonomy": "classes", "scope": "partitions"}.get(key)
                old_map, new_map = policy[key].get(inner), value.get(inner)
                if inner and isinstance(old_map, Mapping) and isinstance(new_map, Mapping):
                    # a site that grants its own class (or sets one partition) keeps the others'
                    merged[inner] = {**old_map, **new_map}
                policy[key] = merged
            else:
                policy[key] = value
            note("policy", key, fm.policy_marks.get(key, Mark(fm.path, 1, 1)))
        for key, mark in fm.policy_marks.items():  # each grant, where it was written (explain names it)
            if isinstance(key, str) and key.startswith("autonomy."):
                note("policy", key, mark)
        for t in fm.tests:
            ov = fm.overrides.get(("tests", t.name))
            if t.name in tests and ov is None:
                diags.append(
                    Diagnostic(
                        t.mark,
                        "E-DUP-ID",
                        f"test {t.name!r} is already defined at {tests[t.name].mark}",
                        "to supersede it, add override: true (and enabled: false to disable it)",
                    )
                )
                continue
            if t.name not in tests and t.name not in disabled_tests and ov is not None:
                diags.append(
                    Diagnostic(
                        t.mark,
                        "E-OVERRIDE-NOTHING",
                        f"override of test {t.name!r}, which no earlier file defines",
                        "remove override: to define it",
                    )
                )
            note("tests", t.name, t.mark)
            if t.enabled:
                tests[t.name] = t
                disabled_tests.pop(t.name, None)
            else:
                tests.pop(t.name, None)
                disabled_tests[t.name] = t.mark

    for m in weak_matchers(
        fault_classes, lists.get(QUIET_LIST, ())
    ):  # the keywords of each class, as one ordinary matcher
        if m.id in matchers:
            diags.append(
                Diagnostic(
                    origins[("matchers", m.id)][0],
                    "E-DUP-ID",
                    f"matcher {m.id!r} is the weak-evidence matcher of fault class {m.id[len(WEAK_PREFIX) :]!r}",
                    "name it otherwise; the class's keywords are that matcher",
                )
            )
            continue
        matchers[m.id] = m
        note("matchers", m.id, m.mark)
    book = Rulebook(
        files=tuple(f.path for f in files),
        lists=MappingProxyType(lists),
        macros=MappingProxyType(macros),
        matchers=tuple(matchers.values()),
        rules=tuple(rules.values()),
        actions=MappingProxyType(actions),
        policy=frozen(policy),
        tests=tuple(tests.values()),
        origins=MappingProxyType(origins),
        fault_classes=MappingProxyType(fault_classes),
        disabled_tests=MappingProxyType(disabled_tests),
    )
    return book, diags
