"""A job's task layout, written as Slurm writes ``SLURM_TASKS_PER_NODE`` (``2(x3),1``: two tasks on
each of the first three nodes, one on the fourth), from what the scheduler says of the
allocation: the CPUs it holds on each node (``squeue --json``'s ``job_resources.allocated_nodes``,
or ``scontrol show job -d``'s ``Nodes=n[1-2] CPU_IDs=0-1`` lines), the number of tasks and the
CPUs per task. Slurm's default block distribution fills each node with as many tasks as its
CPUs hold, in the node list's order; the engine's rank map (engine/core/rankmap.py) turns the
layout into rank -> node.

A layout is given only where it is certain: the per-node task counts must add up to the job's
tasks exactly. An allocation with more CPUs than tasks need (whole nodes, hyperthreads Slurm
did not count) gives "" (not known), and the rank map then falls back on the even split and the
ranks' own lines.

    tasks_layout([2, 2, 1], ntasks=5) -> "2(x2),1"
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .hostlist import HostlistError, expand_hostlist

__all__ = ["compress", "tasks_layout", "json_cpus", "detail_cpus"]

#: a count beyond this is no allocation of this world (a corrupt or hostile record)
_MAX = 1 << 20


def compress(counts: Sequence[int]) -> str:
    """``[2, 2, 2, 1]`` -> ``"2(x3),1"``, as Slurm writes it."""
    parts: list[str] = []
    i = 0
    while i < len(counts):
        j = i
        while j < len(counts) and counts[j] == counts[i]:
            j += 1
        parts.append(f"{counts[i]}(x{j - i})" if j - i > 1 else str(counts[i]))
        i = j
    return ",".join(parts)


def _int(value: Any) -> int | None:
    if isinstance(value, Mapping):  # later openapi numbers: {"set": true, "number": 3}
        value = value.get("number") if value.get("set", True) and not value.get("infinite") else None
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _MAX else None


def tasks_layout(
    cpus_per_node: Sequence[int] | None,
    ntasks: Any,
    cpus_per_task: Any = None,
    tasks_per_node: Any = None,
) -> str:
    """The layout of a block-distributed job, or "" when it is not certain (see the module doc)."""
    tasks, per_task, per_node = _int(ntasks), _int(cpus_per_task) or 1, _int(tasks_per_node)
    if not cpus_per_node or not tasks or any(c <= 0 or c > _MAX for c in cpus_per_node):
        return ""
    if per_node and per_node * len(cpus_per_node) == tasks:  # --ntasks-per-node
        return compress([per_node] * len(cpus_per_node))
    counts = [c // per_task for c in cpus_per_node]
    if min(counts) < 1 or sum(counts) != tasks:
        return ""
    return compress(counts)


def _scaled(counts: list[int], total: Any) -> list[int] | None:
    """Per-node counts brought to the job's CPUs: cores counted where each holds ``k`` CPUs."""
    cpus = _int(total)
    have = sum(counts)
    if not counts or not have:
        return None
    if cpus is None or cpus == have:
        return counts
    if cpus % have == 0:
        return [c * (cpus // have) for c in counts]
    return None


def json_cpus(record: Mapping[str, Any], nodes: Sequence[str]) -> list[int] | None:
    """The CPUs the job holds on each of ``nodes`` (in that order), from its ``squeue --json``
    record: ``job_resources.allocated_nodes``, each with its ``cpus`` or its allocated cores."""
    resources = record.get("job_resources")
    allocated = resources.get("allocated_nodes") if isinstance(resources, Mapping) else None
    if not isinstance(allocated, list):
        return None
    found: dict[str, int] = {}
    for entry in allocated:
        if not isinstance(entry, Mapping):
            return None
        name = str(entry.get("nodename") or entry.get("name") or "")
        cpus = _int(entry.get("cpus"))
        if cpus is None:
            sockets = entry.get("sockets")
            if not isinstance(sockets, Mapping):
                return None
            cpus = sum(
                1
                for s in sockets.values()
                if isinstance(s, Mapping) and isinstance(s.get("cores"), Mapping)
                for state in s["cores"].values()
                if str(state).startswith("allocated")
            )
        found[name] = found.get(name, 0) + cpus
    if set(found) != set(nodes):
        return None
    return _scaled([found[n] for n in nodes], record.get("cpus"))


def _count_ids(text: str) -> int | None:
    n = 0
    for part in text.split(","):
        lo, dash, hi = part.partition("-")
        if not lo.isdigit() or (dash and not hi.isdigit()):
            return None
        n += int(hi) - int(lo) + 1 if dash else 1
        if n > _MAX:
            return None
    return n


def detail_cpus(pairs: Iterable[tuple[str, str]], nodes: Sequence[str], num_cpus: Any = None) -> list[int] | None:
    """The CPUs the job holds on each of ``nodes`` from ``scontrol show job -d``'s detail pairs
    (``Nodes=n[1-2]``, ``CPU_IDs=0-1``, in order): each ``Nodes`` holds the ``CPU_IDs`` after it."""
    found: dict[str, int] = {}
    hosts: list[str] = []
    for key, value in pairs:
        if key == "Nodes":
            try:
                hosts = expand_hostlist(value)
            except HostlistError:
                return None
        elif key == "CPU_IDs" and hosts:
            n = _count_ids(value)
            if n is None:
                return None
            for h in hosts:
                found[h] = found.get(h, 0) + n
            hosts = []
    if set(found) != set(nodes):
        return None
    return _scaled([found[n] for n in nodes], num_cpus)
