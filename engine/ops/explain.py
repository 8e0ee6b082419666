"""The story of one incident: from each piece of evidence, through the rules that fired, to the
fault, the decision, the guards that shaped it and the commands recommended or run.

``build(store, incident_id)`` returns a plain dict (what ``--json`` prints); ``render(...)`` draws
it as a tree for people. The chain starts at the fault that won and walks back through the
firings that derived each fact to the raw evidence and where it was read (file:line).
"""

from __future__ import annotations

import sqlite3
from datetime import datetime, timezone

from engine.errors import ExplainError

from typing import Any

from engine.store import Store, StoreError

__all__ = ["build", "render_text", "scope_text", "ExplainError"]


def _fact_dict(fact, count: int, derived_by: int | None) -> dict[str, Any]:
    d = fact.to_dict()
    d["count"] = count
    d["derived_by"] = derived_by
    d["time"] = utc_time(d.get("at"))
    return d


def utc_time(at: Any) -> str:
    """A fact's time as people read it: ISO 8601 in UTC, to the millisecond (``-`` when none).

    What the rules compared is this time: the line's own stamp read by ``core.linetime`` (in
    ``policy.log_timezone`` where the stamp names no zone), the line before it when it has none,
    or, live, when the line was read (the line's own time is then ``logged_at``)."""
    if not isinstance(at, (int, float)) or isinstance(at, bool) or at != at:
        return "-"
    try:
        ms = round(at * 1000)  # to the nearest millisecond: .402 is not shown as .401
        whole = datetime.fromtimestamp(ms // 1000, timezone.utc)
    except (OverflowError, OSError, ValueError):
        return "-"
    return whole.strftime("%Y-%m-%dT%H:%M:%S") + f".{ms % 1000:03d}Z"


def _times(fact: dict[str, Any]) -> str:
    logged = fact.get("attrs", {}).get("logged_at")
    own = f", logged {utc_time(logged)}" if isinstance(logged, (int, float)) and logged != fact.get("at") else ""
    return f"{fact.get('time') or utc_time(fact.get('at'))}{own}"


def build(store: Store, incident_id: int) -> dict[str, Any]:
    inc = store.incident(incident_id)
    if inc is None:
        raise ExplainError(f"no incident {incident_id} in {store.path}")
    facts = [_fact_dict(f, c, d) for f, c, d in store.facts(incident_id)]
    floods = store.fact_floods(incident_id)
    for f in facts:  # a collapsed flood: its last line, and who repeated it
        if f["id"] in floods:
            f["flood"] = floods[f["id"]]
    by_id = {f["id"]: f for f in facts}
    firings = store.firings(incident_id)
    firings_by_asserted: dict[str, list[dict[str, Any]]] = {}
    for fr in firings:
        if fr["asserted"]:
            firings_by_asserted.setdefault(fr["asserted"], []).append(fr)

    def chain(fact_id: str, depth: int = 0, seen: frozenset = frozenset()) -> dict[str, Any]:
        fact = by_id.get(fact_id, {"id": fact_id, "kind": "?", "attrs": {}, "origin": "?", "at": None})
        node: dict[str, Any] = {"fact": fact}
        frs = firings_by_asserted.get(fact_id) or []
        if frs and depth < 12 and fact_id not in seen:
            fr = frs[0]
            node["rule"] = {"id": fr["rule"], "at": fr["rule_mark"], "description": fr["description"]}
            node["because"] = {alias: chain(fid, depth + 1, seen | {fact_id}) for alias, fid in fr["matched"].items()}
            # the same conclusion derived again from other evidence: each derivation, in order
            node["again"] = [
                {
                    "rule": {"id": f["rule"], "at": f["rule_mark"], "description": f["description"]},
                    "because": {alias: chain(fid, depth + 1, seen | {fact_id}) for alias, fid in f["matched"].items()},
                }
                for f in frs[1:]
            ]
        return node

    root = chain(inc.fault_fact) if inc.fault_fact else None
    other_faults = [f for f in facts if f["kind"] == "fault" and f["id"] != inc.fault_fact]
    won = (root or {}).get("fact", {}).get("attrs", {})
    # the winning fault was reached through a class's keyword only (rules/25-weak-evidence.yaml)
    weak = (
        {"keyword": str(won.get("keyword") or ""), "fault_class": won.get("fault_class")} if won.get("weak") else None
    )
    return {
        "incident": inc.to_dict(),
        "chain": root,
        "weak": weak,
        "other_faults": other_faults,
        "facts": facts,
        "firings": [dict(fr.items()) for fr in firings],
        "actions": store.actions(incident_id),
        "reviews": store.reviews(incident_id),
        **_context(store, inc.context),
    }


def _context(store: Store, recorded: str | None) -> dict[str, Any]:
    """Who said which job ran where (``context_source``: logs or scheduler) and who recorded the
    incident (``recorded_by``: replay or live), from the incident's own record; a database from
    before incidents kept it has only its last writer's word, and cannot say which one that was."""
    if recorded:
        by, _, source = recorded.partition(":")
        return {"context_source": source or "logs", "recorded_by": by}
    try:
        return {"context_source": store.meta("context_source"), "recorded_by": None}
    except (StoreError, sqlite3.Error):  # a database from before this was recorded
        return {"context_source": None, "recorded_by": None}


def _describe(fact: dict[str, Any]) -> str:
    attrs = fact.get("attrs", {})
    kind = fact.get("kind")
    skip = {"text", "rule", "source", "priority", "logged_at"}
    if kind == "fault":
        nodes = ",".join(attrs.get("nodes") or []) or "no node"
        return f"fault {attrs.get('fault_class')} on {nodes} (priority {attrs.get('priority')})"
    if kind == "symptom":
        where = f" on {attrs['node']}" if attrs.get("node") else ""
        return f"symptom {attrs.get('name')}{where} [{attrs.get('severity', 'error')}]"
    parts = [f"{k}={v}" for k, v in attrs.items() if k not in skip and v not in (None, "", [])]
    return f"{kind} " + " ".join(parts[:8])


def scope_text(job: str | None, attempt: int | None, node: str | None) -> str:
    """What an incident is about, in words: ``job 12 attempt 0``, ``node n3``, or that neither is known."""
    if job:
        return f"job {job} attempt {'unknown' if attempt is None else attempt}"
    return f"node {node}" if node else "no job or node known"


def render_text(report: dict[str, Any]) -> str:
    """A plain-text tree (rich renders the same structure with colours in the CLI)."""
    inc = report["incident"]
    lines: list[str] = []
    # an incident may know no job, attempt or node, and an open one has no decision yet: say so in
    # words, never as Python's None
    still_open = " yet (the incident is open)" if inc["status"] == "open" else ""
    lines.append(f"Incident {inc['id']} — {scope_text(inc['job'], inc['attempt'], inc['node'])} — {inc['status']}")
    lines.append(f"  fault:    {inc['fault_class'] or 'none' + still_open}  nodes: {', '.join(inc['nodes']) or '-'}")
    lines.append(f"  decision: {inc['decision'] or 'none' + still_open}  (mode: {inc['mode'] or '-'})")
    if inc.get("mode_why"):  # which policy keys granted that mode (databases from before: none)
        lines.append(f"  mode:     {inc['mode']}: {inc['mode_why']}")
    if inc.get("reason"):
        lines.append(f"  why:      {inc['reason']}")
    if report.get("weak"):
        w = report["weak"]
        lines.append(
            f"  evidence: weak evidence: keyword {w['keyword']!r} of class {w['fault_class']} "
            "(no specific matcher explained the failure)"
        )
    for g in inc.get("guards") or []:
        lines.append(
            f"  guard:    {g.get('guard')}: {g.get('why')}" + (f" ({g['from']} -> {g['to']})" if g.get("from") else "")
        )
    for sus in inc.get("suspects") or []:  # ranks the evidence points at (core.suspects): not verdicts
        where = f"on {sus['node']}" if sus.get("node") else "node unknown (the rank map names none)"
        who = f"rank {sus['rank']}" if sus.get("rank") is not None else "a node (no one rank)"
        lines.append(f"  suspect:  {who} {where}")
        for sig in sus.get("signals") or []:
            lines.append(f"            {sig.get('signal')}: {sig.get('detail')}  [{sig.get('origin')}]")
    if report.get("context_source") == "logs":
        asked = {
            "replay": "a replay asks no scheduler",
            "live": "the controller ran without a scheduler (recover run without --scheduler)",
        }.get(report.get("recorded_by") or "", "no scheduler was asked")
        lines.append(
            "  context:  which job ran on which nodes was taken from the logs' own lines (SLURM_JOB_ID, "
            f"SLURM_JOB_NODELIST...): {asked}; with a scheduler, only the scheduler says that"
        )
    lines.append("")
    lines.append("Chain of evidence (the winning fault, the rules that derived it, the facts they matched):")

    def walk(node: dict[str, Any], prefix: str, alias: str | None) -> None:
        fact = node["fact"]
        label = f"{alias} = " if alias else ""
        count = f" x{fact['count']}" if fact.get("count", 1) > 1 else ""
        lines.append(f"{prefix}{label}{_describe(fact)}{count}   @ {fact.get('origin')}  at {_times(fact)}")
        text = fact.get("attrs", {}).get("text")
        if text:
            lines.append(f"{prefix}    | {text}")
        flood = fact.get("flood")
        if flood:
            who = ", ".join(flood.get("nodes", [])[:8]) + (" ..." if len(flood.get("nodes", [])) > 8 else "")
            lines.append(
                f"{prefix}    last of {fact['count']} @ {flood.get('last_origin')}"
                + (f" (nodes: {who})" if who else "")
            )
            if flood.get("last_text"):
                lines.append(f"{prefix}    | {flood['last_text']}")
        if "rule" in node:
            r = node["rule"]
            lines.append(f"{prefix}    <- rule {r['id']}  ({r['at']})")
            if r.get("description"):
                lines.append(f"{prefix}       {r['description']}")
            for a, child in node["because"].items():
                walk(child, prefix + "       ", a)
            for again in node.get("again") or ():
                r = again["rule"]
                lines.append(f"{prefix}    <- derived again by rule {r['id']}  ({r['at']})")
                for a, child in again["because"].items():
                    walk(child, prefix + "       ", a)

    if report["chain"]:
        walk(report["chain"], "  ", None)
    else:
        lines.append("  (no rule derived a fault: the class is 'unknown'; the evidence below opened the incident)")
    if report["other_faults"]:
        lines.append("")
        lines.append("Other faults considered (lower priority or later):")
        for f in report["other_faults"]:
            lines.append(f"  {_describe(f)}   via rule {f['attrs'].get('rule')}")
    lines.append("")
    lines.append("All evidence, by time:")
    for f in report["facts"]:
        if f["kind"] in ("symptom", "fault"):
            continue
        count = f" x{f['count']}" if f.get("count", 1) > 1 else ""
        last = f" (last @ {f['flood']['last_origin']})" if f.get("flood") else ""
        lines.append(f"  {_times(f)}  {f['origin']}: {_describe(f)}{count}{last}")
    lines.append("")
    lines.append("Rules fired:")
    for fr in report["firings"]:
        matched = ", ".join(f"{a}={fid[:8]}" for a, fid in fr["matched"].items())
        lines.append(f"  {fr['rule']}  ({fr['rule_mark']})  matched {matched}")
    lines.append("")
    lines.append("Commands:")
    if not report["actions"]:
        lines.append("  (none)")
    for a in report["actions"]:
        status = a["status"] + (f" rc={a['rc']}" if a.get("rc") is not None else "")
        lines.append(f"  [{a['mode']}/{status}] {' '.join(_quote(x) for x in a['argv'])}")
    return "\n".join(lines)


def _quote(arg: str) -> str:
    safe = all(c.isalnum() or c in "-_=.,:/@%+" for c in arg)
    return arg if safe and arg else "'" + arg.replace("'", "'\\''") + "'"
