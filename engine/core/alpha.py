"""Facts that only single-condition rules can read, judged in Python instead of the Rete
(issue 24, item 3).

A rule with one positive condition (``symptom.cuda_oom``: a log fact of one matcher) fires on a
fact alone: the fact's own attributes decide, no other fact does. durable_rules still costs
~25 µs per assertion for such a fact (its JSON parsed, every alpha node of its kind visited, the
fact kept in the session's state), and most facts of a failing job are of this sort: each rank's
log line, and the symptom each line derives. So a fact goes to the Rete only when it may take part
in a correlation; otherwise the single-condition rules it can meet are evaluated here, with the
rulebook's reference semantics (``conditions.evaluate``, the differential oracle of
``tests/core/test_rete_differential.py``).

Which facts may take part in a correlation is derived from the compiled rulebook, never a hand
list: a fact enters the Rete when some condition of a rule with two or more positive conditions
could accept it on its own attributes (its kind, and each comparison with a constant; a reference
to another alias counts as "could"). A site rule that starts correlating a fact therefore makes
that fact enter the Rete again.

What this judge returns is exactly what the Rete would return, or ``None`` (then the caller
asserts the fact into the Rete as before):
- the firings, in a list of at most one: when two or more single-condition rules accept a fact,
  durable_rules' order of their firings is its own, so such a fact goes to the Rete;
- the matched fact is the message that would have been asserted (the Rete hands back an equal
  dict: ``tests/core/test_alpha.py``);
- a fact whose message holds a value the reference semantics and durable_rules might judge apart
  (a boolean, a list, a float that is not finite) goes to the Rete;
- ``handled`` (did any rule take it) is whether one fired: durable_rules keeps a fact that
  passes some condition's constant tests, and here no correlation's condition does.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any, Callable, Iterable, Mapping

from engine.rulebook.compile import CompiledRule
from engine.rulebook.conditions import AllOf, AnyOf, Cmp, Same, evaluate

__all__ = ["AlphaJudge", "may_accept"]

#: a condition's test (``compile_test``), the rule it belongs to and its alias (None for a
#: correlation's condition), and its comparisons' attributes and sorts (``_typed``)
_Entry = tuple[Any, CompiledRule | None, str | None, tuple[tuple[str, bool], ...]]


def may_accept(tree: Any, msg: Mapping[str, Any]) -> bool:
    """Could a condition accept this fact, whatever the other facts are? Comparisons with a
    constant are evaluated (the reference semantics); a reference to another alias is taken as
    true. The trees hold no negation, so this is never false where the condition could hold."""
    if isinstance(tree, AllOf):
        return all(may_accept(i, msg) for i in tree.items)
    if isinstance(tree, AnyOf):
        return any(may_accept(i, msg) for i in tree.items)
    if isinstance(tree, Same):
        return True
    return evaluate(tree, msg)


_Test = Callable[[Mapping[str, Any]], bool]


def _always(msg: Mapping[str, Any]) -> bool:
    return True


def compile_test(tree: Any, may: bool) -> _Test:
    """``evaluate`` (``may``: ``may_accept``) of one tree as a function of the message, built
    once: the same answers, without walking the tree per fact (``tests/core/test_alpha.py``)."""
    if isinstance(tree, (AllOf, AnyOf)):
        parts = tuple(compile_test(i, may) for i in tree.items)
        if len(parts) == 1:
            return parts[0]
        if isinstance(tree, AllOf):
            return lambda msg: all(p(msg) for p in parts)
        return lambda msg: any(p(msg) for p in parts)
    if isinstance(tree, Same):
        if may:
            return _always
        return lambda msg: evaluate(tree, msg)
    if isinstance(tree, Cmp):
        attr, op, value = tree.attr, tree.op, tree.value
        if op == "eq":
            return lambda msg: msg.get(attr) is not None and msg[attr] == value
        if op == "in":
            return lambda msg: msg.get(attr) is not None and any(msg[attr] == x for x in value)
        if op == "not_in":
            return lambda msg: msg.get(attr) is None or not any(msg[attr] == x for x in value)
        if op == "exists":
            return lambda msg: (msg.get(attr) is not None) == value
    return lambda msg: evaluate(tree, msg)  # ne and the ordered tests: the reference itself


def _typed(tree: Any) -> tuple[tuple[str, bool], ...]:
    """(attribute, compared with text?) for each comparison of a tree with a constant. A fact
    whose value there is of the other sort (text against a number, a number against text) goes to
    the Rete: there durable_rules and the reference may answer apart (``"79" > 173`` holds in
    durable_rules, not in the reference)."""
    if isinstance(tree, (AllOf, AnyOf)):
        return tuple(dict.fromkeys(t for i in tree.items for t in _typed(i)))
    if not isinstance(tree, Cmp) or tree.op == "exists":
        return ()
    values = tree.value if isinstance(tree.value, tuple) else (tree.value,)
    return tuple(dict.fromkeys((tree.attr, isinstance(v, str)) for v in values))


def _apart(typed: tuple[tuple[str, bool], ...], msg: Mapping[str, Any]) -> bool:
    for attr, text in typed:
        value = msg.get(attr)
        if value is not None and (type(value) is str) != text:
            return True
    return False


def _keys(tree: Any, attr: str) -> tuple | None:
    """The values of ``attr`` a condition's tree requires (top-level ``eq`` / ``in``), or None."""
    items = tree.items if isinstance(tree, AllOf) else (tree,)
    for item in items:
        if isinstance(item, Cmp) and item.attr == attr:
            if item.op == "eq" and isinstance(item.value, (str, int)) and not isinstance(item.value, bool):
                return (item.value,)
            if item.op == "in" and all(isinstance(v, (str, int)) and not isinstance(v, bool) for v in item.value):
                return tuple(item.value)
    return None


def _plain(msg: Mapping[str, Any]) -> bool:
    """Every value a string, an integer (not a boolean) or a finite float."""
    for value in msg.values():
        t = type(value)
        if t is str or t is int:
            continue
        if t is not float or not math.isfinite(value):
            return False
    return True


class _KindIndex:
    """The conditions of one fact kind, indexed by the attribute most of them fix (``matcher``
    for log facts, ``name`` for symptoms): a fact meets only the conditions that name its value,
    and those that fix none, in the rules' order."""

    def __init__(self, entries: list[tuple[Any, CompiledRule | None, str | None]], may: bool):
        votes: Counter[str] = Counter()
        for tree, _, _ in entries:
            for item in tree.items if isinstance(tree, AllOf) else (tree,):
                if isinstance(item, Cmp) and item.op in ("eq", "in"):
                    votes[item.attr] += 1
        self.attr = votes.most_common(1)[0][0] if votes else None
        self.always: list[tuple[int, _Entry]] = []
        self.by_value: dict[Any, list[tuple[int, _Entry]]] = {}
        for pos, (tree, cr, alias) in enumerate(entries):
            entry = (compile_test(tree, may), cr, alias, _typed(tree))
            keys = _keys(tree, self.attr) if self.attr else None
            if keys is None:
                self.always.append((pos, entry))
            else:
                for key in dict.fromkeys(keys):
                    self.by_value.setdefault(key, []).append((pos, entry))
        self._merged: dict[Any, list[_Entry]] = {}

    def candidates(self, msg: Mapping[str, Any]) -> list[_Entry]:
        value = msg.get(self.attr) if self.attr else None
        if type(value) not in (str, int, float):  # 79.0 finds the conditions on 79, as it equals it
            value = None
        merged = self._merged.get(value)
        if merged is None:
            picked = self.always + (self.by_value.get(value, []) if value is not None else [])
            merged = [entry for _, entry in sorted(picked, key=lambda pe: pe[0])]
            if len(self._merged) < 4096:
                self._merged[value] = merged
        return merged


class AlphaJudge:
    """Built once per compiled rulebook (``ReteNetwork.alpha``) from the rules that go into the
    Rete, keyed as the Rete keys them."""

    def __init__(self, rules: Iterable[CompiledRule]):
        single: dict[str, list[tuple[Any, CompiledRule | None, str | None]]] = {}
        joined: dict[str, list[tuple[Any, CompiledRule | None, str | None]]] = {}
        for cr in rules:
            positive = [(c, t) for c, t in zip(cr.rule.conditions, cr.trees) if c.absent_for is None]
            if len(positive) == 1:
                cond, tree = positive[0]
                single.setdefault(cond.kind, []).append((tree, cr, cond.alias))
            else:
                for cond, tree in positive:
                    joined.setdefault(cond.kind, []).append((tree, None, None))
        self.single = {kind: _KindIndex(entries, may=False) for kind, entries in single.items()}
        self.joined = {kind: _KindIndex(entries, may=True) for kind, entries in joined.items()}

    def correlated(self, msg: Mapping[str, Any]) -> bool | None:
        """May a correlation (a rule of two or more positive conditions) read this fact? None:
        the reference may not say what durable_rules would (``_typed``)."""
        index = self.joined.get(msg["kind"])
        if index is None:
            return False
        for test, _, _, typed in index.candidates(msg):
            if _apart(typed, msg):
                return None
            if test(msg):
                return True
        return False

    def judge(self, msg: Mapping[str, Any]) -> list[tuple[CompiledRule, dict]] | None:
        """The firings the Rete would report for this fact's message, or None: the Rete must see
        it (a correlation may read it, two rules fire, or a value is not plain)."""
        if not _plain(msg):
            return None
        if self.correlated(msg) is not False:
            return None
        index = self.single.get(msg["kind"])
        if index is None:
            return []
        fired: list[tuple[CompiledRule, dict]] = []
        for test, cr, alias, typed in index.candidates(msg):
            if _apart(typed, msg):
                return None
            if test(msg):
                if fired:
                    return None  # durable_rules orders two firings its own way
                assert cr is not None and alias is not None
                fired.append((cr, {alias: msg}))
        return fired
