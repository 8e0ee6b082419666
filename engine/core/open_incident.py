"""An incident while it gathers evidence: which key it has, which facts joined it, what it tells
the action templates, and which ranks its evidence points at.

``Engine`` (core.incidents) decides when an incident opens, what joins it and when it closes;
this module holds what one open incident *is*, so that the lifecycle reads apart from the record.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from engine.core.decide import split_key
from engine.core.memory import Live
from engine.core.rank_signals import signal_of
from engine.core.suspects import RankEvidence, suspects
from engine.facts import Fact

__all__ = ["OpenIncident", "incident_key"]


def incident_key(attrs: Mapping[str, Any]) -> str | None:
    """The incident a fact joins: its job attempt's, else its node's; ``None`` when it has neither."""
    job = attrs.get("job")
    if job is not None:
        return f"job:{job}:{int(attrs.get('attempt') or 0)}"
    node = attrs.get("node")
    if node is not None:
        return f"node:{node}"
    return None


@dataclass
class OpenIncident:
    id: int
    key: str
    opened_at: float
    last_at: float
    faults: list[Fact] = field(default_factory=list)
    facts: set[str] = field(default_factory=set)
    best: Fact | None = None
    closed_at: float | None = None
    fault_ids: set[str] = field(default_factory=set)  # of ``faults``
    #: the job attempt the scheduler said held the node of a node's incident (see ``core.bind``)
    bound: tuple[str, int] | None = None
    notes: list[dict[str, Any]] = field(default_factory=list)  # guards to record when it closes
    decision: str | None = None  # once closed

    def __post_init__(self) -> None:
        self.fault_ids.update(f.id for f in self.faults)

    def evidence(self, live: Mapping[str, Live]) -> dict[str, Any]:
        """Its evidence for action templates: its earliest line, how many, which nodes."""
        lives = sorted(
            (live[f] for f in self.facts if f in live and live[f].fact.kind not in ("symptom", "fault")),
            key=lambda lv: lv.fact.at,
        )
        first = next(
            (
                lv.fact.get("text") or lv.fact.get("evidence")
                for lv in lives
                if lv.fact.get("text") or lv.fact.get("evidence")
            ),
            None,
        )
        nodes = {str(lv.fact.get("node")) for lv in lives if lv.fact.get("node")}
        return {"first_line": str(first) if first else None, "count": sum(lv.count for lv in lives), "nodes": nodes}

    def suspects(self, live: Mapping[str, Live], ranks: RankEvidence, max_silent: float) -> list[dict[str, Any]]:
        """The ranks its evidence points at (core.suspects), with their nodes where the attempt's
        rank map says so."""
        job, attempt = self.bound if self.bound is not None else split_key(self.key)
        if job is None:
            return []
        signals = [s for s in (signal_of(live[f].fact) for f in self.facts if f in live) if s is not None]
        rank_map = ranks.get(job, int(attempt or 0))
        if rank_map is None and not signals:
            return []
        found, _ = suspects(rank_map, signals, max_silent=max_silent)
        return found
