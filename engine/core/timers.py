"""Timers on the facts' own clock: firings delayed by a rule's ``for:`` and absence watches
(``absent_for:``, a hang is the absence of progress). Nothing here reads the wall clock; time
moves when the engine is told it does (``Engine.advance``).

    timers = Timers(compiled)
    if timers.hold(cr, matched): ...     # a delayed or absence rule: it fires later, if at all
    timers.saw(fact)                     # a fact an absence waits for pushes its deadline
    for cr, matched in timers.due_delayed(now): ...
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

from engine.facts import Fact
from engine.rulebook.compile import CompiledRule, CompiledRulebook
from engine.rulebook.conditions import evaluate

__all__ = ["Timers", "Watch"]


@dataclass
class Watch:
    rule: CompiledRule
    matched: dict[str, dict]
    deadline: float
    join: dict[str, Any]


def _latest(matched: dict[str, dict]) -> float:
    return max(float(m.get("at", 0.0)) for m in matched.values())


#: per rulebook, the ids of its absence rules (an engine is made per rule test and corpus case:
#: walking every rule's conditions cost ~1 ms each time)
_ABSENT: "weakref.WeakKeyDictionary[CompiledRulebook, frozenset[int]]" = weakref.WeakKeyDictionary()


def _absent_rules(compiled: CompiledRulebook) -> frozenset[int]:
    got = _ABSENT.get(compiled)
    if got is None:
        got = _ABSENT[compiled] = frozenset(
            id(cr) for cr in compiled.rules if any(c.absent_for is not None for c in cr.rule.conditions)
        )
    return got


class Timers:
    def __init__(self, compiled: CompiledRulebook):
        self.delayed: list[tuple[float, CompiledRule, dict[str, dict]]] = []
        self.watches: list[Watch] = []
        self._absent_rules = _absent_rules(compiled)

    def hold(self, cr: CompiledRule, matched: dict[str, dict]) -> bool:
        """Keep a firing of an absence or ``for:`` rule for later; False: it fires now."""
        if id(cr) in self._absent_rules:
            absent = next(c for c in cr.rule.conditions if c.absent_for is not None)
            first = matched[cr.rule.conditions[0].alias]
            join = {a: first.get(a) for a in cr.rule.join}
            self.watches.append(Watch(cr, matched, _latest(matched) + float(absent.absent_for or 0), join))
            return True
        if cr.rule.for_s:
            self.delayed.append((_latest(matched) + cr.rule.for_s, cr, matched))
            return True
        return False

    def saw(self, fact: Fact) -> None:
        """A fact that an absence watch waits for moves the watch's deadline."""
        if not self.watches:
            return
        flat = dict(fact.attrs) | {"kind": fact.kind, "at": fact.at}
        for w in self.watches:
            for cond, tree in zip(w.rule.rule.conditions, w.rule.trees):
                if cond.absent_for is None or cond.kind != fact.kind:
                    continue
                if all(flat.get(a) == v for a, v in w.join.items()) and evaluate(tree, flat, w.matched):
                    w.deadline = max(w.deadline, fact.at + float(cond.absent_for))

    def due_delayed(self, now: float) -> list[tuple[float, CompiledRule, dict[str, dict]]]:
        if not self.delayed:
            return []
        due = [d for d in self.delayed if d[0] <= now]
        self.delayed = [d for d in self.delayed if d[0] > now]
        return due

    def expired_watches(self, now: float) -> list[Watch]:
        if not self.watches:
            return []
        expired = [w for w in self.watches if w.deadline <= now]
        self.watches = [w for w in self.watches if w.deadline > now]
        return expired

    def forget(self, fact_id: str) -> None:
        """A retracted fact ends the watches that matched it."""
        if self.watches:
            self.watches = [w for w in self.watches if all(m.get("id") != fact_id for m in w.matched.values())]
