"""Looking inside a loaded rulebook: the effective items after site layering with where each came
from (``recover rules show``), and what one log line does (``recover rules explain-line``).

``explain_line`` runs the line through the real pipeline — the scanner with the matchers of its
source, the hit converter, the engine with the compiled rules, an in-memory store — and reports
the matchers that hit (with their groups and the fact they made), every rule the Rete fired from
it (also those that only attach a warning, or that wait for time to pass), and the incidents.

Usage::

    doc = effective_rulebook(compiled)                 # plain data, JSON-ready
    out = explain_line(compiled, "NVRM: Xid (PCI:0000:3b:00): 79, ...", source="kernel")
"""

from __future__ import annotations

import logging
from typing import Any, Mapping

from engine.facts import Fact
from engine.core.context import ClusterContext, FileContext
from engine.core.converter import HitConverter
from engine.core.linetime import LineClock, log_zone
from engine.core.scanner import Scanner, matcher_specs, matchers_for
from engine.core.replay import Input, replay_inputs
from engine.core.rete import ReteNetwork
from engine.rulebook.compile import CompiledRulebook
from engine.rulebook.conditions import AllOf, AnyOf, Cmp, ListRef, MacroRef, Same
from engine.store import Store

logger = logging.getLogger(__name__)

__all__ = ["effective_rulebook", "explain_line", "where_to_data", "SECTIONS"]

SECTIONS = ("fault_classes", "lists", "macros", "matchers", "rules", "actions", "policy", "tests")


# -- rules show ----------------------------------------------------------------------------------
def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def where_to_data(tree: Any) -> Any:
    """A condition tree back to the where-clause a person would write."""
    if isinstance(tree, AllOf):
        out: dict[str, Any] = {}
        extra: list[Any] = []
        for item in tree.items:
            if isinstance(item, Cmp) and item.attr not in out:
                out[item.attr] = where_to_data(item)
            elif isinstance(item, Same) and item.attr not in out:
                out[item.attr] = {"same": f"{item.alias}.{item.ref_attr}"}
            elif isinstance(item, AnyOf) and "any" not in out:
                out["any"] = [where_to_data(i) for i in item.items]
            elif isinstance(item, MacroRef):
                out.setdefault("macro", [])
                out["macro"].append(item.name)
            else:
                extra.append(where_to_data(AllOf((item,))))
        if "macro" in out and len(out["macro"]) == 1:
            out["macro"] = out["macro"][0]
        if extra:  # the same attribute tested twice (a macro merged in): keep every test
            out.setdefault("all", []).extend(extra)
        return out
    if isinstance(tree, AnyOf):
        return {"any": [where_to_data(i) for i in tree.items]}
    if isinstance(tree, Cmp):
        value = f"@{tree.value.name}" if isinstance(tree.value, ListRef) else _plain(tree.value)
        return value if tree.op == "eq" else {tree.op: value}
    if isinstance(tree, Same):
        return {tree.attr: {"same": f"{tree.alias}.{tree.ref_attr}"}}
    return repr(tree)


def _origin(book, section: str, name: str) -> dict[str, Any]:
    marks = book.origins.get((section, name), ())
    return {"defined_at": str(marks[0]) if marks else None, "overridden_by": [str(m) for m in marks[1:]]}


def effective_rulebook(compiled: CompiledRulebook) -> dict[str, Any]:
    """Every item of the layered rulebook as plain data, each with where it was defined and overridden."""
    book = compiled.book
    out: dict[str, Any] = {"files": list(book.files)}
    out["fault_classes"] = [
        {
            "name": n,
            "description": fc.description,
            "decision": compiled.policy.decisions.get(n, fc.decision),
            "priority": compiled.policy.priorities.get(n, fc.priority),
            "retry": fc.retry,
            "plan": list(fc.plan) if fc.plan is not None else None,
            # what the class itself is granted (policy.autonomy.classes); its decision kind's applies too
            "autonomy": compiled.policy.autonomy.classes.get(n, "recommend"),
            **_origin(book, "fault_classes", n),
        }
        for n, fc in book.fault_classes.items()
    ]
    out["lists"] = [{"name": n, "items": _plain(v), **_origin(book, "lists", n)} for n, v in book.lists.items()]
    out["macros"] = [
        {"name": n, "where": where_to_data(v), **_origin(book, "macros", n)} for n, v in book.macros.items()
    ]
    out["matchers"] = [
        {
            "id": m.id,
            "source": list(m.sources),
            "pattern": m.pattern,
            "emit": m.emit,
            "ignore_case": m.ignore_case,
            "sample": m.sample,
            "enabled": m.enabled,
            "attrs": _plain(m.attrs),
            "types": _plain(m.types),
            "description": m.description,
            **_origin(book, "matchers", m.id),
        }
        for m in book.matchers
    ]
    out["rules"] = [
        {
            "id": r.id,
            "description": r.description,
            "enabled": r.enabled,
            "when": [
                {
                    "as": c.alias,
                    "kind": c.kind,
                    "where": where_to_data(c.where),
                    **({"absent_for": c.absent_for} if c.absent_for is not None else {}),
                }
                for c in r.conditions
            ],
            "join": list(r.join),
            "within": r.within,
            "for": r.for_s,
            "then": {r.then_kind: _plain(r.then_attrs)},
            **_origin(book, "rules", r.id),
        }
        for r in book.rules
    ]
    out["actions"] = [
        {
            "name": a.name,
            "argv": list(a.argv),
            "per": a.per,
            "scheduler": a.scheduler,
            "verify": a.verify,
            "timeout": a.timeout,
            "description": a.description,
            **_origin(book, "actions", a.name),
        }
        for a in book.actions.values()
    ]
    policy = []
    # every key is set by a file: the defaults are the shipped rules/50-policy.yaml, loaded always
    document = compiled.policy.document  # the policy as written (layered), for showing
    for key in document:
        value = document.get(key)
        marks = book.origins.get(("policy", key), ())
        policy.append(
            {
                "key": key,
                "value": _plain(value),
                "defined_at": str(marks[0]) if marks else None,
                "overridden_by": [str(m) for m in marks[1:]],
            }
        )
    out["policy"] = policy
    tests = []
    for t in book.tests:  # a superseded test: defined where it first was, replaced by the last
        marks = book.origins.get(("tests", t.name), (t.mark,))
        tests.append(
            {"name": t.name, "enabled": True, "defined_at": str(marks[0]), "overridden_by": [str(m) for m in marks[1:]]}
        )
    for name, mark in book.disabled_tests.items():
        marks = book.origins.get(("tests", name), (mark,))
        tests.append(
            {"name": name, "enabled": False, "defined_at": str(marks[0]), "overridden_by": [str(m) for m in marks[1:]]}
        )
    out["tests"] = tests
    return out


def summary_of(section: str, item: Mapping[str, Any]) -> str:
    """One line that says what an item is, for the table view."""
    if section == "lists":
        items = item["items"]
        text = ", ".join(map(str, items[:12])) + (f", … ({len(items)})" if len(items) > 12 else "")
        return f"[{text}]"
    if section == "macros":
        return _short(item["where"])
    if section == "matchers":
        flag = "" if item["enabled"] else "DISABLED "
        return f"{flag}{item['emit']} from {'/'.join(item['source'])}: {item['pattern']}"
    if section == "rules":
        flag = "" if item["enabled"] else "DISABLED "
        ((kind, attrs),) = item["then"].items()
        what = attrs.get("name") if kind == "symptom" else attrs.get("fault_class")
        conds = " + ".join(f"{c['kind']}{_short(c['where'])}" for c in item["when"])
        return f"{flag}{conds} → {kind} {what}"
    if section == "actions":
        return f"per {item['per']}: {' '.join(item['argv'])}"
    if section == "policy":
        return _short(item["value"])
    if section == "fault_classes":
        retry = f", at most {item['retry']} restarts" if item.get("retry") is not None else ""
        plan = f", its plan: {', '.join(item['plan']) or 'nothing'}" if item.get("plan") is not None else ""
        mode = f", {item['autonomy']} only" if item.get("autonomy", "act") != "act" else ""
        return f"priority {item['priority']} → {item['decision']}{retry}{plan}{mode}: {item['description']}"
    if section == "tests":
        if not item.get("enabled", True):
            return f"DISABLED at {item['overridden_by'][-1] if item['overridden_by'] else item['defined_at']}"
        return f"SUPERSEDED by {item['overridden_by'][-1]}" if item["overridden_by"] else ""
    return ""


def _short(value: Any, limit: int = 110) -> str:
    import json

    text = json.dumps(value, default=str, separators=(", ", ": "))
    return text if len(text) <= limit else text[: limit - 1] + "…"


# -- rules explain-line --------------------------------------------------------------------------
class _RecordingNetwork:
    """The real Rete network, with every firing it reports written down (in order)."""

    def __init__(self, network: ReteNetwork):
        self.network = network
        self.fired: list[tuple[Any, dict, Fact]] = []

    def session(self, sid: str | None = None, alpha: bool = False) -> "_RecordingSession":
        return _RecordingSession(self, self.network.session(sid, alpha))


class _RecordingSession:
    def __init__(self, owner: _RecordingNetwork, session):
        self.owner = owner
        self.session = session

    def assert_fact(self, fact: Fact):
        firings = self.session.assert_fact(fact)
        for cr, matched in firings:
            self.owner.fired.append((cr, matched, fact))
        return firings

    def retract_fact(self, fact_id: str):
        return self.session.retract_fact(fact_id)

    @property
    def handled(self) -> bool:
        return self.session.handled

    def __len__(self) -> int:
        return len(self.session)

    def close(self) -> None:
        self.session.close()


def _produces(cr) -> dict[str, Any]:
    attrs = cr.rule.then_attrs
    if cr.rule.then_kind == "fault":
        return {"kind": "fault", "fault_class": attrs.get("fault_class"), "priority": cr.priority}
    return {"kind": "symptom", "name": attrs.get("name"), "severity": attrs.get("severity", "error")}


def explain_line(
    compiled: CompiledRulebook,
    line: str,
    source: str = "any",
    job: str | None = None,
    node: str | None = None,
    file_name: str = "explain-line",
) -> dict[str, Any]:
    """What one log line does in this rulebook. Pure: nothing is written anywhere."""
    data = line.rstrip("\n").encode("utf-8", errors="replace") + b"\n"
    matchers = list(compiled.matchers)
    index_map = matchers_for(compiled, source)
    specs = matcher_specs(compiled)
    scanner = Scanner([specs[i] for i in index_map])
    converter = HitConverter(matchers, ClusterContext())
    ctx = FileContext(
        path=file_name,
        source=source,
        job=job,
        nodes={node} if node else set(),
        dates=LineClock(zone=log_zone(compiled.policy.log_timezone)),
    )
    hits = []
    raw = scanner.feed(data) + scanner.flush()
    # as StreamFacts does: a class's keyword is no evidence on a line a specific matcher explains
    explained = any(not matchers[index_map[h.matcher]].attrs.get("weak") for h in raw)
    for hit in raw:
        m = matchers[index_map[hit.matcher]]
        if explained and m.attrs.get("weak"):
            continue
        fact = converter.convert(
            index_map[hit.matcher], hit.groups, hit.line.decode("utf-8", errors="replace"), hit.line_no, ctx
        )
        hits.append(
            {
                "matcher": m.id,
                "at": str(m.mark),
                "emit": m.emit,
                "description": m.description,
                "groups": {k: v for k, v in hit.groups.items() if v not in (None, "")},
                # a Flood (a repeat folded into an earlier fact) needs a collapser, which this converter has not
                "fact": {"kind": fact.kind, "attrs": _plain(fact.attrs)} if isinstance(fact, Fact) else None,
            }
        )

    store = Store(":memory:")
    recorder = _RecordingNetwork(ReteNetwork(compiled))
    result = replay_inputs(
        [Input(file_name, lambda: [data], source)],
        compiled,
        store,
        job=job,
        nodes=[node] if node else (),
        network=recorder,
    )
    in_store: dict[tuple[str, str], int] = {}
    for closed in result.incidents:
        for f in store.firings(closed.id):
            in_store[(f["rule"], f["asserted"] or "")] = closed.id
    firings = []
    seen: set[str] = set()
    for cr, matched, _fact in recorder.fired:
        rule = cr.rule
        produces = _produces(cr)
        absent = [c for c in rule.conditions if c.absent_for is not None]
        incident = next((inc for (rid, _), inc in in_store.items() if rid == rule.id), None)
        if absent:
            status = f"waits: fires if no matching {absent[0].kind} arrives within {absent[0].absent_for:g}s"
        elif rule.for_s:
            status = f"waits: fires if the match still holds after {rule.for_s:g}s"
        elif incident is not None:
            status = f"fired → incident {incident}"
        elif produces.get("severity") == "warning":
            status = "fired: a warning, which attaches to an incident but opens none"
        else:
            status = "fired"
        key = f"{rule.id}|{status}"
        if key in seen:
            continue
        seen.add(key)
        firings.append(
            {
                "rule": rule.id,
                "at": str(rule.mark),
                "description": rule.description,
                "produces": produces,
                "status": status,
                "matched": sorted(matched),
            }
        )
    incidents = []
    for closed in result.incidents:
        row = store.require_incident(closed.id)
        incidents.append(
            {
                "id": closed.id,
                "fault_class": row.fault_class,
                "decision": row.decision,
                "nodes": list(row.nodes),
                "reason": row.reason,
                "guards": list(row.guards),
                "commands": [list(p.argv) for p in closed.plan],
                "problems": list(closed.problems),
            }
        )
    store.close()
    return {
        "line": line.rstrip("\n"),
        "source": source,
        "job": job,
        "node": node,
        "hits": hits,
        "firings": firings,
        "incidents": incidents,
    }
