"""The immutable rulebook model: what a validated file says, and what layering produces.

Every item keeps the ``Mark`` (file:line:col) it was written at, so ``explain`` and ``check`` can
point at it. Where-clauses are kept as parsed trees (``conditions.py``) whose list and macro
references are resolved only after layering, because a site may override a list.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

from .yamlmarks import Mark

__all__ = [
    "FAULT_CLASSES",
    "DECISIONS",
    "SOURCES",
    "EMITS",
    "Diagnostic",
    "Matcher",
    "Condition",
    "Rule",
    "Action",
    "TestInput",
    "RuleTest",
    "FileModel",
    "Rulebook",
    "frozen",
]

#: fault class -> (default priority, default decision); the contract of the default rulebook
FAULT_CLASSES: Mapping[str, tuple[int, str]] = MappingProxyType(
    {
        "gpu_fell_off_bus": (100, "isolate_and_restart"),
        "gpu_memory_uncorrectable": (95, "isolate_and_restart"),
        "nvlink_error": (92, "isolate_and_restart"),
        "gpu_hardware_other": (90, "isolate_and_restart"),
        "node_failure": (85, "isolate_and_restart"),
        "job_time_limit": (75, "observe"),
        "preempted": (75, "observe"),
        "host_oom": (70, "stop"),
        "straggler": (60, "isolate_and_restart"),
        "storage_io_error": (55, "restart"),
        "nccl_network_error": (50, "restart"),
        "cuda_oom": (45, "stop"),
        "cuda_illegal_access_app": (40, "stop"),
        "app_error": (35, "stop"),
        "nccl_timeout": (30, "restart"),
        "unknown": (0, "restart"),
    }
)
DECISIONS = ("restart", "isolate_and_restart", "stop", "observe")
SOURCES = ("job", "kernel", "slurm", "any")
EMITS = ("log", "xid", "progress", "context")


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

    def rule(self, rule_id: str) -> Rule | None:
        for r in self.rules:
            if r.id == rule_id:
                return r
        return None
