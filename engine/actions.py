"""Plans: from a decision to rendered argv lists, with every value validated before rendering.

A template never sees raw log text: node names and job ids must match strict patterns (else the
action is not planned, and the incident says why), and the only free text (the winning fault's
reason, the first line of evidence) is bounded, with characters outside a safe set removed.
Nothing here runs a command: ``engine/actuator.py`` (acting) and the store (recommending) do.
"""

from __future__ import annotations
from .errors import PlanError

import logging
import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from .linefacts import JOB_RE, NODE_RE
from .rulebook.compile import CompiledAction, CompiledRulebook

logger = logging.getLogger(__name__)

__all__ = ["PlannedAction", "PlanError", "plan_actions", "safe_reason", "idem_key", "evidence_summary"]

_REASON_BAD = re.compile(r"[^A-Za-z0-9 _.:/,()#+-]")
_JOB_ARG = re.compile(r"^(?:\w+=)?\{\{-?\s*job\s*-?\}\}$")
MAX_REASON = 120
_NODES_VAR = re.compile(r"(?<![.\w])nodes\b")  # the `nodes` variable, not evidence.nodes


@dataclass(frozen=True)
class PlannedAction:
    name: str
    target: str  # the node or the job it acts on
    argv: tuple[str, ...]
    idem_key: str
    verify: str | None
    timeout: float


def safe_reason(text: str) -> str:
    """Free text for a drain reason: printable ASCII from a small set, no '=', bounded."""
    text = _REASON_BAD.sub(" ", text or "")
    text = re.sub(r"\s+", " ", text).strip()
    return text[:MAX_REASON]


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


def plan_actions(compiled: CompiledRulebook, decision: str, incident: int, job: str | None, attempt: int | None,
                 nodes: Iterable[str], fault_class: str, scheduler: str = "slurm",
                 names: Iterable[str] | None = None, reason: str | None = None,
                 evidence: Mapping[str, Any] | None = None) -> tuple[list[PlannedAction], list[str]]:
    """Render the plan of a decision. Returns (actions, problems); a problem skips that action.

    ``reason`` is the winning fault's reason and ``evidence`` an ``evidence_summary``; both come
    from logs, so both are cleaned and bounded before a template sees them."""
    problems: list[str] = []
    clean_nodes = []
    for n in nodes:
        if NODE_RE.match(str(n)):
            clean_nodes.append(str(n))
        else:
            problems.append(f"node name {str(n)[:40]!r} is not a valid host name; not acted on")
    clean_nodes = sorted(set(clean_nodes))
    job_ok = job is not None and JOB_RE.match(str(job)) is not None
    variables = {
        "incident": str(incident),
        "job": str(job) if job_ok else "",
        "attempt": int(attempt or 0),
        "nodes": clean_nodes,
        "fault_class": fault_class,
        "decision": decision,
        # the incident stays named first: a drain's Reason= is how its verification finds it
        "reason": safe_reason(f"recover incident {incident} {fault_class}" + (f": {reason}" if reason else "")),
        "evidence": evidence_summary((evidence or {}).get("first_line"), (evidence or {}).get("count", 0),
                                     (evidence or {}).get("nodes", ())),
    }
    plan: list[PlannedAction] = []
    for name in (names if names is not None else compiled.policy["plans"].get(decision, ())):
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
                    plan.append(PlannedAction(name, node, argv, idem_key(incident, name, node), action.verify, action.timeout))
            else:
                if not clean_nodes and any(_NODES_VAR.search(t.source) for t in action.argv):
                    continue  # e.g. exclude: nothing to exclude
                argv = _render(action, variables)
                target = variables["job"] or "-"
                plan.append(PlannedAction(name, target, argv, idem_key(incident, name, target), action.verify, action.timeout))
        except PlanError as exc:
            problems.append(str(exc))
        except Exception as exc:  # a template error is a rulebook bug: record it, never crash
            problems.append(f"action {name}: template failed: {exc}")
    return plan, problems
