"""Plans: from a decision to rendered argv lists, with every value validated before rendering.

A template never sees raw log text: node names and job ids must match strict patterns (else the
action is not planned, and the incident says why), and the only free text (the winning fault's
reason, the first line of evidence) is bounded, with characters outside a safe set removed.
Nothing here runs a command: ``engine/live/actuator.py`` (acting) and the store (recommending) do.
"""

from __future__ import annotations
from engine.errors import PlanError

import json
import logging
import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from engine.facts import JOB_RE, NODE_RE
from engine.rulebook.compile import CompiledAction, CompiledRulebook

logger = logging.getLogger(__name__)

__all__ = ["PlannedAction", "PlanError", "plan_actions", "safe_reason", "idem_key", "evidence_summary", "alert_json"]

_REASON_BAD = re.compile(r"[^A-Za-z0-9 _.:/,()#+-]")
_JOB_ARG = re.compile(r"^(?:\w+=)?\{\{-?\s*job\s*-?\}\}$")
MAX_REASON = 120
MAX_OUTCOME = 400
_SETS_NODES = re.compile(r"=\{\{-?\s*(?:nodes|excluded)\b")  # ExcNodeList={{ nodes|join(',') }}


@dataclass(frozen=True)
class PlannedAction:
    name: str
    target: str  # the node or the job it acts on
    argv: tuple[str, ...]
    idem_key: str
    verify: str | None
    timeout: float


def safe_reason(text: str, limit: int = MAX_REASON) -> str:
    """Free text for a drain reason: printable ASCII from a small set, no '=', bounded."""
    text = _REASON_BAD.sub(" ", text or "")
    text = re.sub(r"\s+", " ", text).strip()
    return text[:limit]


def idem_key(incident: int, action: str, target: str) -> str:
    return f"{incident}:{action}:{target}"


def _render(action: CompiledAction, variables: Mapping[str, Any]) -> tuple[str, ...]:
    argv = []
    for t in action.argv:
        value = t.render(variables)
        if "\x00" in value:
            raise PlanError(f"action {action.name}: rendered a NUL byte")
        argv.append(value)
    if not argv or not argv[0]:
        raise PlanError(f"action {action.name}: empty command")
    return tuple(argv)


def evidence_summary(first_line: str | None, count: int, nodes: Iterable[str]) -> dict[str, Any]:
    """What templates may read as ``evidence``: the first line (cleaned and bounded like a reason),
    how many pieces of evidence, and the valid node names among those they name (at most 16)."""
    clean = sorted({str(n) for n in nodes if NODE_RE.match(str(n))})[:16]
    return {"first_line": safe_reason(first_line or ""), "count": max(0, int(count)), "nodes": clean}


def alert_json(
    incident: int, job: str, fault_class: str, decision: str, nodes: list[str], fault_reason: str, outcome: str
) -> str:
    """The body of an Alertmanager v2 ``POST /api/v2/alerts``: one alert, its labels the things a
    site routes and silences on. Every value is already validated or cleaned by the caller."""
    labels = {
        "alertname": "RecoverIncident",
        "incident": str(incident),
        "fault_class": fault_class,
        "decision": decision,
        "nodes": ",".join(nodes) or "-",
        "job": job or "-",
        "service": "recover",
    }
    summary = f"incident {incident}: {fault_class} on {','.join(nodes) or '-'} (job {job or '-'}): {decision}"
    return json.dumps(
        [{"labels": labels, "annotations": {"summary": summary, "description": fault_reason, "outcome": outcome}}],
        sort_keys=True,
    )


def plan_actions(
    compiled: CompiledRulebook,
    decision: str,
    incident: int,
    job: str | None,
    attempt: int | None,
    nodes: Iterable[str],
    fault_class: str,
    scheduler: str = "slurm",
    names: Iterable[str] | None = None,
    reason: str | None = None,
    evidence: Mapping[str, Any] | None = None,
    outcome: str | None = None,
    excluded: Iterable[str] | None = None,
) -> tuple[list[PlannedAction], list[str]]:
    """Render the plan of a decision. Returns (actions, problems); a problem skips that action.

    ``reason`` is the winning fault's reason and ``evidence`` an ``evidence_summary``; both come
    from logs, so both are cleaned and bounded before a template sees them. ``excluded`` is the
    job's whole exclusion list to set (what it had plus the new nodes; the actuator reads it from
    Slurm right before the command), ``outcome`` what was done so far (for pages)."""
    problems: list[str] = []
    clean_nodes = []
    for n in nodes:
        if NODE_RE.match(str(n)):
            clean_nodes.append(str(n))
        else:
            problems.append(f"node name {str(n)[:40]!r} is not a valid host name; not acted on")
    clean_nodes = sorted(set(clean_nodes))
    clean_excluded = sorted(
        {str(n) for n in (excluded if excluded is not None else clean_nodes) if NODE_RE.match(str(n))}
    )
    job_ok = job is not None and JOB_RE.match(str(job)) is not None
    names = list(names if names is not None else compiled.policy.plans.get(decision, ()))
    fault_reason = safe_reason(reason or "") or "-"
    said = (
        safe_reason(
            outcome if outcome is not None else "planned: " + ", ".join(n for n in names if n != "notify"), MAX_OUTCOME
        )
        or "-"
    )
    variables = {
        "incident": str(incident),
        "job": str(job) if job_ok else "",
        "attempt": int(attempt or 0),
        "nodes": clean_nodes,
        "fault_class": fault_class,
        "decision": decision,
        # the incident stays named first: a drain's Reason= is how its verification finds it
        "reason": safe_reason(f"recover incident {incident} {fault_class}" + (f": {reason}" if reason else "")),
        "evidence": evidence_summary(
            (evidence or {}).get("first_line"), (evidence or {}).get("count", 0), (evidence or {}).get("nodes", ())
        ),
        "excluded": clean_excluded,
        "fault_reason": fault_reason,
        "outcome": said,
        "alert": alert_json(
            incident, str(job) if job_ok else "", fault_class, decision, clean_nodes, fault_reason, said
        ),
    }
    plan: list[PlannedAction] = []
    for name in names:
        action = compiled.actions.get(name)
        if action is None:
            problems.append(f"action {name!r} is not defined")
            continue
        if action.scheduler not in (scheduler, "any"):
            continue
        # an argument that IS the job id (`{{ job }}`, `JobId={{ job }}`) needs a valid one; a
        # message that merely mentions it (notify) does not
        needs_job = any(_JOB_ARG.match(t.source) for t in action.argv)
        if needs_job and not job_ok:
            problems.append(f"action {name}: no valid job id known; not planned")
            continue
        try:
            if action.per == "node":
                if not clean_nodes:
                    continue
                for node in clean_nodes:
                    argv = _render(action, variables | {"node": node})
                    plan.append(
                        PlannedAction(name, node, argv, idem_key(incident, name, node), action.verify, action.timeout)
                    )
            else:
                if not clean_nodes and any(_SETS_NODES.search(t.source) for t in action.argv):
                    continue  # e.g. exclude: nothing to exclude (a page that mentions the nodes still goes)
                argv = _render(action, variables)
                target = str(variables["job"] or "-")
                plan.append(
                    PlannedAction(name, target, argv, idem_key(incident, name, target), action.verify, action.timeout)
                )
        except PlanError as exc:
            problems.append(str(exc))
        except Exception as exc:  # a template error is a rulebook bug: record it, never crash
            problems.append(f"action {name}: template failed: {exc}")
    return plan, problems
