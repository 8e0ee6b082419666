"""Which job a node's incident is about, when the fault arrived before the scheduler said.

The cluster context (which job attempt runs on which node) is learned from scheduler polls, so a
GPU that fails within one poll of its job starting finds no job on its node, and its incident
opens for the node alone. Only the scheduler may say which job attempt held the node (never a
log line: see DESIGN, "Trust"), so such an incident waits for the scheduler's answer: the poller
is asked at once (``to_ask``) and every answer that comes (a poll of the whole cluster, or an
answer about these nodes) is offered to the waits (``answer``).

The first answer that shows a job attempt holding the node ends the wait with that attempt (the
engine then binds the incident to it); an answer to a question put after the fault that shows no
job there ends it without one (the node ran no job). An answer whose question was put before
the fault cannot say the node was free when it failed, so it only binds. The node's isolation
never waits for any of this: it is drained at once, as before.

    waits = NodeWaits()
    waits.add(incident, "n2", since=fault.at)
    waits.to_ask()                                   # {"n2"}: once per wait
    waits.answer(jobs, covers={"n2"}, asked_at=t)    # [(wait, holders)]: the waits ended with a job
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from engine.facts import JOB_ACTIVE_STATES, JOB_RE

__all__ = ["NodeWaits", "Wait", "bound_note"]


@dataclass
class Wait:
    incident: int
    node: str
    since: float  # when the fault happened: an answer to a question put later is final
    asked: bool = False


def _job_order(job: Any) -> tuple[int, str, int]:
    jid = str(job.job_id)
    return (len(jid), jid, int(job.attempt or 0))


def bound_note(node: str, holders: list[Any]) -> dict[str, Any]:
    """The guard that says, in the incident, how it was bound to ``holders[0]``."""
    first = holders[0]
    others = sorted({str(j.job_id) for j in holders[1:]} - {str(first.job_id)})
    return {
        "guard": "bound",
        "why": f"the fault on {node} came before a scheduler poll showed its job; the scheduler then said "
        f"job {first.job_id} attempt {int(first.attempt or 0)} held {node}"
        + (f" (and job {', '.join(others)})" if others else "")
        + ": the incident is that attempt's",
    }


class NodeWaits:
    """The node incidents that wait for the scheduler to say which job attempt held their node."""

    def __init__(self) -> None:
        self.waits: dict[int, Wait] = {}

    def __len__(self) -> int:
        return len(self.waits)

    def __contains__(self, incident: object) -> bool:
        return incident in self.waits

    def add(self, incident: int, node: str, since: float) -> None:
        self.waits.setdefault(incident, Wait(incident, node, since))

    def drop(self, incident: int) -> None:
        self.waits.pop(incident, None)

    def to_ask(self) -> set[str]:
        """The nodes not asked about yet (each wait is asked about once; the polls that follow
        answer it anyway)."""
        new = {w.node for w in self.waits.values() if not w.asked}
        for w in self.waits.values():
            w.asked = True
        return new

    def answer(self, jobs: Iterable[Any], covers: Iterable[str], asked_at: float) -> list[tuple[Wait, list[Any]]]:
        """The scheduler's answer: ``jobs`` are the job attempts it lists (any state; only those
        holding nodes count), ``covers`` the nodes it speaks for, ``asked_at`` when the question
        was put. Returns the waits it ends with a job, each with the job attempts holding its
        node (the first is the one to bind: the lowest job id, so that replays agree)."""
        covered = set(covers)
        holding = [j for j in jobs if j.state in JOB_ACTIVE_STATES and JOB_RE.match(str(j.job_id))]
        ended: list[tuple[Wait, list[Any]]] = []
        for w in list(self.waits.values()):
            if w.node not in covered:
                continue
            holders = sorted((j for j in holding if w.node in j.nodes), key=_job_order)
            if holders:
                del self.waits[w.incident]
                ended.append((w, holders))
            elif asked_at >= w.since:
                del self.waits[w.incident]  # asked after the fault: no job held the node
        return ended
