"""The immutable rulebook model: what a validated file says, and what layering produces.

Every item keeps the ``Mark`` (file:line:col) it was written at, so ``explain`` and ``check`` can
point at it. Where-clauses are kept as parsed trees (``conditions.py``) whose list and macro
references are resolved only after layering, because a site may override a list.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

from engine.facts import DECISIONS  # the shared vocabulary; re-exported for the rulebook's readers
from engine.rulebook.yamlmarks import Mark

__all__ = [
    "BUILTIN_FAULT_CLASSES",
    "FaultClass",
    "DECISIONS",
    "SOURCES",
    "EMITS",
    "VERIFY_KINDS",
    "ACTION_KINDS",
    "KIND_BY_NAME",
    "kind_of",
    "Diagnostic",
    "Matcher",
    "Condition",
    "Rule",
    "Action",
    "TestInput",
    "RuleTest",
    "TestsNotLoaded",
    "FileModel",
    "Rulebook",
    "frozen",
]

#: the fault classes the engine itself relies on; every other class is declared in the rulebook
#: (``fault_classes:``, the shipped ones in rules/05-fault-classes.yaml)
BUILTIN_FAULT_CLASSES = ("unknown",)
SOURCES = ("job", "kernel", "slurm", "any")
EMITS = ("log", "xid", "progress", "context")
#: the checks an action's ``verify:`` may name (besides ``none``). The names are rulebook
#: vocabulary, so the linter knows them without importing the live layer; ``engine.live.verify``
#: implements one verifier per name (tests/live/test_actuator_parts.py asserts the sets are equal).
VERIFY_KINDS = frozenset(
    {"node_drained", "node_resumed", "job_requeued", "job_excluded", "job_held", "job_released", "job_cancelled"}
)

#: what an action does, declared by its ``kind:`` (rules/40-actions.yaml): the engine treats an
#: action by its kind (which verifier checks it by default, whether it pages people), never by
#: its name, so a site's ``drain_gpu`` of kind drain is a drain. ``other``: a site's own command,
#: checked by its exit status alone unless it names a ``verify:``
ACTION_KINDS = ("page", "drain", "resume", "requeue", "exclude", "hold", "release", "cancel", "other")
#: the kind of an action written before ``kind:`` existed, from its name (the shipped names): such
#: a rulebook still loads, with a warning that names the kind taken (lint W-ACTION-KIND)
KIND_BY_NAME = {
    "notify": "page",
    "alertmanager": "page",
    "drain": "drain",
    "resume": "resume",
    "requeue": "requeue",
    "exclude": "exclude",
    "hold": "hold",
    "keep_held": "hold",
    "release": "release",
    "cancel": "cancel",
}


def kind_of(action: Any, name: str = "") -> str:
    """The kind of an action (a model ``Action`` or a compiled one; None: only ``name`` is known):
    declared, or (an older rulebook) taken from its name."""
    if action is not None and action.kind:
        return str(action.kind)
    return KIND_BY_NAME.get(action.name if action is not None else name, "other")


def frozen(value: Any) -> Any:
    """Deep-freeze plain YAML data: dicts become read-only mappings, lists tuples."""
    if isinstance(value, dict):
        return MappingProxyType({k: frozen(v) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(frozen(v) for v in value)
    return value


@dataclass(frozen=True)
class Diagnostic:
    mark: Mark
    code: str
    message: str
    hint: str = ""
    severity: str = "error"  # error | warning

    def __str__(self) -> str:
        text = f"{self.mark}: {self.code} {self.message}"
        if self.hint:
            text += f" (hint: {self.hint})"
        return text


@dataclass(frozen=True)
class FaultClass:
    """A declared fault class: what it means, what to do by default, and how it ranks."""

    name: str
    description: str
    decision: str
    priority: int
    mark: Mark
    retry: int | None = None  # at most this many restarts of one job for this class per retry window
    # the actions this class's decision runs, instead of the decision kind's plan (policy.plans):
    # an observe class that pages, without paging every other observe class
    plan: tuple[str, ...] | None = None
    # weak evidence: error tokens that put an unexplained failure in this class (weak.<name>)
    keywords: tuple[str, ...] = ()


@dataclass(frozen=True)
class Matcher:
    id: str
    pattern: str
    sources: tuple[str, ...]
    emit: str
    mark: Mark
    description: str = ""
    ignore_case: bool = False
    attrs: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    types: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    sample: bool = False
    enabled: bool = True
    # a hit on a line that holds any of these strings is no hit (the weak-evidence matchers: a
    # keyword on an INFO line is no error line); set by engine/rulebook/weak.py, not in YAML
    unless: tuple[str, ...] = ()


@dataclass(frozen=True)
class Condition:
    alias: str
    kind: str
    where: Any  # a conditions.Clause tree (unresolved references until layering)
    mark: Mark
    absent_for: float | None = None


@dataclass(frozen=True)
class Rule:
    id: str
    description: str
    conditions: tuple[Condition, ...]
    then_kind: str  # symptom | fault
    then_attrs: Mapping[str, Any]
    mark: Mark
    join: tuple[str, ...] = ("job", "attempt")
    within: float | None = None
    for_s: float | None = None
    enabled: bool = True
    then_marks: Mapping[str, Mark] = field(default_factory=lambda: MappingProxyType({}))  # then attr -> where written


@dataclass(frozen=True)
class Action:
    name: str
    argv: tuple[str, ...]
    mark: Mark
    scheduler: str = "slurm"
    per: str = "job"  # job | node
    verify: str | None = None
    timeout: float = 30.0
    description: str = ""
    kind: str | None = None  # one of ACTION_KINDS; None: not written (see kind_of)


@dataclass(frozen=True)
class TestInput:
    file: str
    source: str
    lines: str


@dataclass(frozen=True)
class RuleTest:
    name: str
    inputs: tuple[TestInput, ...]
    expect: tuple[Mapping[str, Any], ...]
    mark: Mark
    context: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    facts: tuple[Mapping[str, Any], ...] = ()
    enabled: bool = True


class TestsNotLoaded(tuple):
    """``Rulebook.tests`` of a rulebook loaded without its test documents (``load_rulebook``'s
    default: running needs no test): reading it is a caller's mistake, so it raises instead of
    reading as no test. Load with ``tests=True`` where the tests are wanted."""

    def _refuse(self, *_: Any) -> Any:
        raise RuntimeError("this rulebook was loaded without its tests: load it with tests=True")

    __iter__ = __len__ = __getitem__ = __contains__ = __bool__ = _refuse  # type: ignore[assignment]

    def __reduce__(self) -> tuple[type, tuple[()]]:  # (kept in the rulebook cache)
        return (TestsNotLoaded, ())

    def __repr__(self) -> str:
        return "TestsNotLoaded()"


@dataclass(frozen=True)
class FileModel:
    """One validated file, before layering. ``overrides`` maps (section, name) -> {field: mode}."""

    path: str
    lists: Mapping[str, tuple[Any, ...]]
    macros: Mapping[str, Any]
    matchers: tuple[Matcher, ...]
    rules: tuple[Rule, ...]
    actions: Mapping[str, Action]
    policy: Mapping[str, Any]
    tests: tuple[RuleTest, ...]
    overrides: Mapping[tuple[str, str], Mapping[str, str]]
    marks: Mapping[tuple[str, str], Mark]  # (section, name) -> where it was written
    policy_marks: Mapping[str, Mark] = field(default_factory=lambda: MappingProxyType({}))
    fault_classes: Mapping[str, FaultClass] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True)
class Rulebook:
    """The layered rulebook: every name resolved to its final definition."""

    files: tuple[str, ...]
    lists: Mapping[str, tuple[Any, ...]]
    macros: Mapping[str, Any]
    matchers: tuple[Matcher, ...]
    rules: tuple[Rule, ...]
    actions: Mapping[str, Action]
    policy: Mapping[str, Any]
    tests: tuple[RuleTest, ...]
    origins: Mapping[tuple[str, str], tuple[Mark, ...]]  # (section, name) -> every place that defined/changed it
    fault_classes: Mapping[str, FaultClass] = field(default_factory=lambda: MappingProxyType({}))
    disabled_tests: Mapping[str, Mark] = field(
        default_factory=lambda: MappingProxyType({})
    )  # name -> where it was disabled

    def rule(self, rule_id: str) -> Rule | None:
        for r in self.rules:
            if r.id == rule_id:
                return r
        return None
