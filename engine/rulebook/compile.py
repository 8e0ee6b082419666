"""Last load stage: resolve references, compile regexes and templates, build the typed policy.

Nothing in a rulebook may first fail at fire time: every regex is compiled by RE2 and every
template by a sandboxed Jinja environment here, and every name a rule, plan or template uses is
checked to exist.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from engine.rulebook.conditions import aliases_used, references, resolve
from engine.rulebook.policy_model import Policy, build_policy
from engine.rulebook.model import (
    BUILTIN_FAULT_CLASSES,
    DECISIONS,
    Diagnostic,
    FaultClass,
    Matcher,
    Rule,
    Rulebook,
    frozen,
    kind_of,
)
from engine.rulebook.patterns import Analysis, check_pattern, portable
from engine.rulebook.spec import READ_BY
from engine.rulebook.templating import jinja_env, render_simple, simple_parts
from engine.rulebook.weak import QUIET_LIST
from engine.rulebook.yamlmarks import Mark

if TYPE_CHECKING:
    import jinja2

__all__ = ["CompiledRulebook", "LoadResult", "Template", "compile_rulebook", "ACTION_VARS", "jinja_env"]

ACTION_VARS = frozenset(
    {
        "incident",
        "job",
        "attempt",
        "node",
        "nodes",
        "fault_class",
        "decision",
        "reason",
        "evidence",
        "excluded",
        "fault_reason",
        "outcome",
        "alert",
    }
)
#: the sources that may make node-level claims (a Xid naming a node): the kernel's log (read by
#: the node agents) and Slurm's own daemons; never a job's output, which its user writes
NODE_CLAIM_SOURCES = frozenset({"kernel", "slurm"})


class Template:
    """A string that may be a Jinja template; plain strings render to themselves for free, and
    one that only prints variables (``NodeName={{ node }}``) of strings and integers without
    Jinja (``templating.simple_parts``: the same text, held to Jinja's by a differential test)."""

    __slots__ = ("source", "_tmpl", "_jinja", "_parts")

    def __init__(self, source: str, compiled: jinja2.Template | None):
        self.source = source
        self._tmpl = compiled
        self._jinja = compiled is not None
        self._parts = simple_parts(source) if "{{" in source else None

    def render(self, variables: Mapping[str, Any]) -> str:
        if self._parts is not None and self._jinja:
            fast = render_simple(self._parts, variables)
            if fast is not None:
                return fast
        tmpl = self._tmpl
        if tmpl is None:
            if not self._jinja:
                return self.source
            tmpl = self._tmpl = jinja_env().from_string(self.source)
        return tmpl.render(variables)

    @property
    def is_template(self) -> bool:
        return self._jinja

    def __reduce__(self):
        return (_stored_template, (self.source, self._jinja))

    def __repr__(self) -> str:
        return f"Template({self.source!r})"


def _stored_template(source: str, jinja: bool) -> Template:
    """A Template that was checked but is not compiled yet: read back from the rulebook cache
    (``stored``), or just checked by ``_compile_template``. Compiled, by the same Jinja that
    checked it (the cache's key has its version), on first render."""
    t = Template(source, None)
    t._jinja = jinja
    return t


@dataclass(frozen=True)
class CompiledRule:
    rule: Rule
    trees: tuple  # resolved where-tree per condition
    then_templates: Mapping[str, Any]  # attr -> Template or tuple of Templates or constant
    priority: int


@dataclass(frozen=True)
class CompiledAction:
    name: str
    argv: tuple[Template, ...]
    per: str
    scheduler: str
    verify: str | None
    timeout: float
    mark: Mark
    kind: str = "other"  # model.ACTION_KINDS: declared, or taken from the name (model.kind_of)


@dataclass(frozen=True, eq=False)  # identity: the scanners of a rulebook are cached on it (weakly)
class CompiledRulebook:
    book: Rulebook
    rules: tuple[CompiledRule, ...]
    actions: Mapping[str, CompiledAction]
    #: typed and frozen; it also reads as the layered policy document (``policy["plans"]``)
    policy: Policy
    #: (pattern, ignore_case, analysis) of each usable matcher, without compiled RE2s: kept with
    #: the rulebook on disk, so that a rulebook read back builds its scanners without analysing
    #: its patterns again (``patterns.remember``)
    analyses: tuple[tuple[str, bool, Analysis], ...] = ()

    @property
    def fault_classes(self) -> Mapping[str, FaultClass]:
        return self.book.fault_classes

    @functools.cached_property
    def matchers(self) -> tuple[Matcher, ...]:
        """The enabled matchers, in rulebook order: one tuple per rulebook (the readers of a
        stream key what they derive from them on its identity, engine.core.linefacts)."""
        return tuple(m for m in self.book.matchers if m.enabled)

    def rule(self, rule_id: str) -> CompiledRule | None:
        for r in self.rules:
            if r.rule.id == rule_id:
                return r
        return None


@functools.lru_cache(maxsize=4096)
def _template_check(source: str) -> tuple[frozenset[str], str | None]:
    """(the variables a Jinja template reads, why it does not compile or None), from parsing it
    and walking it with Jinja's code generator (``meta.find_undeclared_variables``: that walk is
    what finds an unknown filter or test), without compiling the code: a rulebook repeats many
    templates (133 distinct of 262 in the shipped one), and each is compiled on its first
    render (``Template.render``)."""
    import jinja2
    from jinja2 import meta

    # (a tree of its own, not ``templating.parsed``'s: Jinja's code generator folds constants
    # in the tree it walks)
    try:
        return frozenset(meta.find_undeclared_variables(jinja_env().parse(source))), None
    except jinja2.TemplateSyntaxError as exc:  # (and TemplateAssertionError, one of them)
        return frozenset(), exc.message or str(exc)


def _compile_template(
    source: str, allowed: frozenset[str] | set[str], mark: Mark, what: str, diags: list[Diagnostic]
) -> Template | None:
    if "{{" not in source and "{%" not in source and "{#" not in source:
        return Template(source, None)
    names, error = _template_check(source)
    if error is not None:
        diags.append(
            Diagnostic(mark, "E-TEMPLATE", f"{what}: template does not compile: {error}", "check {{ }} and filters")
        )
        return None
    unknown = sorted(names - set(allowed))
    if unknown:
        diags.append(
            Diagnostic(
                mark,
                "E-TEMPLATE",
                f"{what}: template uses undefined variable(s) {', '.join(unknown)}",
                f"available: {', '.join(sorted(allowed)) or 'none'}",
            )
        )
        return None
    return _stored_template(source, True)  # compiled on first render


@dataclass(frozen=True)
class LoadResult:
    """What loading a rulebook gave: the compiled book (None when it could not be built), every
    diagnostic, the files read. Here beside ``CompiledRulebook`` so that ``stored`` (the on-disk
    cache of these) needs nothing from the package that uses it."""

    compiled: CompiledRulebook | None
    diagnostics: tuple[Diagnostic, ...]
    files: tuple[str, ...]

    @property
    def errors(self) -> tuple[Diagnostic, ...]:
        return tuple(d for d in self.diagnostics if d.severity == "error")

    @property
    def ok(self) -> bool:
        return self.compiled is not None and not self.errors


def compile_rulebook(
    book: Rulebook, inherited_plans: Mapping[str, Sequence[str]] | None = None
) -> tuple[CompiledRulebook, list[Diagnostic]]:
    """``inherited_plans``: the plans of the shipped policy file when it is loaded under
    --no-defaults as the policy's defaults (see ``engine.rulebook.policy_files``); a plan left as
    shipped may name an action such a rulebook does not define (the planner then says so for that
    incident), every other plan must name defined actions."""

    diags: list[Diagnostic] = []
    used_lists: set[str] = set()
    used_macros: set[str] = set()

    # macros may use lists and other macros
    for tree in book.macros.values():
        ls, ms = references(tree)
        used_lists |= ls
        used_macros |= ms

    def reporter(default_mark: Mark):
        def report(mark: Mark, code: str, message: str, hint: str) -> None:
            diags.append(Diagnostic(mark if mark.line else default_mark, code, message, hint))

        return report

    for m in book.matchers:
        if not m.enabled:
            continue
        problem = check_pattern(m.pattern)
        if problem:
            diags.append(Diagnostic(m.mark, "E-REGEX", f"matcher {m.id}: {problem}", "patterns are RE2 syntax"))
            continue
        if m.emit == "xid" and not set(m.sources) <= NODE_CLAIM_SOURCES:
            # a Xid names a node to drain: a job's log (written by the job's user) may not say that
            diags.append(
                Diagnostic(
                    m.mark,
                    "E-SOURCE",
                    f"matcher {m.id}: emit xid is a node-level claim; "
                    f"it accepts {', '.join(sorted(NODE_CLAIM_SOURCES))} sources only, not "
                    f"{', '.join(s for s in m.sources if s not in NODE_CLAIM_SOURCES)}",
                    "source: [kernel] (or [kernel, slurm])",
                )
            )
        if m.emit == "xid" and "(?P<code>" not in m.pattern:
            diags.append(Diagnostic(m.mark, "E-REGEX", f"matcher {m.id}: emit xid needs a (?P<code>...) group"))
        if f"(?P<{READ_BY}>" in m.pattern or f"(?<{READ_BY}>" in m.pattern:
            # the scan sets it on an ending line a specific matcher read; text must never set it
            diags.append(Diagnostic(m.mark, "E-REGEX", f"matcher {m.id}: group name {READ_BY!r} is reserved"))
        for group in m.types:
            if f"(?P<{group}>" not in m.pattern:
                diags.append(
                    Diagnostic(
                        m.mark,
                        "E-REF",
                        f"matcher {m.id}: types names group {group!r}, which the pattern lacks",
                        "",
                        "warning",
                    )
                )

    declared = {
        **{
            fc: FaultClass(fc, "no rule explains the failure", "restart", 0, Mark("?", 0, 0))
            for fc in BUILTIN_FAULT_CLASSES
        },
        **dict(book.fault_classes),
    }
    class_decisions = {name: fc.decision for name, fc in declared.items()}
    class_priorities = {name: fc.priority for name, fc in declared.items()}
    priorities = {**class_priorities, **dict(book.policy.get("priorities", {}))}
    compiled_rules: list[CompiledRule] = []
    for rule in book.rules:
        if not rule.enabled:
            continue
        report = reporter(rule.mark)
        trees = []
        for cond in rule.conditions:
            ls, ms = references(cond.where)
            used_lists |= ls
            used_macros |= ms
            for name in ls:
                if name not in book.lists:
                    diags.append(
                        Diagnostic(
                            cond.mark,
                            "E-REF",
                            f"rule {rule.id}: unknown list {name!r}",
                            f"known: {', '.join(sorted(book.lists)) or 'none'}",
                        )
                    )
            trees.append(resolve(cond.where, book.lists, book.macros, report))
        aliases = {c.alias for c in rule.conditions if c.absent_for is None}
        for cond in rule.conditions:
            if cond.absent_for is not None and not rule.join and not aliases_used(cond.where):
                diags.append(
                    Diagnostic(
                        cond.mark,
                        "E-VALUE",
                        f"rule {rule.id}: an absence needs join attributes or a same: test",
                        "otherwise any fact anywhere would cancel it",
                    )
                )
        templates: dict[str, Any] = {}
        for key, value in rule.then_attrs.items():
            if isinstance(value, tuple):
                items = tuple(
                    _compile_template(v, aliases, rule.mark, f"rule {rule.id} then.{key}", diags)
                    if isinstance(v, str)
                    else v
                    for v in value
                )
                templates[key] = items
            elif isinstance(value, str):
                templates[key] = _compile_template(value, aliases, rule.mark, f"rule {rule.id} then.{key}", diags)
            else:
                templates[key] = value
        pri = rule.then_attrs.get("priority")
        if pri is None and rule.then_kind == "fault":
            pri = priorities.get(rule.then_attrs.get("fault_class", "unknown"), 0)
        compiled_rules.append(CompiledRule(rule, tuple(trees), MappingProxyType(templates), int(pri or 0)))

    actions: dict[str, CompiledAction] = {}
    for name, action in book.actions.items():
        argv: list[Any] = []
        ok = True
        for i, elem in enumerate(action.argv):
            t = _compile_template(elem, ACTION_VARS, action.mark, f"action {name} argv[{i}]", diags)
            ok = ok and t is not None
            argv.append(t)
        if action.per == "job" and any(
            t is not None and t.is_template and "node" in _template_check(t.source)[0] for t in argv
        ):
            diags.append(
                Diagnostic(
                    action.mark,
                    "E-TEMPLATE",
                    f"action {name}: uses {{{{ node }}}} but runs once per job",
                    "set per: node, or use nodes",
                )
            )
            ok = False
        if ok:
            actions[name] = CompiledAction(
                name,
                tuple(argv),
                action.per,
                action.scheduler,
                action.verify,
                action.timeout,
                action.mark,
                kind_of(action),
            )

    # the policy's defaults are the shipped rules/50-policy.yaml, always loaded (see load_rulebook);
    # decisions and priorities start from the declared fault classes
    policy: dict[str, Any] = {"decisions": {}, "priorities": {}, "plans": {}}
    policy["decisions"].update(class_decisions)
    policy["priorities"].update(class_priorities)
    # a class's retry budget is the default of policy.retry.per_class, which may still change it
    retry_budgets = {name: fc.retry for name, fc in declared.items() if fc.retry is not None}
    if retry_budgets:
        retry = dict(policy.get("retry") or {})
        retry["per_class"] = {**retry_budgets, **dict(retry.get("per_class") or {})}
        policy["retry"] = retry
    for key, value in book.policy.items():
        if isinstance(value, Mapping) and isinstance(policy.get(key), dict):
            policy[key].update(value)
        else:
            policy[key] = value
    pmark = Mark(book.files[-1] if book.files else "?", 1, 1)
    inherited = inherited_plans or {}
    for dec, names in dict(book.policy.get("plans", {})).items():
        if dec in inherited and tuple(names) == tuple(inherited[dec]):
            continue
        for n in names:
            if n not in book.actions:
                marks = book.origins.get(("policy", "plans"), (pmark,))
                diags.append(
                    Diagnostic(
                        marks[-1],
                        "E-REF",
                        f"policy.plans.{dec} names unknown action {n!r}",
                        f"known: {', '.join(sorted(book.actions)) or 'none'}",
                    )
                )
    for dec in DECISIONS:
        policy["plans"].setdefault(dec, ())
    for name, fc in book.fault_classes.items():  # a class's own plan names defined actions too
        for n in fc.plan or ():
            if n not in book.actions:
                diags.append(
                    Diagnostic(
                        book.origins.get(("fault_classes", name), (fc.mark,))[-1],
                        "E-REF",
                        f"fault class {name}: plan names unknown action {n!r}",
                        f"known: {', '.join(sorted(book.actions)) or 'none'}",
                    )
                )

    if any(m.unless for m in book.matchers):
        used_lists.add(QUIET_LIST)  # read by the weak-evidence matchers (engine/rulebook/weak.py)
    for name in book.lists:
        if name not in used_lists:
            diags.append(
                Diagnostic(book.origins[("lists", name)][-1], "W-UNUSED", f"list {name!r} is never used", "", "warning")
            )
    for name in book.macros:
        if name not in used_macros:
            diags.append(
                Diagnostic(
                    book.origins[("macros", name)][-1], "W-UNUSED", f"macro {name!r} is never used", "", "warning"
                )
            )

    # the cross-reference checks need the whole layered book; imported here, not at the top, so
    # that reading a compiled rulebook back from the cache never imports Jinja (lint does)
    from engine.rulebook.lint import lint

    diags.extend(lint(book, compiled_rules))
    typed, missing = build_policy(frozen(_seconds(policy)))
    for key in missing:  # the shipped 50-policy.yaml sets every key: no number in code stands in
        top = key.split(".")[1]
        diags.append(
            Diagnostic(
                book.origins.get(("policy", top), (pmark,))[-1],
                "E-POLICY",
                f"{key} has no value",
                "rules/50-policy.yaml sets every policy default and is loaded even with --no-defaults; "
                "restore it, or set the key in your rulebook",
            )
        )
    analyses = tuple(
        (m.pattern, bool(m.ignore_case), portable(m.pattern, bool(m.ignore_case)))
        for m in book.matchers
        if m.enabled and check_pattern(m.pattern) is None
    )
    return CompiledRulebook(book, tuple(compiled_rules), MappingProxyType(actions), typed, analyses), diags


def _seconds(policy: dict[str, Any]) -> dict[str, Any]:
    """Every duration of the policy in seconds, parsed once here: the core reads numbers, never
    '10m' (the schema has already refused what does not parse)."""
    from engine.rulebook.spec import GUARDS, Dur, parse_duration

    out = dict(policy)
    for key in ("settle", "cascade"):
        if isinstance(out.get(key), str):
            out[key] = parse_duration(out[key])
    for guard, spec in GUARDS.items():
        cfg = out.get(guard)
        if isinstance(cfg, Mapping):
            cfg = dict(cfg)
            for k, kind in spec.props.items():
                if isinstance(kind, Dur) and isinstance(cfg.get(k), str):
                    cfg[k] = parse_duration(cfg[k])
            out[guard] = cfg
    return out
