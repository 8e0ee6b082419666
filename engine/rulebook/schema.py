"""Schema check of one rulebook file: marked YAML in, (FileModel, diagnostics) out.

Pure: it reads the marked tree and never mutates it. Every problem is reported (not just the
first), each with the file:line:col of the offending node, a stable code and a hint.
Regexes and templates are checked in ``compile.py`` after layering, where the final text of
each item is known.
"""

from __future__ import annotations

import re
from types import MappingProxyType
from typing import Any

from engine.rulebook.conditions import parse_where
from engine.rulebook.model import (
    ACTION_KINDS,
    DECISIONS,
    EMITS,
    SOURCES,
    Action,
    Condition,
    Diagnostic,
    FaultClass,
    FileModel,
    Matcher,
    Rule,
    RuleTest,
    TestInput,
    frozen,
)
from engine.rulebook.policy_check import check_policy, plain
from engine.rulebook.spec import (
    ALIAS_PATTERN,
    ATTR_TYPES,
    FACT_KINDS_FOR_RULES,
    FILE,
    GUARDS,
    ID_PATTERN,
    ITEMS,
    RESERVED_ATTRS,
    Type,
    parse_duration,
)
from engine.rulebook.yamlmarks import Mark, mark_of

__all__ = ["check_file", "parse_duration", "SECTION_KEYS", "ITEM_KEYS", "GUARD_KEYS"]

# The tables below are generated from the one declarative spec (engine/rulebook/spec.py), which
# the JSON schema is generated from too.
SECTION_KEYS: tuple[str, ...] = FILE.keys
ITEM_KEYS: dict[str, tuple[str, ...]] = {name: obj.keys for name, obj in ITEMS.items()}
#: the settings of each policy guard, and the declared type of each (a ``spec.Type``). What is not
#: here is read by nothing, so it is an error rather than a silent no-op.
GUARD_KEYS: dict[str, dict[str, Type]] = {name: dict(obj.props) for name, obj in GUARDS.items()}
_ID_RE = re.compile(ID_PATTERN)
_ALIAS_RE = re.compile(ALIAS_PATTERN)
_FACT_KINDS_FOR_RULES = FACT_KINDS_FOR_RULES
_RESERVED_ATTRS = RESERVED_ATTRS
_TYPES = ATTR_TYPES


class _Checker:
    def __init__(self, path: str):
        self.path = path
        self.diags: list[Diagnostic] = []
        self.section_mark: Mark | None = None

    def _where(self, mark: Mark) -> Mark:
        # a scalar has no mark of its own: point at the section it sits in
        return mark if mark.file != "?" else (self.section_mark or Mark(self.path, 1, 1))

    def err(self, mark: Mark, code: str, message: str, hint: str = "") -> None:
        self.diags.append(Diagnostic(self._where(mark), code, message, hint))

    def warn(self, mark: Mark, code: str, message: str, hint: str = "") -> None:
        self.diags.append(Diagnostic(self._where(mark), code, message, hint, "warning"))

    def report(self, mark: Mark, code: str, message: str, hint: str) -> None:
        self.err(mark, code, message, hint)

    # -- helpers ---------------------------------------------------------------------------
    def keys(self, node: Any, allowed: tuple[str, ...], what: str) -> bool:
        if not isinstance(node, dict):
            self.err(mark_of(node, default=Mark(self.path, 1, 1)), "E-TYPE", f"{what} must be a mapping")
            return False
        for key in node:
            if key not in allowed:
                close = [a for a in allowed if a.startswith(str(key)[:3])]
                self.err(
                    mark_of(node, key),
                    "E-UNKNOWN-KEY",
                    f"unknown key {key!r} in {what}",
                    f"did you mean {close[0]!r}?" if close else f"allowed: {', '.join(allowed)}",
                )
        return True

    def typed(self, node: dict, key: str, types: tuple, what: str, required: bool = False, default: Any = None) -> Any:
        if key not in node:
            if required:
                self.err(mark_of(node), "E-MISSING", f"{what} needs {key!r}")
            return default
        value = node[key]
        ok = isinstance(value, types) and not (isinstance(value, bool) and bool not in types)
        if not ok:
            names = "/".join(
                t.__name__.replace("MDict", "mapping").replace("dict", "mapping").replace("MList", "list")
                for t in types
            )
            self.err(mark_of(node, key), "E-TYPE", f"{what}.{key} must be {names}, got {type(value).__name__}")
            return default
        return value

    def duration(self, node: dict, key: str, what: str) -> float | None:
        if key not in node:
            return None
        d = parse_duration(node[key])
        if d is None:
            self.err(
                mark_of(node, key),
                "E-VALUE",
                f"{what}.{key}: {node[key]!r} is not a duration",
                "write e.g. 90s, 10m, 1h30m",
            )
        return d

    def override(self, node: dict, fields: tuple[str, ...], what: str) -> dict[str, str] | None:
        if "override" not in node:
            return None
        raw = node["override"]
        if raw is True or raw == "replace":
            return {"*": "replace"}
        if not isinstance(raw, dict):
            self.err(
                mark_of(node, "override"),
                "E-TYPE",
                f"{what}.override must be true or a mapping field -> replace|append",
            )
            return {"*": "replace"}
        out: dict[str, str] = {}
        for f, mode in raw.items():
            if f not in fields:
                self.err(
                    mark_of(raw, f),
                    "E-UNKNOWN-KEY",
                    f"override names unknown field {f!r}",
                    f"fields: {', '.join(fields)}",
                )
            elif mode not in ("replace", "append"):
                self.err(mark_of(raw, f), "E-VALUE", f"override mode must be replace or append, got {mode!r}")
            else:
                out[f] = mode
        return out

    # -- sections --------------------------------------------------------------------------
    def lists(self, node: Any, overrides: dict, marks: dict) -> dict[str, tuple]:
        out: dict[str, tuple] = {}
        if not isinstance(node, dict):
            self.err(mark_of(node), "E-TYPE", "lists must be a mapping of name -> list")
            return out
        for name, value in node.items():
            m = mark_of(node, name)
            if not _ID_RE.match(str(name)):
                self.err(m, "E-VALUE", f"bad list name {name!r}")
                continue
            if isinstance(value, dict):
                self.keys(value, ("items", "override"), f"list {name}")
                ov = value.get("override", "replace")
                if ov not in ("replace", "append"):
                    self.err(mark_of(value, "override"), "E-VALUE", "a list's override is replace or append")
                    ov = "replace"
                overrides[("lists", name)] = {"items": ov}
                value = value.get("items", [])
            if not isinstance(value, list) or not all(isinstance(v, (str, int, float, bool)) for v in value):
                self.err(m, "E-TYPE", f"list {name!r} must be a list of scalars")
                continue
            out[name] = tuple(value)
            marks[("lists", name)] = m
        return out

    def macros(self, node: Any, overrides: dict, marks: dict) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if not isinstance(node, dict):
            self.err(mark_of(node), "E-TYPE", "macros must be a mapping of name -> where-clause")
            return out
        for name, value in node.items():
            m = mark_of(node, name)
            if isinstance(value, dict) and "where" in value and set(value) <= {"where", "override"}:
                if "override" in value:
                    overrides[("macros", name)] = {"where": "replace"}
                value = value["where"]
            out[name] = parse_where(value, self.report)
            marks[("macros", name)] = m
        return out

    def matcher(self, node: Any, overrides: dict, marks: dict) -> Matcher | None:
        if not self.keys(node, ITEM_KEYS["matcher"], "matcher"):
            return None
        mid = self.typed(node, "id", (str,), "matcher", required=True)
        if mid is None:
            return None
        if not _ID_RE.match(mid):
            self.err(mark_of(node, "id"), "E-VALUE", f"bad matcher id {mid!r}", "letters, digits, _ . -")
        ov = self.override(node, ITEM_KEYS["matcher"], f"matcher {mid}")
        if ov is not None:
            overrides[("matchers", mid)] = ov
            overrides[("matchers.fields", mid)] = dict.fromkeys(node, "given")
        marks[("matchers", mid)] = node.mark
        pattern = self.typed(node, "pattern", (str,), f"matcher {mid}", required=ov is None, default="")
        src = node.get("source", "any")
        sources = tuple(src) if isinstance(src, list) else (src,)
        for s in sources:
            if s not in SOURCES:
                self.err(mark_of(node, "source"), "E-VALUE", f"unknown source {s!r}", f"one of: {', '.join(SOURCES)}")
        emit = self.typed(node, "emit", (str,), f"matcher {mid}", default="log")
        if emit not in EMITS:
            self.err(mark_of(node, "emit"), "E-VALUE", f"unknown emit {emit!r}", f"one of: {', '.join(EMITS)}")
        attrs = self.typed(node, "attrs", (dict,), f"matcher {mid}", default={}) or {}
        for k, v in attrs.items():
            if k in _RESERVED_ATTRS:
                self.err(mark_of(attrs, k), "E-VALUE", f"attribute name {k!r} is reserved")
            elif not isinstance(v, (str, int, float, bool)):
                self.err(mark_of(attrs, k), "E-TYPE", f"matcher attrs must be scalars ({k})")
        types = self.typed(node, "types", (dict,), f"matcher {mid}", default={}) or {}
        for k, v in types.items():
            if v not in _TYPES:
                self.err(mark_of(types, k), "E-VALUE", f"type of {k!r} must be one of {', '.join(_TYPES)}")
        return Matcher(
            id=mid,
            pattern=pattern or "",
            sources=sources,
            emit=emit if emit in EMITS else "log",
            mark=node.mark,
            description=self.typed(node, "description", (str,), f"matcher {mid}", default="") or "",
            ignore_case=bool(self.typed(node, "ignore_case", (bool,), f"matcher {mid}", default=False)),
            attrs=frozen(dict(attrs)),
            types=frozen(dict(types)),
            sample=bool(self.typed(node, "sample", (bool,), f"matcher {mid}", default=False)),
            enabled=bool(self.typed(node, "enabled", (bool,), f"matcher {mid}", default=True)),
        )

    def rule(self, node: Any, overrides: dict, marks: dict) -> Rule | None:
        if not self.keys(node, ITEM_KEYS["rule"], "rule"):
            return None
        rid = self.typed(node, "id", (str,), "rule", required=True)
        if rid is None:
            return None
        if not _ID_RE.match(rid):
            self.err(mark_of(node, "id"), "E-VALUE", f"bad rule id {rid!r}", "letters, digits, _ . -")
        ov = self.override(node, ITEM_KEYS["rule"], f"rule {rid}")
        if ov is not None:
            overrides[("rules", rid)] = ov
            overrides[("rules.fields", rid)] = dict.fromkeys(node, "given")
        marks[("rules", rid)] = node.mark
        what = f"rule {rid}"
        desc = self.typed(node, "description", (str,), what, required=ov is None, default="")
        conditions: list[Condition] = []
        when = self.typed(node, "when", (list,), what, required=ov is None, default=[]) or []
        if ov is None and "when" in node and not when:
            self.err(mark_of(node, "when"), "E-VALUE", f"{what}: when needs at least one condition")
        aliases: list[str] = []
        for i, cnode in enumerate(when):
            if not self.keys(cnode, ITEM_KEYS["condition"], f"{what} condition {i + 1}"):
                continue
            alias = cnode.get("as", f"c{i + 1}")
            if not isinstance(alias, str) or not _ALIAS_RE.match(alias):
                self.err(mark_of(cnode, "as"), "E-VALUE", f"bad alias {alias!r}", "a short identifier like x or xid")
                alias = f"c{i + 1}"
            if alias in aliases:
                self.err(mark_of(cnode, "as"), "E-DUP-ID", f"alias {alias!r} used twice in {what}")
            kind = self.typed(cnode, "kind", (str,), f"{what} condition {i + 1}", required=True, default="log")
            if kind not in _FACT_KINDS_FOR_RULES:
                self.err(
                    mark_of(cnode, "kind"),
                    "E-VALUE",
                    f"unknown fact kind {kind!r}",
                    f"one of: {', '.join(_FACT_KINDS_FOR_RULES)}",
                )
            where = parse_where(cnode.get("where"), self.report, tuple(aliases))
            absent = self.duration(cnode, "absent_for", f"{what} condition {i + 1}")
            conditions.append(Condition(alias, kind, where, cnode.mark, absent))
            aliases.append(alias)
        if conditions and conditions[0].absent_for is not None:
            self.err(
                conditions[0].mark,
                "E-VALUE",
                f"{what}: the first condition cannot be an absence",
                "put the positive conditions first",
            )
        join_raw = node.get("join", ["job", "attempt"])
        join = tuple(join_raw) if isinstance(join_raw, list) and all(isinstance(j, str) for j in join_raw) else None
        if join is None:
            self.err(mark_of(node, "join"), "E-TYPE", f"{what}.join must be a list of attribute names")
            join = ("job", "attempt")
        then = self.typed(node, "then", (dict,), what, required=ov is None, default=None)
        then_kind, then_attrs, then_marks = "symptom", {}, {}
        if then is not None:
            self.keys(then, ("symptom", "fault"), f"{what}.then")
            kinds = [k for k in ("symptom", "fault") if k in then]
            if len(kinds) != 1:
                self.err(mark_of(node, "then"), "E-VALUE", f"{what}.then needs exactly one of symptom, fault")
            else:
                then_kind = kinds[0]
                body = then[then_kind]
                if not isinstance(body, dict):
                    self.err(mark_of(then, then_kind), "E-TYPE", f"{what}.then.{then_kind} must be a mapping of attrs")
                    body = {}
                then_attrs = self._then_attrs(then_kind, body, what)
                then_marks = {k: mark_of(body, k) for k in then_attrs if mark_of(body, k).file != "?"}
        return Rule(
            id=rid,
            description=desc or "",
            conditions=tuple(conditions),
            then_kind=then_kind,
            then_attrs=frozen(then_attrs),
            mark=node.mark,
            join=join,
            within=self.duration(node, "within", what),
            for_s=self.duration(node, "for", what),
            enabled=bool(self.typed(node, "enabled", (bool,), what, default=True)),
            then_marks=MappingProxyType(then_marks),
        )

    def _then_attrs(self, kind: str, body: dict, what: str) -> dict:
        for k, v in body.items():
            if k in _RESERVED_ATTRS:
                self.err(mark_of(body, k), "E-VALUE", f"attribute name {k!r} is reserved")
            if isinstance(v, dict):
                self.err(mark_of(body, k), "E-TYPE", f"{what}: derived attrs must be scalars or lists ({k})")
        if kind == "symptom":
            if not isinstance(body.get("name"), str):
                self.err(mark_of(body), "E-MISSING", f"{what}: a symptom needs a name")
            sev = body.get("severity", "error")
            if sev not in ("fatal", "error", "warning"):
                self.err(mark_of(body, "severity"), "E-VALUE", f"severity must be fatal, error or warning, got {sev!r}")
        else:
            if not isinstance(body.get("fault_class"), str):  # whether it is declared is checked after layering
                self.err(
                    mark_of(body, "fault_class") if "fault_class" in body else mark_of(body),
                    "E-MISSING",
                    f"{what}: a fault needs a fault_class",
                )
            if "priority" in body and (isinstance(body["priority"], bool) or not isinstance(body["priority"], int)):
                self.err(mark_of(body, "priority"), "E-TYPE", "priority must be an integer")
            if "nodes" in body and not isinstance(body["nodes"], list):
                self.err(mark_of(body, "nodes"), "E-TYPE", 'nodes must be a list of templates, e.g. ["{{ x.node }}"]')
        return {k: v for k, v in body.items() if not isinstance(v, dict)}

    def action(self, name: str, node: Any, overrides: dict, marks: dict) -> Action | None:
        if not self.keys(node, ITEM_KEYS["action"], f"action {name}"):
            return None
        ov = self.override(node, ITEM_KEYS["action"], f"action {name}")
        if ov is not None:
            overrides[("actions", name)] = ov
            overrides[("actions.fields", name)] = dict.fromkeys(node, "given")
        marks[("actions", name)] = node.mark
        argv = self.typed(node, "argv", (list,), f"action {name}", required=ov is None, default=[]) or []
        if not all(isinstance(a, (str, int)) for a in argv):
            self.err(mark_of(node, "argv"), "E-TYPE", f"action {name}: argv elements must be strings")
            argv = []
        if ov is None and "argv" in node and not argv:
            self.err(mark_of(node, "argv"), "E-VALUE", f"action {name}: argv is empty")
        per = node.get("per", "job")
        if per not in ("job", "node"):
            self.err(mark_of(node, "per"), "E-VALUE", f"action {name}: per must be job or node")
        timeout = self.duration(node, "timeout", f"action {name}")
        kind = node.get("kind")
        if kind is not None and kind not in ACTION_KINDS:
            self.err(
                mark_of(node, "kind"),
                "E-VALUE",
                f"action {name}: unknown kind {kind!r}",
                f"one of: {', '.join(ACTION_KINDS)}",
            )
            kind = None
        return Action(
            name=name,
            argv=tuple(str(a) for a in argv),
            mark=node.mark,
            scheduler=self.typed(node, "scheduler", (str,), f"action {name}", default="slurm") or "slurm",
            per=per if per in ("job", "node") else "job",
            verify=self.typed(node, "verify", (str,), f"action {name}", default=None),
            timeout=timeout if timeout is not None else 30.0,
            description=self.typed(node, "description", (str,), f"action {name}", default="") or "",
            kind=kind if isinstance(kind, str) else None,
        )

    def policy(self, node: Any, marks: dict) -> dict:
        return check_policy(self, node, marks)

    def fault_class(self, name: Any, node: Any, overrides: dict, marks: dict) -> FaultClass | None:
        what = f"fault class {name}"
        if not isinstance(name, str) or not _ID_RE.match(name):
            self.err(mark_of(node), "E-VALUE", f"bad fault class name {name!r}", "letters, digits, _ . -")
            return None
        if not self.keys(node, ITEM_KEYS["fault_class"], what):
            return None
        ov = self.override(node, ITEM_KEYS["fault_class"], what)
        if ov is not None:
            overrides[("fault_classes", name)] = ov
            overrides[("fault_classes.fields", name)] = dict.fromkeys(node, "given")
        marks[("fault_classes", name)] = node.mark
        decision = self.typed(node, "decision", (str,), what, required=ov is None, default="restart")
        if decision not in DECISIONS:
            self.err(
                mark_of(node, "decision"),
                "E-VALUE",
                f"{what}: unknown decision {decision!r}",
                f"one of: {', '.join(DECISIONS)}",
            )
            decision = "restart"
        retry = self.typed(node, "retry", (int,), what, default=None)
        if retry is not None and retry < 0:
            self.err(mark_of(node, "retry"), "E-VALUE", f"{what}: retry is a number of restarts >= 0")
        plan = self.typed(node, "plan", (list,), what, default=None)  # the names are checked after layering
        if plan is not None and not all(isinstance(n, str) for n in plan):
            self.err(mark_of(node, "plan"), "E-TYPE", f"{what}: plan must be a list of action names")
            plan = None
        keywords = self.typed(node, "keywords", (list,), what, default=())
        if not all(isinstance(k, str) and k.strip() for k in keywords):
            self.err(mark_of(node, "keywords"), "E-TYPE", f"{what}: keywords must be a list of non-empty strings")
            keywords = ()
        return FaultClass(
            keywords=tuple(k.strip() for k in keywords),
            name=name,
            description=self.typed(node, "description", (str,), what, required=ov is None, default="") or "",
            decision=decision,
            priority=self.typed(node, "priority", (int,), what, required=ov is None, default=0) or 0,
            mark=node.mark,
            retry=retry,
            plan=tuple(plan) if plan is not None else None,
        )

    def test(self, node: Any, overrides: dict | None = None) -> RuleTest | None:
        if not self.keys(node, ITEM_KEYS["test"], "test"):
            return None
        name = self.typed(node, "name", (str,), "test", required=True, default="?")
        inputs: list[TestInput] = []
        for inode in self.typed(node, "input", (list,), f"test {name}", default=[]) or []:
            if not self.keys(inode, ITEM_KEYS["input"], f"test {name} input"):
                continue
            src = inode.get("source", "any")
            if src not in SOURCES:
                self.err(
                    mark_of(inode, "source"), "E-VALUE", f"unknown source {src!r}", f"one of: {', '.join(SOURCES)}"
                )
            lines = self.typed(inode, "lines", (str,), f"test {name} input", required=True, default="") or ""
            inputs.append(TestInput(str(inode.get("file", "input.log")), src, lines))
        ov = self.override(node, ITEM_KEYS["test"], f"test {name}")
        if ov is not None and overrides is not None:
            overrides[("tests", name)] = ov
        enabled = bool(self.typed(node, "enabled", (bool,), f"test {name}", default=True))
        expect = self.typed(node, "expect", (list,), f"test {name}", required=ov is None and enabled, default=[]) or []
        for e in expect:
            if not isinstance(e, dict):
                self.err(mark_of(node, "expect"), "E-TYPE", f"test {name}: each expectation is a mapping")
                continue
            self.keys(e, ITEM_KEYS["expectation"], f"test {name} expectation")
            if "decision" in e and e["decision"] not in DECISIONS:
                self.err(
                    mark_of(e, "decision"),
                    "E-VALUE",
                    f"unknown decision {e['decision']!r}",
                    f"one of: {', '.join(DECISIONS)}",
                )
        context = self.typed(node, "context", (dict,), f"test {name}", default={}) or {}
        facts = self.typed(node, "facts", (list,), f"test {name}", default=[]) or []
        return RuleTest(
            name,
            tuple(inputs),
            tuple(frozen(plain(e)) for e in expect if isinstance(e, dict)),
            node.mark,
            frozen(plain(context)),
            tuple(frozen(plain(f)) for f in facts if isinstance(f, dict)),
            enabled,
        )


def check_file(tree: Any, path: str) -> tuple[FileModel, list[Diagnostic]]:
    """Validate one file's marked tree. Always returns a model (possibly partial)."""
    c = _Checker(path)
    overrides: dict = {}
    marks: dict = {}
    policy_marks: dict = {}
    lists: dict = {}
    macros: dict = {}
    matchers: list[Matcher] = []
    rules: list[Rule] = []
    actions: dict = {}
    policy: dict = {}
    tests: list[RuleTest] = []
    fault_classes: dict[str, FaultClass] = {}
    if tree is None:
        pass
    elif not isinstance(tree, dict):
        c.err(
            mark_of(tree, default=Mark(path, 1, 1)),
            "E-TYPE",
            "a rulebook file must be a mapping",
            f"top-level keys: {', '.join(SECTION_KEYS)}",
        )
    else:
        c.keys(tree, SECTION_KEYS, "the rulebook file")
        if "fault_classes" in tree:
            c.section_mark = mark_of(tree, "fault_classes")
            if not isinstance(tree["fault_classes"], dict):
                c.err(
                    mark_of(tree, "fault_classes"),
                    "E-TYPE",
                    "fault_classes must be a mapping of name -> {description, decision, priority}",
                )
            else:
                for name, node in tree["fault_classes"].items():
                    fc = c.fault_class(name, node, overrides, marks)
                    if fc is not None:
                        fault_classes[name] = fc
        if "lists" in tree:
            c.section_mark = mark_of(tree, "lists")
            lists = c.lists(tree["lists"], overrides, marks)
        if "macros" in tree:
            c.section_mark = mark_of(tree, "macros")
            macros = c.macros(tree["macros"], overrides, marks)
        seen: dict[str, Mark] = {}
        sections: tuple[tuple[str, Any, list[Any]], ...] = (("matchers", c.matcher, matchers), ("rules", c.rule, rules))
        for section, fn, out in sections:
            seen = {}
            if section not in tree:
                continue
            c.section_mark = mark_of(tree, section)
            items = tree[section]
            if not isinstance(items, list):
                c.err(mark_of(tree, section), "E-TYPE", f"{section} must be a list")
                continue
            for node in items:
                item = fn(node, overrides, marks)
                if item is None:
                    continue
                if item.id in seen:
                    c.err(
                        item.mark,
                        "E-DUP-ID",
                        f"duplicate {section[:-1]} id {item.id!r}",
                        f"first defined at line {seen[item.id].line}",
                    )
                    continue
                seen[item.id] = item.mark
                out.append(item)
        if "actions" in tree:
            c.section_mark = mark_of(tree, "actions")
            if not isinstance(tree["actions"], dict):
                c.err(mark_of(tree, "actions"), "E-TYPE", "actions must be a mapping of name -> action")
            else:
                for name, node in tree["actions"].items():
                    a = c.action(name, node, overrides, marks)
                    if a is not None:
                        actions[name] = a
        if "policy" in tree:
            c.section_mark = mark_of(tree, "policy")
            policy = c.policy(tree["policy"], policy_marks)
        if "tests" in tree:
            c.section_mark = mark_of(tree, "tests")
            if not isinstance(tree["tests"], list):
                c.err(mark_of(tree, "tests"), "E-TYPE", "tests must be a list")
            else:
                for node in tree["tests"]:
                    t = c.test(node, overrides)
                    if t is not None:
                        tests.append(t)
    model = FileModel(
        path=path,
        lists=MappingProxyType(lists),
        macros=MappingProxyType(macros),
        matchers=tuple(matchers),
        rules=tuple(rules),
        actions=MappingProxyType(actions),
        policy=frozen(policy),
        tests=tuple(tests),
        overrides=MappingProxyType(overrides),
        marks=MappingProxyType(marks),
        policy_marks=MappingProxyType(policy_marks),
        fault_classes=MappingProxyType(fault_classes),
    )
    return model, c.diags
