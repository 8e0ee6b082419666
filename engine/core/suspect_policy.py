"""What a suspect costs (policy.suspects): excluded from the restart, drained for diagnosis only
when it recurs across jobs.

A suspect is no verdict: the ranks a collective timeout points at may be the victims of a
switch, a filesystem or the job's own code. So on an incident the restart only keeps the job off
the suspects' nodes (``exclude``, no drain). A node that was a suspect of failed attempts of
``drain_after`` different jobs within ``window`` is another matter (Meta's "lemon nodes"): it is
drained for diagnosis, by its own action (``drain_suspect``) under its own autonomy
(``policy.autonomy.drain_suspect``, recommend as shipped) and the blast-radius guard.

    decision, drain = with_suspects(compiled, decision, suspects, ctx, history)
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence

from engine.core.policy import Decision, GuardContext
from engine.core.suspects import suspect_nodes
from engine.rulebook.compile import CompiledRulebook

__all__ = ["with_suspects"]


def _ranks_on(found: Sequence[Mapping[str, Any]], node: str) -> str:
    return ",".join(str(s["rank"]) for s in found if s.get("node") == node and s.get("rank") is not None) or "-"


def with_suspects(
    compiled: CompiledRulebook,
    decision: Decision,
    found: Sequence[Mapping[str, Any]],
    ctx: GuardContext,
    history: Sequence[tuple[str, str, float]],
) -> tuple[Decision, tuple[str, ...]]:
    """The decision with its suspects' cost, and the nodes to drain for diagnosis. ``history``:
    (job, node, closed_at) of suspect nodes of other incidents within the policy's window."""
    policy = compiled.policy.suspects
    nodes = suspect_nodes(found)
    guards = list(decision.guards)
    if not nodes:
        unnamed = ", ".join(str(s["rank"]) for s in found[:8])
        guards.append({"guard": "suspects", "why": f"suspect rank(s) {unnamed}: no node (the rank map names none)"})
        return dataclasses.replace(decision, guards=tuple(guards)), ()
    if decision.decision == "restart" and policy.exclude and ctx.job is not None:
        plan = decision.plan if "exclude" in decision.plan else decision.plan + ("exclude",)
        guards.append(
            {
                "guard": "suspects",
                "why": "the restart excludes the suspects' node(s) "
                + ", ".join(f"{n} (rank {_ranks_on(found, n)})" for n in nodes)
                + "; not drained: a suspect is no verdict",
            }
        )
        decision = dataclasses.replace(decision, nodes=nodes, plan=plan)
    repeat = []
    for node in nodes:
        jobs = {job for job, n, _ in history if n == node and job != ctx.job}
        if len(jobs) + 1 >= policy.drain_after:
            repeat.append(node)
            guards.append(
                {
                    "guard": "suspects",
                    "why": f"{node} was a suspect of {len(jobs) + 1} different jobs' failed attempts within "
                    f"{int(policy.window)} s (policy.suspects.drain_after {policy.drain_after}): drained for diagnosis",
                }
            )
    drain: tuple[str, ...] = ()
    if repeat:
        blast = compiled.policy.blast_radius
        already = {n for n, st in ctx.node_states.items() if st.get("drained")}
        new = [n for n in repeat if n not in already]
        drained = {n for n, t in ctx.recent_drains if ctx.now - t <= blast.window}
        limit = blast.max_drains
        if ctx.cluster_size:
            limit = min(limit, max(1, int(blast.max_fraction * ctx.cluster_size)))
        fresh = [n for n in new if n not in drained]
        if fresh and len(drained) + len(fresh) > limit:
            guards.append(
                {
                    "guard": "blast_radius",
                    "why": f"draining {', '.join(fresh)} for diagnosis would make {len(drained) + len(fresh)} drains "
                    f"in {int(blast.window)} s, over the limit of {limit}: not drained",
                }
            )
        else:
            drain = tuple(new)
    return dataclasses.replace(decision, guards=tuple(guards)), drain
