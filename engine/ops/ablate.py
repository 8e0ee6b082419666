"""The fallback layers alone: a view of a rulebook whose specific matchers are switched off.

On the train side of the corpus the specific matchers were written from the very cases they are
scored on, so the train figure says nothing of the layers that must carry an unseen wording: the
weak vocabulary (each class's ``keywords``, engine/rulebook/weak.py) and the log-ending reader
(engine/core/logend.py, rules/3x-log-end*.yaml). ``ablated`` keeps only what those layers read,
and ``AblationReport`` scores a corpus on it the way the holdout fails: per class, how many cases
the fallback names right, how many it names as another class, and how many it opens nothing for;
and how many healthy cases it opens an incident for (the layers' price).

What stays switched on (``generic``): a matcher that carries no class of its own:
- the weak matchers (``attrs.weak``) and the ending and cleanup matchers (``attrs.ending``,
  ``attrs.cleanup``): the two fallback layers themselves;
- what a log's end is read with: progress and context lines, a traceback's header and frames and
  an ignored block (``attrs.log_block``), a recovery notice (``attrs.handled``), a launcher's task
  exit (``attrs.task_exit``), an attempt's edge, a listing row, a peer table, a command's own exit,
  a storage server's notice that it answers again (``attrs.recovers``: the stall's keyword a
  kernel log showed before it no longer decides how that log ends);
- a catch-all reader (``attrs: {explains: false}``): the exception reader the log-end rules read
  (``python_exception_generic``, whose uncaught exception is app_error at priority 10, below
  every keyword).

Every other matcher is disabled, and every rule that can no longer fire is pruned: a condition
(not an absence) that asks for ``matcher`` equal to, or in a set of, switched-off matchers only.
The rules left read only what the fallback layers give (a keyword, an ending, an uncaught
exception, a task's exit, a bare exit): none of them names a class from a specific wording.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Sequence

from engine.ops.corpus_eval import HEALTHY, Case, CaseResult, evaluate
from engine.rulebook.compile import CompiledRule, CompiledRulebook
from engine.rulebook.conditions import AllOf, AnyOf, Cmp
from engine.rulebook.model import Matcher

__all__ = ["GENERIC_ATTRS", "generic", "ablated", "layer", "AblationReport", "ablate_eval"]

#: a matcher with one of these attrs carries structure, not a class (see the module's docstring)
GENERIC_ATTRS = frozenset(
    {
        "weak",
        "ending",
        "cleanup",
        "log_block",
        "handled",
        "task_exit",
        "own_exit",
        "listing",
        "attempt_edge",
        "table",
        "recovers",
    }
)


def generic(m: Matcher) -> bool:
    """Whether a matcher belongs to the fallback layers (or carries no class at all): a catch-all
    reader says so itself (``attrs: {explains: false}``, as linefacts reads it: the exception
    reader of rules/10-matchers-job.yaml that the log-end rules read)."""
    return m.emit in ("progress", "context") or m.attrs.get("explains") is False or bool(GENERIC_ATTRS & set(m.attrs))


def _matcher_sets(tree: Any, out: list[frozenset[str]]) -> None:
    """The sets of matcher ids that the tree's top-level conjunction requires (``matcher: X`` or
    ``matcher: {in: [...]}``); a test inside an ``any`` requires nothing on its own."""
    if isinstance(tree, AllOf):
        for item in tree.items:
            _matcher_sets(item, out)
    elif isinstance(tree, Cmp) and tree.attr == "matcher":
        if tree.op == "eq" and isinstance(tree.value, str):
            out.append(frozenset({tree.value}))
        elif tree.op == "in" and isinstance(tree.value, tuple):
            out.append(frozenset(str(v) for v in tree.value))
    elif isinstance(tree, AnyOf):
        return


def _can_fire(rule: CompiledRule, off: frozenset[str]) -> bool:
    for cond, tree in zip(rule.rule.conditions, rule.trees):
        if cond.absent_for is not None:
            continue
        needs: list[frozenset[str]] = []
        _matcher_sets(tree, needs)
        if any(s and s <= off for s in needs):
            return False
    return True


def ablated(compiled: CompiledRulebook) -> CompiledRulebook:
    """``compiled`` with every specific matcher disabled and the rules that needed them pruned."""
    off = frozenset(m.id for m in compiled.book.matchers if m.enabled and not generic(m))
    matchers = tuple(replace(m, enabled=False) if m.id in off else m for m in compiled.book.matchers)
    rules = tuple(r for r in compiled.rules if _can_fire(r, off))
    book = replace(compiled.book, matchers=matchers)
    return replace(compiled, book=book, rules=rules)


def layer(r: CaseResult) -> str:
    """Which fallback layer gave a case's answer: a class's keyword (``weak``), the program's own
    last word (``ending``), the catch-all uncaught exception (``exception``) or another (a bare
    exit's unknown, a table of peers)."""
    if r.weak:
        return "weak"
    if any(x.startswith("fault.le_") for x in r.rules):
        return "ending"
    if any(x.startswith("fault.app_error_uncaught") for x in r.rules):
        return "exception"
    return "other"


@dataclass
class AblationReport:
    results: list[CaseResult] = field(default_factory=list)

    def per_class(self) -> dict[str, dict[str, int]]:
        """label -> {cases, right (by the fallback), other (another class), nothing (no incident)}."""
        out: dict[str, dict[str, int]] = {}
        for r in self.results:
            if r.case.label == HEALTHY:
                continue
            row = out.setdefault(r.case.label, {"cases": 0, "right": 0, "other": 0, "nothing": 0})
            row["cases"] += 1
            row["right" if r.right else "nothing" if r.got == HEALTHY else "other"] += 1
        return dict(sorted(out.items()))

    @property
    def healthy(self) -> list[CaseResult]:
        return [r for r in self.results if r.case.label == HEALTHY]

    @property
    def price(self) -> list[CaseResult]:
        """Healthy cases the fallback layers alone open an incident for."""
        return [r for r in self.healthy if not r.right]

    def per_stream(self) -> dict[str, dict[str, int]]:
        """stream -> {cases, failures, right, other, nothing (of the failures), healthy, price}: the
        fallback layers read a job log, a kernel log and a scheduler log differently (a kernel log
        has no job, so no log end of a job), so each stream's figure is its own."""
        out: dict[str, dict[str, int]] = {}
        for r in self.results:
            row = out.setdefault(
                r.case.stream,
                {"cases": 0, "failures": 0, "right": 0, "other": 0, "nothing": 0, "healthy": 0, "price": 0},
            )
            row["cases"] += 1
            if r.case.label == HEALTHY:
                row["healthy"] += 1
                row["price"] += 0 if r.right else 1
            else:
                row["failures"] += 1
                row["right" if r.right else "nothing" if r.got == HEALTHY else "other"] += 1
        return dict(sorted(out.items()))

    def wrong_answers(self) -> Counter:
        """(label, answer) -> count, of the failing cases the fallback named as another class."""
        return Counter(
            (r.case.label, r.got) for r in self.results if r.case.label != HEALTHY and not r.right and r.got != HEALTHY
        )

    def layers(self) -> Counter:
        """layer -> right answers it gave (``layer``)."""
        return Counter(layer(r) for r in self.results if r.right and r.case.label != HEALTHY)

    def text(self) -> list[str]:
        rows = self.per_class()
        lines = [f"{'class':28} {'cases':>5} {'right':>5} {'other':>5} {'nothing':>7}"]
        tot: Counter[str] = Counter()
        for label, row in rows.items():
            tot.update(row)
            lines.append(f"{label:28} {row['cases']:5} {row['right']:5} {row['other']:5} {row['nothing']:7}")
        lines.append(f"{'all failures':28} {tot['cases']:5} {tot['right']:5} {tot['other']:5} {tot['nothing']:7}")
        lines.append("right by layer: " + ", ".join(f"{k} {v}" for k, v in sorted(self.layers().items())))
        lines.append(f"healthy price: {len(self.price)} of {len(self.healthy)} healthy cases open an incident")
        lines.append(
            f"{'stream':8} {'failures':>8} {'right':>5} {'other':>5} {'nothing':>7} {'healthy':>7} {'price':>5}"
        )
        for stream, row in self.per_stream().items():
            lines.append(
                f"{stream:8} {row['failures']:8} {row['right']:5} {row['other']:5} {row['nothing']:7} "
                f"{row['healthy']:7} {row['price']:5}"
            )
        return lines


def ablate_eval(compiled: CompiledRulebook, cases: Sequence[Case] | Iterable[Case]) -> AblationReport:
    """Each case replayed on the ablated view of ``compiled``."""
    return AblationReport(evaluate(ablated(compiled), list(cases)).results)
