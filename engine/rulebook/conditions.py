"""The engine-neutral condition tree, its parser, its resolver, and a reference evaluator.

A where-clause such as ``{name: {in: "@hw"}, node: {same: x.node}, any: [...]}`` parses into::

    All((Cmp("name", "in", ListRef("hw")), Same("node", "x", "node"), Any((...))))

``resolve`` replaces list and macro references after layering. ``evaluate`` is the reference
semantics: the durable_rules compilation in ``engine/core/rete.py`` must agree with it, and the
engine uses it directly for the parts the Rete does not see (absences, progress).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from engine.rulebook.yamlmarks import MList, Mark, mark_of

__all__ = [
    "Cmp",
    "Same",
    "AnyOf",
    "AllOf",
    "ListRef",
    "MacroRef",
    "OPS",
    "parse_where",
    "resolve",
    "evaluate",
    "join_holds",
    "references",
    "aliases_used",
]

OPS = ("eq", "ne", "gt", "ge", "lt", "le", "in", "not_in", "exists")
_ORDERED = ("gt", "ge", "lt", "le")


@dataclass(frozen=True)
class ListRef:
    name: str


@dataclass(frozen=True)
class MacroRef:
    name: str
    mark: Mark


@dataclass(frozen=True)
class Cmp:
    attr: str
    op: str
    value: Any  # scalar, tuple of scalars, or ListRef for in/not_in


@dataclass(frozen=True)
class Same:
    attr: str
    alias: str
    ref_attr: str


@dataclass(frozen=True)
class AnyOf:
    items: tuple


@dataclass(frozen=True)
class AllOf:
    items: tuple


_SCALAR = (str, int, float, bool)
Report = Callable[[Mark, str, str, str], None]  # (mark, code, message, hint)


def _scalar_list(value: Any, mark: Mark, report: Report) -> Any:
    if isinstance(value, str) and value.startswith("@"):
        return ListRef(value[1:])
    if isinstance(value, list):
        if all(isinstance(v, _SCALAR) for v in value):
            return tuple(value)
        report(mark, "E-TYPE", "the values of in/not_in must be scalars", "")
        return ()
    report(mark, "E-TYPE", 'in/not_in takes a list or a list reference such as "@fatal_xids"', "")
    return ()


def parse_where(raw: Any, report: Report, aliases: tuple[str, ...] = ()) -> AllOf:
    """Parse a where-clause mapping. Problems go to ``report``; the result is always a tree."""
    if raw is None:
        return AllOf(())
    if not isinstance(raw, dict):
        report(mark_of(raw), "E-TYPE", "a where-clause must be a mapping of attribute -> test", "")
        return AllOf(())
    items: list[Any] = []
    for key, value in raw.items():
        m = mark_of(raw, key)
        if key == "any":
            if not isinstance(value, list) or not value:
                report(m, "E-TYPE", "any: takes a non-empty list of where-clauses", "")
                continue
            items.append(AnyOf(tuple(parse_where(v, report, aliases) for v in value)))
        elif key == "macro":
            names = value if isinstance(value, list) else [value]
            for i, name in enumerate(names):
                if not isinstance(name, str):
                    report(m, "E-TYPE", "macro: takes a macro name or a list of names", "")
                    continue
                items.append(MacroRef(name, mark_of(value, i, m) if isinstance(value, MList) else m))
        elif not isinstance(key, str) or not key:
            report(m, "E-TYPE", "attribute names must be non-empty strings", "")
        elif isinstance(value, dict):
            if len(value) != 1:
                report(
                    m,
                    "E-TYPE",
                    f"test of {key!r} must have exactly one operator, got {len(value)}",
                    f"one of: {', '.join(OPS + ('same',))}",
                )
                continue
            ((op, arg),) = value.items()
            om = mark_of(value, op, m)
            if op == "same":
                if not isinstance(arg, str) or arg.count(".") != 1:
                    report(om, "E-TYPE", "same: takes ALIAS.attr, e.g. x.node", "")
                    continue
                alias, attr = arg.split(".")
                if alias not in aliases:
                    report(
                        om,
                        "E-REF",
                        f"same: refers to alias {alias!r}, which no earlier condition defines",
                        f"earlier aliases: {', '.join(aliases) or 'none'}",
                    )
                    continue
                items.append(Same(key, alias, attr))
            elif op not in OPS:
                report(om, "E-UNKNOWN-OP", f"unknown operator {op!r}", f"one of: {', '.join(OPS + ('same',))}")
            elif op in ("in", "not_in"):
                items.append(Cmp(key, op, _scalar_list(arg, om, report)))
            elif op == "exists":
                if not isinstance(arg, bool):
                    report(om, "E-TYPE", "exists: takes true or false", "")
                    continue
                items.append(Cmp(key, op, arg))
            else:
                if not isinstance(arg, _SCALAR):
                    report(om, "E-TYPE", f"{op}: takes a scalar value", "")
                    continue
                if op in _ORDERED and (isinstance(arg, bool) or not isinstance(arg, (int, float))):
                    report(om, "E-TYPE", f"{op}: compares numbers; got {arg!r}", "")
                    continue
                items.append(Cmp(key, op, arg))
        elif isinstance(value, list):
            report(m, "E-TYPE", f"{key}: a list needs an operator", f"write {key}: {{in: [...]}}")
        elif isinstance(value, _SCALAR):
            items.append(Cmp(key, "eq", value))
        else:
            report(m, "E-TYPE", f"{key}: unsupported test value {value!r}", "")
    return AllOf(tuple(items))


def references(tree: Any) -> tuple[set[str], set[str]]:
    """(list names, macro names) a tree refers to."""
    lists: set[str] = set()
    macros: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, (AllOf, AnyOf)):
            for item in node.items:
                walk(item)
        elif isinstance(node, MacroRef):
            macros.add(node.name)
        elif isinstance(node, Cmp) and isinstance(node.value, ListRef):
            lists.add(node.value.name)

    walk(tree)
    return lists, macros


def aliases_used(tree: Any) -> set[str]:
    out: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, (AllOf, AnyOf)):
            for item in node.items:
                walk(item)
        elif isinstance(node, Same):
            out.add(node.alias)

    walk(tree)
    return out


def resolve(tree: Any, lists: Mapping[str, tuple], macros: Mapping[str, Any], report: Report, _depth: int = 0) -> Any:
    """Replace ListRef and MacroRef. Unknown names and macro cycles are reported."""
    if isinstance(tree, (AllOf, AnyOf)):
        out: list[Any] = []
        for item in tree.items:
            if isinstance(item, MacroRef):
                if item.name not in macros:
                    report(
                        item.mark,
                        "E-REF",
                        f"unknown macro {item.name!r}",
                        f"known: {', '.join(sorted(macros)) or 'none'}",
                    )
                    continue
                if _depth > 16:
                    report(item.mark, "E-REF", f"macro {item.name!r} nests too deeply (a cycle?)", "")
                    continue
                expanded = resolve(macros[item.name], lists, macros, report, _depth + 1)
                out.extend(expanded.items if isinstance(expanded, AllOf) else [expanded])
            else:
                out.append(resolve(item, lists, macros, report, _depth))
        return type(tree)(tuple(out))
    if isinstance(tree, Cmp) and isinstance(tree.value, ListRef):
        name = tree.value.name
        if name not in lists:  # reported by the compiler, with the condition's position
            return Cmp(tree.attr, tree.op, ())
        return Cmp(tree.attr, tree.op, tuple(lists[name]))
    return tree


def _eq(a: Any, b: Any) -> bool:
    # as in Python and in durable_rules, False == 0 and True == 1
    return a == b


def evaluate(tree: Any, fact: Mapping[str, Any], bound: Mapping[str, Mapping[str, Any]] | None = None) -> bool:
    """Reference semantics of a resolved tree over a flat fact mapping (attrs plus kind/at)."""
    if isinstance(tree, AllOf):
        return all(evaluate(i, fact, bound) for i in tree.items)
    if isinstance(tree, AnyOf):
        return any(evaluate(i, fact, bound) for i in tree.items)
    if isinstance(tree, Same):
        other = (bound or {}).get(tree.alias)
        if other is None or tree.attr not in fact or tree.ref_attr not in other:
            return False
        return _eq(fact[tree.attr], other[tree.ref_attr])
    if isinstance(tree, Cmp):
        present = tree.attr in fact and fact[tree.attr] is not None
        if tree.op == "exists":
            return present == tree.value
        if not present:
            return tree.op in ("ne", "not_in")
        v = fact[tree.attr]
        if tree.op == "eq":
            return _eq(v, tree.value)
        if tree.op == "ne":
            return not _eq(v, tree.value)
        if tree.op == "in":
            return any(_eq(v, x) for x in tree.value)
        if tree.op == "not_in":
            return not any(_eq(v, x) for x in tree.value)
        if not isinstance(v, (int, float)):  # text: ordered tests are defined on numbers only
            return False
        return {"gt": v > tree.value, "ge": v >= tree.value, "lt": v < tree.value, "le": v <= tree.value}[tree.op]
    raise TypeError(f"not a resolved condition: {tree!r}")


def join_holds(join: tuple[str, ...], matched: list[Mapping[str, Any]]) -> bool:
    """Reference semantics of a rule's ``join`` over the facts of one firing (its positive
    conditions, in order): every join attribute is present in each of them and equal to the
    first one's. A fact without the attribute (a node's fact whose job is not known) joins no
    one: facts of different jobs or attempts meet only when a rule asks for it (``join: []``,
    or a join on other attributes)."""
    if len(matched) < 2:
        return True
    first = matched[0]
    for attr in join:
        if first.get(attr) is None:
            return False
        if any(m.get(attr) is None or not _eq(m[attr], first[attr]) for m in matched[1:]):
            return False
    return True
