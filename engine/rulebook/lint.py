"""Cross-reference checks on the layered rulebook: every name it uses exists, and nothing in it is
a silent no-op.

Errors: a reference to a matcher, fault class or rule that is not declared (in a condition, in a
list that a condition uses as a set of matchers, in policy, in a test expectation); a template
that reads an attribute the matched fact can never carry. Warnings: a matcher no rule uses; a
condition that can never be met because nothing produces the fact or attribute it needs. What a
fact can carry is declared by the rulebook itself: a matcher by its named groups and ``attrs``, a
symptom or fault by the ``then`` of the rules that derive it.

Usage::

    diags = lint(book, compiled_rules)   # called by compile_rulebook
"""

from __future__ import annotations

from jinja2 import TemplateSyntaxError

import re
from typing import Any, Iterator, Mapping

from jinja2 import nodes as jn

from engine.rulebook.conditions import AllOf, AnyOf, Cmp, ListRef, MacroRef
from engine.rulebook.model import BUILTIN_FAULT_CLASSES, VERIFY_KINDS, Diagnostic, Matcher, Rulebook, kind_of
from engine.rulebook.templating import parsed
from engine.rulebook.yamlmarks import Mark
from engine.rulebook.spec_types import parse_duration

__all__ = ["lint", "log_attrs", "BASE_ATTRS"]

_GROUP_RE = re.compile(r"\(\?P<([A-Za-z_][A-Za-z0-9_]*)>")
#: attributes every fact has (id, kind, at) or that the engine adds to one of a kind
BASE_ATTRS: Mapping[str, frozenset[str]] = {
    "*": frozenset({"id", "kind", "at", "count"}),
    # linefacts: the matcher, the source, the job/attempt/node of the file, the line's text and time
    "log": frozenset({"matcher", "source", "job", "attempt", "node", "nodes", "text", "logged_at"}),
    "symptom": frozenset({"name", "severity", "job", "attempt", "node", "rule"}),
    "fault": frozenset({"fault_class", "nodes", "priority", "reason", "rule", "job", "attempt"}),
}
_NEGATIVE_OPS = ("ne", "not_in")
#: the classes of what every surviving rank prints after one rank or node fails
_CASCADE_CLASSES = ("nccl_network_error", "nccl_timeout")


def log_attrs(m: Matcher) -> frozenset[str]:
    """What a hit of matcher ``m`` can carry besides the base attributes: its groups and attrs."""
    return frozenset(_GROUP_RE.findall(m.pattern)) | frozenset(m.attrs)


def _walk(tree: Any, book: Rulebook, via: str | None = None, depth: int = 0) -> Iterator[tuple[Cmp, str | None, bool]]:
    """Every comparison of a where-tree, macros expanded: (cmp, list it names, required?).

    ``required`` is False inside ``any:``; unknown macros and cycles are reported by ``resolve``."""
    stack: list[tuple[Any, bool, int]] = [(tree, True, depth)]
    while stack:
        node, required, d = stack.pop()
        if isinstance(node, (AllOf, AnyOf)):
            inner = required and isinstance(node, AllOf)
            stack.extend((item, inner, d) for item in node.items)
        elif isinstance(node, MacroRef):
            if node.name in book.macros and d < 16:
                stack.append((book.macros[node.name], required, d + 1))
        elif isinstance(node, Cmp):
            yield node, (node.value.name if isinstance(node.value, ListRef) else None), required


def _values(cmp: Cmp, book: Rulebook) -> tuple[Any, ...]:
    if cmp.op == "eq":
        return (cmp.value,)
    if cmp.op == "in":
        if isinstance(cmp.value, ListRef):
            return tuple(book.lists.get(cmp.value.name, ()))
        return tuple(cmp.value)
    return ()


class _Linter:
    def __init__(self, book: Rulebook):
        self.book = book
        self.diags: list[Diagnostic] = []
        self.classes = set(book.fault_classes) | set(BUILTIN_FAULT_CLASSES)
        self.rule_ids = {r.id for r in book.rules}
        self.matchers = {m.id: m for m in book.matchers}
        self.log_matchers = [m for m in book.matchers if m.enabled and m.emit == "log"]
        # what each symptom name / fault class carries: the union of the `then` of the rules deriving it
        self.symptoms: dict[str, set[str]] = {}
        self.faults: dict[str, set[str]] = {}
        self.dynamic_symptom = False
        for r in book.rules:
            if not r.enabled:
                continue
            name = r.then_attrs.get("name" if r.then_kind == "symptom" else "fault_class")
            table = self.symptoms if r.then_kind == "symptom" else self.faults
            if isinstance(name, str) and "{" not in name:
                table.setdefault(name, set()).update(r.then_attrs)
            elif r.then_kind == "symptom":
                self.dynamic_symptom = True

    def err(self, mark: Mark, code: str, msg: str, hint: str = "") -> None:
        self.diags.append(Diagnostic(mark, code, msg, hint))

    def warn(self, mark: Mark, code: str, msg: str, hint: str = "") -> None:
        self.diags.append(Diagnostic(mark, code, msg, hint, "warning"))

    def list_mark(self, name: str, default: Mark) -> Mark:
        return self.book.origins.get(("lists", name), (default,))[-1]

    def policy_mark(self, key: str) -> Mark:
        return self.book.origins.get(("policy", key), (Mark(self.book.files[-1] if self.book.files else "?", 1, 1),))[
            -1
        ]

    def known_class(self, fc: Any, mark: Mark, where: str) -> None:
        if fc not in self.classes:
            # E-VALUE, as before fault classes were declared in the rulebook: a stable code
            self.err(
                mark,
                "E-VALUE",
                f"{where}: unknown fault class {fc!r}",
                "declare it under fault_classes: (name, description, decision, priority), "
                f"or use one of: {', '.join(sorted(self.classes))}",
            )

    # -- conditions --------------------------------------------------------------------------
    def condition_scope(self, rule, cond) -> tuple[frozenset[str], frozenset[str]] | None:
        """(attributes every candidate fact carries, attributes some candidate carries), or None
        when the kind's attributes come from code rather than from the rulebook."""
        base = BASE_ATTRS["*"] | BASE_ATTRS.get(cond.kind, frozenset())
        if cond.kind == "log":
            named: set[str] = set()
            constrained = False
            for cmp, via, _required in _walk(cond.where, self.book):
                if cmp.attr != "matcher" or cmp.op not in ("eq", "in"):
                    continue
                constrained = True
                for v in _values(cmp, self.book):
                    if v not in self.matchers:
                        mark = self.list_mark(via, cond.mark) if via else cond.mark
                        where = f"list {via!r} (used as matchers by rule {rule.id})" if via else f"rule {rule.id}"
                        close = [m for m in self.matchers if m[:4] == str(v)[:4]]
                        self.err(
                            mark,
                            "E-REF",
                            f"{where}: unknown matcher {v!r}",
                            f"did you mean {close[0]!r}?" if close else "matchers are declared under matchers:",
                        )
                    else:
                        named.add(str(v))
            cands = (
                [self.matchers[n] for n in sorted(named) if self.matchers[n].enabled and self.matchers[n].emit == "log"]
                if constrained
                else self.log_matchers
            )
            if constrained and named and not cands:
                self.warn(
                    cond.mark,
                    "W-NEVER-FIRES",
                    f"rule {rule.id}: every matcher this condition names is disabled or emits no log fact",
                    "the rule can never fire",
                )
                return None
            if not cands:
                return None
            sets = [log_attrs(m) for m in cands]
            return base | frozenset.intersection(*sets), base | frozenset().union(*sets)
        if cond.kind in ("symptom", "fault"):
            key, table, what = (
                ("name", self.symptoms, "symptom") if cond.kind == "symptom" else ("fault_class", self.faults, "fault")
            )
            names: set[str] = set()
            constrained = False
            for cmp, _via, _required in _walk(cond.where, self.book):
                if cmp.attr == "rule" and cmp.op in ("eq", "in"):
                    for v in _values(cmp, self.book):
                        if v not in self.rule_ids:
                            self.err(cond.mark, "E-REF", f"rule {rule.id}: unknown rule {v!r}")
                if cmp.attr != key or cmp.op not in ("eq", "in"):
                    continue
                constrained = True
                for v in _values(cmp, self.book):
                    if cond.kind == "fault":
                        self.known_class(v, cond.mark, f"rule {rule.id}")
                    names.add(str(v))
            if cond.kind == "symptom" and self.dynamic_symptom:
                return None
            if constrained:
                produced = [n for n in sorted(names) if n in table]
                if not produced and cond.absent_for is None:
                    self.warn(
                        cond.mark,
                        "W-NEVER-FIRES",
                        f"rule {rule.id}: no rule derives a {what} {' or '.join(repr(n) for n in sorted(names))}",
                        "the rule can never fire; check the spelling",
                    )
                    return None
                sets = [frozenset(table[n]) for n in produced]
            else:
                sets = [frozenset(v) for v in table.values()]
            if not sets:
                return None
            return base | frozenset.intersection(*sets), base | frozenset().union(*sets)
        return None

    def rules(self) -> None:
        used: set[str] = set()
        wildcard = False
        for rule in self.book.rules:
            if rule.then_kind == "fault":
                self.known_class(
                    rule.then_attrs.get("fault_class"),
                    rule.then_marks.get("fault_class", rule.mark),
                    f"rule {rule.id} then.fault",
                )
            if not rule.enabled:
                continue
            scopes: dict[str, tuple[frozenset[str], frozenset[str]] | None] = {}
            for cond in rule.conditions:
                if cond.kind == "progress" and cond.absent_for is None:
                    self.warn(
                        cond.mark,
                        "W-NEVER-FIRES",
                        f"rule {rule.id}: progress facts never reach rules (the progress tracker aggregates them)",
                        "use kind: stall (a hang), or progress with absent_for",
                    )
                scope = self.condition_scope(rule, cond)
                if cond.kind == "log":
                    names = [
                        v
                        for cmp, _v, _r in _walk(cond.where, self.book)
                        if cmp.attr == "matcher" and cmp.op in ("eq", "in")
                        for v in _values(cmp, self.book)
                    ]
                    if not names:
                        # no matcher named, but a constant a matcher declares (weak: true): the
                        # condition can match only the matchers that declare it so
                        names = self.matchers_with(cond.where)
                    used.update(str(n) for n in names)
                    wildcard = wildcard or not names
                if scope is not None:
                    for cmp, _via, required in _walk(cond.where, self.book):
                        if (
                            required
                            and cmp.attr not in scope[1]
                            and cmp.op not in _NEGATIVE_OPS
                            and not (cmp.op == "exists" and cmp.value is False)
                        ):
                            self.warn(
                                cond.mark,
                                "W-NEVER-FIRES",
                                f"rule {rule.id}: condition {cond.alias} tests {cmp.attr!r}, "
                                f"which no {cond.kind} fact it can match carries",
                                f"carried: {', '.join(sorted(scope[1] - BASE_ATTRS['*']))}",
                            )
                if cond.absent_for is None:
                    scopes[cond.alias] = scope
            self.templates(rule, scopes)
        if not wildcard:
            for m in self.log_matchers:
                # a matcher of rank evidence is read by attribution (core.suspects), not by rules
                if m.id not in used and "rank_evidence" not in m.attrs:
                    self.warn(
                        self.book.origins.get(("matchers", m.id), (m.mark,))[-1],
                        "W-UNUSED",
                        f"matcher {m.id!r} is never used: no rule's condition names it",
                        "add a rule, or enabled: false",
                    )

    def matchers_with(self, where: Any) -> list[str]:
        """The log matchers a condition naming no matcher can match, where it requires an
        attribute some matchers declare as a constant (``weak: true``): those whose constant
        agrees. Empty (any matcher) when it requires no such attribute."""
        declared = {a for m in self.log_matchers for a in m.attrs}
        fixed = [
            (cmp.attr, cmp.value)
            for cmp, _via, required in _walk(where, self.book)
            if required and cmp.op == "eq" and cmp.attr in declared
        ]
        if not fixed:
            return []
        return [m.id for m in self.log_matchers if all(a in m.attrs and m.attrs[a] == v for a, v in fixed)]

    def templates(self, rule, scopes: Mapping[str, tuple[frozenset[str], frozenset[str]] | None]) -> None:
        for key, value in rule.then_attrs.items():
            for src in value if isinstance(value, tuple) else (value,):
                if not isinstance(src, str) or "{" not in src:
                    continue
                try:
                    ast = parsed(src)
                except TemplateSyntaxError:  # reported by the compiler
                    continue
                for alias, attr, guarded in _reads(ast):
                    scope = scopes.get(alias)
                    if scope is None or guarded:
                        continue
                    always, maybe = scope
                    if attr not in maybe:
                        self.err(
                            rule.then_marks.get(key, rule.mark),
                            "E-ATTR",
                            f"rule {rule.id} then.{key}: {alias}.{attr} is never carried by the fact {alias} matches",
                            f"it carries: {', '.join(sorted(maybe - BASE_ATTRS['*']))}; "
                            f"or write {{{{ {alias}.{attr} | default('') }}}}",
                        )
                    elif attr not in always:
                        self.warn(
                            rule.then_marks.get(key, rule.mark),
                            "W-ATTR",
                            f"rule {rule.id} then.{key}: only some facts {alias} can match carry {attr!r}",
                            f"write {{{{ {alias}.{attr} | default('') }}}}",
                        )

    # -- policy and tests ----------------------------------------------------------------------
    def policy(self) -> None:
        for key in ("decisions", "priorities"):
            for fc in dict(self.book.policy.get(key, {}) or {}):
                self.known_class(fc, self.policy_mark(key), f"policy.{key}")
        retry = self.book.policy.get("retry") or {}
        for fc in dict(retry.get("per_class") or {}) if isinstance(retry, Mapping) else ():
            self.known_class(fc, self.policy_mark("retry"), "policy.retry.per_class")
        autonomy = self.book.policy.get("autonomy") or {}
        classes = autonomy.get("classes") if isinstance(autonomy, Mapping) else None
        for fc in dict(classes) if isinstance(classes, Mapping) else ():
            self.known_class(fc, self.policy_mark(f"autonomy.classes.{fc}"), "policy.autonomy.classes")
        # an outage that opens after some of its jobs' incidents closed cannot hold their requeues
        settle = self.book.policy.get("settle")
        outage = self.book.policy.get("shared_outage") or {}
        window = outage.get("window") if isinstance(outage, Mapping) else None
        window = parse_duration(window) if isinstance(window, str) else window  # guards keep "5m"
        if isinstance(settle, (int, float)) and isinstance(window, (int, float)) and window > settle:
            self.warn(
                self.policy_mark("shared_outage"),
                "W-OUTAGE-WINDOW",
                f"policy.shared_outage.window ({window:g} s) is longer than policy.settle ({settle:g} s): "
                "a job whose incident closes before the outage opens is requeued, not held",
                "keep the window at or below settle",
            )
        # the guards that name fault classes: a misspelt one would silently never apply
        for section, key in (("isolate", "at_once"), ("suspects", "classes"), ("shared_outage", "classes")):
            value = self.book.policy.get(section) or {}
            names = value.get(key) if isinstance(value, Mapping) else None
            for fc in names if isinstance(names, (list, tuple)) else ():
                self.known_class(fc, self.policy_mark(section), f"policy.{section}.{key}")

    def priorities(self) -> None:
        """A site's own root cause must outrank the NCCL errors its failure makes every other rank
        print, or those win the incident; a correlation rule that names it as the cause is the
        other way (the shipped application classes use one)."""
        cascade = {c: fc.priority for c, fc in self.book.fault_classes.items() if c in _CASCADE_CLASSES}
        if not cascade:
            return
        top, top_pri = max(cascade.items(), key=lambda kv: kv[1])
        pri = {
            **{n: fc.priority for n, fc in self.book.fault_classes.items()},
            **dict(self.book.policy.get("priorities", {}) or {}),
        }
        for name, fc in self.book.fault_classes.items():
            if fc.mark.file.startswith("rules/") or name in _CASCADE_CLASSES or fc.decision == "observe":
                continue
            if int(pri.get(name, fc.priority)) > top_pri:
                continue
            correlated = any(
                r.enabled
                and r.then_kind == "fault"
                and r.then_attrs.get("fault_class") == name
                and (len(r.conditions) > 1 or int(r.then_attrs.get("priority") or 0) > top_pri)
                for r in self.book.rules
            )
            if not correlated:
                self.warn(
                    self.book.origins.get(("fault_classes", name), (fc.mark,))[-1],
                    "W-PRIORITY",
                    f"fault class {name!r} (priority {pri.get(name, fc.priority)}) ranks below {top} ({top_pri}): "
                    f"the NCCL errors its failure causes on the other ranks would win the incident",
                    f"give it a priority above {top_pri}, or a correlation rule that names it as their cause",
                )

    def tests(self) -> None:
        for t in self.book.tests:
            for e in t.expect:
                if "fault_class" in e:
                    self.known_class(e["fault_class"], t.mark, f"test {t.name}")
                for key in ("rules", "not_rules"):
                    for r in e.get(key, ()) or ():
                        if r not in self.rule_ids:
                            self.err(t.mark, "E-REF", f"test {t.name}: expect.{key} names unknown rule {r!r}")

    def actions(self) -> None:
        for name, action in self.book.actions.items():
            if action.kind is None:
                # an older rulebook: still loaded, its kind taken from the name (the shipped names)
                self.warn(
                    self.book.origins.get(("actions", name), (action.mark,))[-1],
                    "W-ACTION-KIND",
                    f"action {name}: no kind; taken as {kind_of(action)!r} from its name",
                    "declare it: kind: page | drain | resume | requeue | exclude | hold | release | cancel | other",
                )
            if action.verify and action.verify != "none" and action.verify not in VERIFY_KINDS:
                self.err(
                    self.book.origins.get(("actions", name), (action.mark,))[-1],
                    "E-REF",
                    f"action {name}: unknown verify {action.verify!r}",
                    f"one of: none, {', '.join(sorted(VERIFY_KINDS))}",
                )


def _reads(ast: jn.Node) -> Iterator[tuple[str, str, bool]]:
    """(alias, attribute, guarded) for every ``alias.attr`` a template reads; guarded when it sits
    under ``| default(...)`` or ``is defined``."""
    stack: list[tuple[jn.Node, bool]] = [(ast, False)]
    while stack:
        node, guarded = stack.pop()
        if isinstance(node, jn.Getattr) and isinstance(node.node, jn.Name):
            yield node.node.name, node.attr, guarded
        if (
            isinstance(node, jn.Getitem)
            and isinstance(node.node, jn.Name)
            and isinstance(node.arg, jn.Const)
            and isinstance(node.arg.value, str)
        ):
            yield node.node.name, node.arg.value, guarded
        for child in node.iter_child_nodes():
            g = guarded
            if isinstance(node, jn.Filter) and node.name in ("default", "d") and child is node.node:
                g = True
            if isinstance(node, jn.Test) and node.name in ("defined", "undefined") and child is node.node:
                g = True
            stack.append((child, g))


def lint(book: Rulebook, compiled_rules: Any = ()) -> list[Diagnostic]:
    linter = _Linter(book)
    linter.rules()
    linter.policy()
    linter.tests()
    linter.actions()
    linter.priorities()
    return linter.diags
