"""What would change: the stored evidence of past incidents re-evaluated with two rulebooks.

For each closed incident in the store, its source evidence (every fact that is not a symptom or
fault a rule derived: log and Xid hits, GPU counters and states, scheduler states, stalls, slow
nodes) is replayed through a rulebook in a fresh in-memory store. Line facts keep the line they
came from (``text``, cut to 400 characters), so they are matched again by the rulebook's own
matchers: a changed pattern, a new matcher or a disabled one counts too. Lines that matched
nothing at the time, and facts that never joined an incident, were not kept, so a candidate
cannot be shown to find an incident where the old rulebook saw none.

Both sides are re-evaluated the same way (the base is not read from the store), so guards that
depend on history (retry budgets, blast radius, silences) do not show up as changes; what changes
is the rulebook's doing.

Usage::

    changes = diff_store(store, base, candidate, since=t)
    for c in changes:
        print(c.line())
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from engine.facts import Fact
from engine.core.converter import HitConverter
from engine.core.replay import replay_inputs
from engine.core.scanner import scanner_for
from engine.rulebook.compile import CompiledRulebook
from engine.store import IncidentRow, Store

__all__ = ["Verdict", "Change", "diff_store", "reevaluate"]

_DERIVED = ("symptom", "fault")
_LINE_KINDS = {"log": "log", "xid": "xid"}
# what a line fact knew besides its matcher's groups: where it came from, not what it matched
_CONTEXT_ATTRS = ("job", "attempt", "node", "source", "text", "logged_at")


@dataclass(frozen=True)
class Verdict:
    fault_class: str
    decision: str
    nodes: tuple[str, ...]
    rule: str | None

    def key(self) -> tuple:
        return (self.fault_class, self.decision, self.nodes)

    def __str__(self) -> str:
        nodes = f" on {','.join(self.nodes)}" if self.nodes else ""
        return f"{self.fault_class} -> {self.decision}{nodes}"


@dataclass(frozen=True)
class Change:
    incident: int
    job: str | None
    attempt: int | None
    old: tuple[Verdict, ...]
    new: tuple[Verdict, ...]

    def fields(self) -> list[str]:
        a, b = (self.old[0] if self.old else None), (self.new[0] if self.new else None)
        if a is None or b is None:
            return ["incident"]
        return [
            f
            for f, x, y in (
                ("fault_class", a.fault_class, b.fault_class),
                ("decision", a.decision, b.decision),
                ("nodes", a.nodes, b.nodes),
            )
            if x != y
        ] or ["incidents"]

    def line(self) -> str:
        who = (
            f"job {self.job} attempt {'unknown' if self.attempt is None else self.attempt}"
            if self.job
            else "node-scoped"
        )
        old = "; ".join(str(v) for v in self.old) or "no incident"
        new = "; ".join(str(v) for v in self.new) or "no incident"
        rules = f"  (rule {self.old[0].rule if self.old else '-'} -> {self.new[0].rule if self.new else '-'})"
        return f"incident {self.incident} ({who}): {old}  =>  {new}{rules}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "incident": self.incident,
            "job": self.job,
            "attempt": self.attempt,
            "changed": self.fields(),
            "old": [v.__dict__ | {"nodes": list(v.nodes)} for v in self.old],
            "new": [v.__dict__ | {"nodes": list(v.nodes)} for v in self.new],
        }


def _rematch(book: CompiledRulebook, fact: Fact, converter: HitConverter) -> list[Fact]:
    """A stored line fact as ``book``'s matchers see its line (none when no matcher hits it)."""
    text = str(fact.get("text"))
    scanner, index_map = scanner_for(book, str(fact.get("source") or "any"))
    hits = scanner.feed(text.encode("utf-8", "replace") + b"\n") + scanner.flush()
    out = []
    for h in hits:
        m = book.matchers[index_map[h.matcher]]
        if m.emit not in _LINE_KINDS:
            continue
        attrs: dict[str, Any] = {k: fact.get(k) for k in _CONTEXT_ATTRS if fact.get(k) is not None}
        attrs.update(m.attrs)
        attrs.update(converter._typed(m, h.groups))
        attrs["matcher"] = m.id
        out.append(Fact.make(_LINE_KINDS[m.emit], attrs, fact.at, fact.origin))
    return out


def reevaluate(book: CompiledRulebook, inc: IncidentRow, facts: Sequence[Fact]) -> tuple[Verdict, ...]:
    """The incidents ``book`` makes of one incident's source evidence, most important first."""
    converter = HitConverter(list(book.matchers))
    evidence: list[Fact] = []
    for f in facts:
        if f.kind in _LINE_KINDS and f.get("text") and f.get("matcher"):
            evidence.extend(_rematch(book, f, converter))
        else:
            evidence.append(f)
    nodes = sorted({str(f.get("node")) for f in facts if f.get("node")} | set(inc.nodes))
    mem = Store(":memory:")
    try:
        result = replay_inputs([], book, mem, job=inc.job, attempt=inc.attempt, nodes=nodes, extra_facts=evidence)
        verdicts = []
        for closed in result.incidents:
            row = mem.require_incident(closed.id)
            rule = next((f.get("rule") for f, _, _ in mem.facts(closed.id) if f.id == row.fault_fact), None)
            verdicts.append(Verdict(str(row.fault_class), str(row.decision), tuple(sorted(row.nodes)), rule))
    finally:
        mem.close()
    rank = dict(book.policy.priorities.items())
    return tuple(sorted(verdicts, key=lambda v: -int(rank.get(v.fault_class, 0))))


def diff_store(
    store: Store, base: CompiledRulebook, candidate: CompiledRulebook, since: float | None = None
) -> list[Change]:
    changes = []
    for inc in store.incidents(status="closed", since=since):
        facts = [f for f, _count, _by in store.facts(inc.id) if f.kind not in _DERIVED]
        old, new = reevaluate(base, inc, facts), reevaluate(candidate, inc, facts)
        if [v.key() for v in old] != [v.key() for v in new]:
            changes.append(Change(inc.id, inc.job, inc.attempt, old, new))
    return changes
