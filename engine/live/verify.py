"""Verifiers: is an action's effect there, as the scheduler tells it now?

An action names its verifier in the rulebook (``verify: node_drained``); without one, its kind
(``kind: drain``) picks a default (``DEFAULT_VERIFY``). A verifier answers True or False, or lets the adapter's
``SchedulerError`` go up, which ``check`` turns into ``StateUnknown``: the scheduler could not
tell, and the actuator waits rather than guess. The names are the rulebook's
(``engine.rulebook.model.VERIFY_KINDS``, which the linter checks against); ``VERIFIERS`` holds
one implementation per name.

What a job's state and reason mean (active, held, ended) is the adapter's to say
(``JobInfo.active``, ``.held``, ``.ended``), and so is whether a failed command's output means
the scheduler's controller did not answer (``adapter.unreachable``, asked through ``unreachable``
here).
"""

from __future__ import annotations

import re
from typing import Any, Callable

from engine.errors import SchedulerError, StateUnknown
from engine.rulebook.compile import CompiledRulebook
from engine.rulebook.model import kind_of

__all__ = [
    "DEFAULT_VERIFY",
    "VERIFIERS",
    "base_attempt",
    "check",
    "excluded_in",
    "live_job",
    "node_named",
    "unreachable",
    "verify_name",
]

#: the verifier of an action whose rulebook entry names none, by the action's kind
DEFAULT_VERIFY = {
    "drain": "node_drained",
    "requeue": "job_requeued",
    "exclude": "job_excluded",
    "hold": "job_held",
    "release": "job_released",
    "resume": "node_resumed",
    "cancel": "job_cancelled",
    "page": "none",
    "other": "none",
}
_EXC_ARG = re.compile(r"^ExcNodeList=(.*)$")


def unreachable(adapter, output: str | None) -> bool:
    """Did a command fail because the scheduler's controller did not answer? The adapter knows
    its scheduler's words for that; one that does not say is taken to mean no."""
    says = getattr(adapter, "unreachable", None)
    return bool(says(output or "")) if says is not None and output else False


def node_named(adapter, name: str):
    for n in adapter.nodes():
        if n.name == name:
            return n
    return None


def live_job(adapter, job: str):
    """The job as Slurm has it right now, with required nodes and GPU indexes where the adapter can
    tell (``job_detail``); raises StateUnknown when the scheduler does not answer. Any other
    exception is a bug and goes up as it is."""
    detail = getattr(adapter, "job_detail", None)
    try:
        return detail(job) if detail is not None else adapter.job(job)
    except SchedulerError as exc:
        raise StateUnknown(str(exc)) from exc


def base_attempt(action: dict, inc) -> int:
    """The attempt an action is about: the incident's, or the one named in its key (``...@2``,
    a requeue of a new attempt that landed on a bad node)."""
    _, at, n = str(action.get("idem_key", "")).rpartition("@")
    return int(n) if at and n.isdigit() else int(inc.attempt or 0)


def excluded_in(action: dict) -> set[str] | None:
    for a in action.get("argv") or ():
        m = _EXC_ARG.match(a)
        if m:
            return {x for x in m.group(1).split(",") if x}
    return None


def _v_node_drained(adapter, action: dict, inc) -> bool:
    n = node_named(adapter, action["target"])
    return bool(n and n.drained and f"incident {inc.id}" in (n.reason or ""))


def _v_node_resumed(adapter, action: dict, inc) -> bool:
    n = node_named(adapter, action["target"])
    return bool(n and not n.drained)


def _v_job_requeued(adapter, action: dict, inc) -> bool:
    j = live_job(adapter, action["target"])
    return bool(j and j.attempt > base_attempt(action, inc))


def _v_job_excluded(adapter, action: dict, inc) -> bool:
    j = live_job(adapter, action["target"])
    if j is None:
        return False
    want = excluded_in(action)
    if want is None:
        want = set(inc.nodes) - set(getattr(j, "required_nodes", ()) or ())
    return want <= set(j.excluded_nodes)


def _v_job_held(adapter, action: dict, inc) -> bool:
    j = live_job(adapter, action["target"])
    return bool(j and j.state == "PENDING" and j.held)


def _v_job_released(adapter, action: dict, inc) -> bool:
    j = live_job(adapter, action["target"])
    return bool(j and not j.held)


def _v_job_cancelled(adapter, action: dict, inc) -> bool:
    j = live_job(adapter, action["target"])
    return j is None or j.ended


VERIFIERS: dict[str, Callable[[Any, dict, Any], bool]] = {
    "node_drained": _v_node_drained,
    "node_resumed": _v_node_resumed,
    "job_requeued": _v_job_requeued,
    "job_excluded": _v_job_excluded,
    "job_held": _v_job_held,
    "job_released": _v_job_released,
    "job_cancelled": _v_job_cancelled,
}


def verify_name(compiled: CompiledRulebook, action: dict) -> str:
    """The verifier the action is checked with: its rulebook entry's, or its kind's default."""
    a = compiled.actions.get(action["action"])
    return (a.verify if a is not None and a.verify else None) or DEFAULT_VERIFY.get(
        kind_of(a, action["action"]), "none"
    )


def check(adapter, compiled: CompiledRulebook, action: dict, inc) -> bool:
    """Is the action's effect there? Without a verifier: did its command succeed. Raises
    StateUnknown when the scheduler could not tell; anything else a verifier raises is a bug and
    goes up to the actuator's ``step()``."""
    name = verify_name(compiled, action)
    fn = VERIFIERS.get(name)
    if name == "none" or fn is None:
        return action.get("rc") == 0
    try:
        return bool(fn(adapter, action, inc))
    except SchedulerError as exc:
        raise StateUnknown(f"verify {name}: {exc}") from exc
