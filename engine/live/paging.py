"""Telling people: the outcome of an incident's actions in a few words, and the pages (the
rulebook's ``notify``) the actuator sends when an action escalates, waits, or is refused."""

from __future__ import annotations

import logging

from engine.core.actions import idem_key, plan_actions
from engine.rulebook.compile import CompiledRulebook
from engine.rulebook.model import kind_of
from engine.store import ActionStatus, Store

logger = logging.getLogger(__name__)

__all__ = ["POLICY_GUARDS", "is_page", "outcome", "page", "page_action"]

#: an incident's guards that refused part of its plan on policy grounds
POLICY_GUARDS = ("blast_radius", "retry_budget", "no_progress", "cancelled", "silence", "autonomy")


def is_page(compiled: CompiledRulebook, name: str) -> bool:
    """An action that tells people rather than changes the cluster (``kind: page``): no part of an
    outcome."""
    return kind_of(compiled.actions.get(name), name) == "page"


def page_action(compiled: CompiledRulebook) -> str | None:
    """The action pages are sent with: the rulebook's first of kind page (the shipped ``notify``)."""
    return next((name for name, a in compiled.actions.items() if kind_of(a) == "page"), None)


def outcome(store: Store, compiled: CompiledRulebook, incident_id: int) -> str:
    """What was done, what failed and what was refused for this incident, in a few words."""
    done: list[str] = []
    failed: list[str] = []
    refused: list[str] = []
    waiting: list[str] = []
    skipped: list[str] = []
    for a in store.actions(incident_id):
        if a["mode"] != "act" or is_page(compiled, a["action"]) or "notify" in a["idem_key"]:
            continue
        what = f"{a['action']} {a['target']}"
        note = (a.get("note") or "").strip()
        if a["status"] == ActionStatus.VERIFIED:
            done.append(what + (f" ({note})" if note else ""))
        elif a["status"] == ActionStatus.SKIPPED:
            (refused if note.startswith("refused") else skipped).append(f"{what}: {note}" if note else what)
        elif a["status"] == ActionStatus.ESCALATED:
            failed.append(f"{what}: {note}")
        elif a["status"] == ActionStatus.FAILED:
            waiting.append(f"{what} not taken yet ({(a.get('output') or '').strip()[-80:]})")
        else:
            waiting.append(f"{what} {a['status']}")
    inc = store.incident(incident_id)
    guards = inc.guards if inc is not None else ()
    policy = [g.get("why", "") for g in guards if g.get("guard") in POLICY_GUARDS]
    # what the scope kept from running (a job that opted out, a partition that only recommends):
    # its owner reads here what Recover would have done
    scoped = [g.get("why", "") for g in guards if g.get("guard") == "scope"]
    parts = []
    for label, items in (
        ("scope", scoped),  # first: a page is cut at actions.MAX_OUTCOME characters
        ("done", done),
        ("FAILED", failed),
        ("refused", refused + policy),
        ("not done", skipped),
        ("pending", waiting),
    ):
        if items:
            parts.append(f"{label}: " + ", ".join(items))
    # pages keep only characters safe everywhere (see actions.safe_reason): no ; or |
    return " / ".join(parts) or "nothing to do"


def page(store: Store, compiled: CompiledRulebook, inc, why: str, tag: str, job: str | None = None) -> None:
    """Tell people (the rulebook's notify), once per incident, tag and job: journaled ``planned``,
    the actuator sends it on its next step, ahead of the action it is about."""
    name = page_action(compiled)
    if name is None:
        return
    plan, _ = plan_actions(
        compiled,
        inc.decision or "stop",
        inc.id,
        job or inc.job,
        inc.attempt,
        inc.nodes,
        inc.fault_class or "unknown",
        names=(name,),
        reason=inc.reason or "",
        outcome=f"{why} / {outcome(store, compiled, inc.id)}",
    )
    for p in plan:
        key = idem_key(inc.id, f"notify-{tag}", p.target)
        if store.add_action(inc.id, key, name, p.target, p.argv, "act", ActionStatus.PLANNED, note=why) is not None:
            logger.error("incident %s: %s", inc.id, why)
