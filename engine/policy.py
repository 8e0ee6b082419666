"""Policy: from a fault to a decision, and the guards that may change it.

Each guard that changes a decision says so in the ``guards`` list of the result, which the store
keeps and ``explain`` prints: "why did it not restart?" must be answerable without reading code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from .rulebook.compile import CompiledRulebook

__all__ = ["Decision", "decide"]


@dataclass(frozen=True)
class Decision:
    fault_class: str
    decision: str
    nodes: tuple[str, ...]
    reason: str
    guards: tuple[Mapping[str, Any], ...] = field(default=())


def decide(compiled: CompiledRulebook, fault_class: str, nodes: tuple[str, ...], reason: str) -> Decision:
    decision = compiled.policy["decisions"].get(fault_class, "restart")
    guards: list[dict[str, Any]] = []
    if decision == "isolate_and_restart" and not nodes:
        # nothing to isolate: the attempt still deserves a restart
        guards.append({"guard": "no_nodes", "from": decision, "to": "restart",
                       "why": "the fault names no node to isolate"})
        decision = "restart"
    return Decision(fault_class, decision, nodes, reason, tuple(guards))
