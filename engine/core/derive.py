"""What a rule firing derives: the attributes of the symptom, fault or decision a rule asserts,
rendered from its ``then`` templates and the facts it matched.

A rule's templates read a few attributes of the matched facts (``{{ x.code }}``, ``{{ l.text |
default('') }}``); rendering them through Jinja costs more than the rest of a firing. A template
whose output depends only on named attributes of named aliases (no bare alias, no ``random``) is
rendered once per distinct set of those values and remembered (``TemplateMemo``); the identity of
a derived fact is remembered per rule and attribute values the same way. Anything a template
could see differently (another value, another type: ``1`` and ``True`` are different keys) is a
different key, and a render that fails is never remembered, so it fails, and is counted, again.

    derivation = Derivation(compiled_rule)
    attrs, ident = derivation.identity(matched, on_error)
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Mapping

from jinja2 import TemplateSyntaxError, nodes

from engine.facts import NODE_RE, Fact
from engine.rulebook.compile import CompiledRule, Template
from engine.rulebook.templating import parsed

logger = logging.getLogger(__name__)

__all__ = ["DISPLAY_ONLY", "Derivation", "TemplateMemo", "template_reads", "view"]

#: attributes that only describe a conclusion: not part of its identity, rendered only when it is new
DISPLAY_ONLY = frozenset({"text", "evidence", "reason", "logged_at"})
#: remembered renders per template (a bound, not a target: a full memo is simply emptied)
MEMO_SIZE = 4096
_MISSING = object()
#: filters whose output is not a function of their input
_IMPURE_FILTERS = frozenset({"random", "shuffle"})


class _View(dict):
    """A matched fact for templates: attribute access, lists for tuples."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


def view(m: Mapping[str, Any]) -> _View:
    return _View(m)


def template_reads(source: str) -> tuple[tuple[str, str], ...] | None:
    """The (alias, attribute) pairs a template's output depends on, or None when it may depend on
    anything else (a bare alias, a global, an impure filter, a name a dict has as a method)."""
    try:
        ast = parsed(source)
    except TemplateSyntaxError:  # the compiler parsed it already; an unparsable one is simply not memoised
        return None
    reads: set[tuple[str, str]] = set()
    wrapped: set[int] = set()
    for node in ast.find_all((nodes.Getattr, nodes.Getitem)):
        inner = getattr(node, "node", None)
        if not isinstance(inner, nodes.Name):
            continue
        arg = getattr(node, "arg", None)
        if isinstance(node, nodes.Getattr):
            attr = node.attr
        elif isinstance(arg, nodes.Const) and isinstance(arg.value, str):
            attr = arg.value
        else:
            return None
        if attr.startswith("_") or hasattr(dict, attr):
            return None  # x.items would be the dict's method, not the fact's attribute
        reads.add((inner.name, attr))
        wrapped.add(id(inner))
    for name in ast.find_all(nodes.Name):
        if id(name) not in wrapped:
            return None
    for f in ast.find_all(nodes.Filter):
        if f.name in _IMPURE_FILTERS:
            return None
    return tuple(sorted(reads))


def _key_of(value: Any) -> Any:
    # the type is part of the key: 1, 1.0 and True are equal and hash alike, but render differently
    if isinstance(value, list):
        return (list, tuple(_key_of(v) for v in value))
    return (type(value), value)


class TemplateMemo:
    """One template's renders, by the values of what it reads (see ``template_reads``)."""

    __slots__ = ("template", "reads", "memo")

    def __init__(self, template: Template, memo: bool = True):
        self.template = template
        self.reads = template_reads(template.source) if memo and template.is_template else None
        self.memo: dict[tuple, str] = {}

    def render(self, matched: Mapping[str, Mapping[str, Any]], variables: Callable[[], Mapping[str, Any]]) -> str:
        if self.reads is None:
            return self.template.render(variables())
        key = tuple(_key_of(matched[a].get(attr, _MISSING)) if a in matched else _MISSING for a, attr in self.reads)
        out = self.memo.get(key)
        if out is None:
            out = self.template.render(variables())  # raises: nothing remembered
            if len(self.memo) >= MEMO_SIZE:
                self.memo.clear()
            self.memo[key] = out
        return out


class Derivation:
    """A rule's ``then``, ready to fire: its templates memoised, its conclusions' ids remembered."""

    def __init__(self, cr: CompiledRule, memo: bool = True):
        self.cr = cr
        self.memo = memo  # False: every template rendered and every id hashed (the reference path)
        rule = cr.rule
        self.memos: dict[int, TemplateMemo] = {}
        self.identity_items = [(k, v) for k, v in cr.then_templates.items() if k not in DISPLAY_ONLY]
        self.display_items = [(k, v) for k, v in cr.then_templates.items() if k in DISPLAY_ONLY]
        self.implicit = ("job", "attempt") + (("node",) if rule.then_kind == "symptom" else ())
        self.aliases = [c.alias for c in rule.conditions]
        self.origin = f"rule:{rule.id}"
        self.ids: dict[tuple, str] = {}
        # the whole identity by the values it reads (None: a template may read anything)
        self._identity_reads: tuple[tuple[str, str], ...] | None | bool = False  # False: not yet known
        self.identities: dict[tuple, tuple[dict[str, Any], str]] = {}

    def _memo(self, template: Template) -> TemplateMemo:
        memo = self.memos.get(id(template))
        if memo is None:
            memo = self.memos[id(template)] = TemplateMemo(template, self.memo)
        return memo

    def _render(self, value: Any, matched: Mapping[str, dict], variables: Callable[[], Mapping[str, Any]], on_error):
        if isinstance(value, Template):
            try:
                return self._memo(value).render(matched, variables)
            except Exception as exc:  # a template failing at fire time is logged and counted, not fatal
                logger.warning("rule %s: template failed: %s", self.cr.rule.id, exc)
                on_error(exc)
                return None
        if isinstance(value, tuple):
            items = (self._render(v, matched, variables, on_error) for v in value)
            return tuple(i for i in items if i not in ("", None))
        return value

    def render_items(self, items, matched, variables, on_error, attrs: dict[str, Any]) -> None:
        for key, value in items:
            rendered = self._render(value, matched, variables, on_error)
            if rendered is not None:
                attrs[key] = rendered

    def _reads_of_identity(self) -> tuple[tuple[str, str], ...] | None:
        reads: set[tuple[str, str]] = set()
        for _, value in self.identity_items:
            for t in value if isinstance(value, tuple) else (value,):
                if isinstance(t, Template) and t.is_template:
                    found = self._memo(t).reads
                    if found is None:
                        return None
                    reads.update(found)
        reads.update((a, name) for a in self.aliases for name in self.implicit)
        return tuple(sorted(reads))

    def identity(self, matched: Mapping[str, dict], variables, on_error) -> tuple[dict[str, Any], str]:
        """The derived fact's attributes but its display-only ones, and its id (which raises
        FactError when they are malformed)."""
        whole: tuple | None = None
        if self.memo:
            if self._identity_reads is False:
                self._identity_reads = self._reads_of_identity()
            reads = self._identity_reads
            if isinstance(reads, tuple):
                whole = tuple(
                    _key_of(matched[a].get(attr, _MISSING)) if a in matched else _MISSING for a, attr in reads
                )
                hit = self.identities.get(whole)
                if hit is not None:
                    return dict(hit[0]), hit[1]
        failed: list[Exception] = []

        def counted(exc: Exception) -> None:
            failed.append(exc)
            on_error(exc)

        attrs, ident = self._identity(matched, variables, counted, remember=whole is None)
        if whole is not None and not failed:  # a failed render is never remembered
            if len(self.identities) >= MEMO_SIZE:
                self.identities.clear()
            self.identities[whole] = (dict(attrs), ident)
        return attrs, ident

    def _identity(
        self, matched: Mapping[str, dict], variables, on_error, remember: bool = True
    ) -> tuple[dict[str, Any], str]:
        """``remember``: keep the id by the attributes (not needed where ``identity`` keeps it by
        the values its templates read)."""
        rule = self.cr.rule
        attrs: dict[str, Any] = {}
        self.render_items(self.identity_items, matched, variables, on_error, attrs)
        ordered = [matched[a] for a in self.aliases if a in matched]
        for name in self.implicit:
            if name not in attrs:
                for m in ordered:
                    if m.get(name) is not None:
                        attrs[name] = m[name]
                        break
        if rule.then_kind == "fault":
            found = attrs.get("nodes", ())
            if isinstance(found, str):
                found = (found,)
            attrs["nodes"] = tuple(sorted({n for n in found if isinstance(n, str) and NODE_RE.match(n)}))
            attrs["priority"] = self.cr.priority
        else:
            attrs.setdefault("severity", "error")
        attrs["rule"] = rule.id
        key: tuple | None = None
        if self.memo and remember:
            try:
                key = tuple((k, _key_of(list(v) if isinstance(v, tuple) else v)) for k, v in attrs.items())
                hash(key)
            except TypeError:
                key = None
        ident = self.ids.get(key) if key is not None else None
        if ident is None:
            ident = Fact.make(rule.then_kind, attrs, 0.0, self.origin).id
            if key is not None:
                if len(self.ids) >= MEMO_SIZE:
                    self.ids.clear()
                self.ids[key] = ident
        return attrs, ident
