"""Rank -> node, per job attempt: which node each global rank of an attempt ran on.

Two witnesses, and one of them decides what the other is worth:

- the scheduler: the attempt's allocation (its node list, in the scheduler's order) and its task
  layout (``SLURM_TASKS_PER_NODE``'s ``2(x3),1``; Slurm's default block distribution puts ranks
  0..k-1 on the first node, the next ones on the second...). Without a layout, an allocation
  whose world size the evidence gives and that divides evenly is taken as block-distributed;
- the ranks themselves: NCCL's ``host:pid:tid [local] NCCL INFO comm ... rank R nranks N``
  lines say which host printed rank R. A job's lines are the user's text (DESIGN.md, "who may
  say what"): a printed host that is no node of the allocation, or a printed map that disagrees
  with the scheduler's layout, makes the whole map name no node.

    m = build_rank_map(("n1", "n2"), tasks_per_node="2(x2)", printed={3: "n2"})
    m.node_of(3) -> "n2"; m.trusted -> True

Pure: no I/O, no clock; bounded (a layout of more than MAX_RANK tasks names nothing).
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Iterable, Mapping

from engine.core.rank_signals import MAX_RANK

__all__ = ["RankMap", "build_rank_map", "parse_tasks_per_node"]

_TASKS_PART = re.compile(r"^([0-9]{1,7})(?:\(x([0-9]{1,7})\))?$")


def parse_tasks_per_node(text: str | None) -> tuple[int, ...] | None:
    """``"2(x3),1"`` -> (2, 2, 2, 1). None for anything malformed or larger than MAX_RANK tasks."""
    if not text or len(text) > 4096:
        return None
    out: list[int] = []
    for part in text.strip().split(","):
        m = _TASKS_PART.match(part.strip())
        if m is None:
            return None
        count, times = int(m.group(1)), int(m.group(2) or 1)
        if count < 1 or times < 1 or len(out) + times > 1 << 16 or (sum(out) + count * times) > MAX_RANK:
            return None
        out.extend([count] * times)
    return tuple(out)


@dataclass(frozen=True)
class RankMap:
    alloc: tuple[str, ...]
    #: the first rank of each node of ``alloc`` under block distribution, and the world size;
    #: None where the layout is not known
    starts: tuple[int, ...] | None = None
    world: int | None = None
    printed: Mapping[int, str] = field(default_factory=lambda: MappingProxyType({}))
    trusted: bool = False
    why: str = ""  # why it names no node (explain shows it)

    def node_of(self, rank: int) -> str | None:
        if not self.trusted or rank < 0:
            return None
        if self.starts is not None and self.world is not None:
            if rank >= self.world:
                return None
            return self.alloc[bisect.bisect_right(self.starts, rank) - 1]
        return self.printed.get(rank)


def _layout(
    alloc: tuple[str, ...], tasks: tuple[int, ...] | None, world: int | None
) -> tuple[tuple[int, ...], int] | None:
    if tasks is not None:
        if len(tasks) != len(alloc):
            return None
        starts, total = [], 0
        for t in tasks:
            starts.append(total)
            total += t
        return tuple(starts), total
    if len(alloc) == 1:
        return (0,), world if world is not None else MAX_RANK + 1
    if world is not None and world > 0 and world % len(alloc) == 0:
        per = world // len(alloc)
        return tuple(i * per for i in range(len(alloc))), world
    return None


def build_rank_map(
    alloc: Iterable[str],
    tasks_per_node: str | None = None,
    world: int | None = None,
    printed: Mapping[int, str] | None = None,
) -> RankMap:
    """The rank map of one attempt (see the module doc). ``alloc``: the scheduler's node list, in
    its order; ``tasks_per_node``: its layout, where known; ``world``: the world size the evidence
    gives; ``printed``: rank -> the host its own lines named."""
    nodes = tuple(dict.fromkeys(str(n) for n in alloc))
    shown = MappingProxyType(dict(printed or {}))
    if not nodes:
        return RankMap(nodes, printed=shown, why="the scheduler's allocation of the attempt is not known")
    tasks = parse_tasks_per_node(tasks_per_node)
    if tasks_per_node and tasks is None:
        return RankMap(nodes, printed=shown, why=f"task layout {tasks_per_node[:40]!r} is not readable")
    layout = _layout(nodes, tasks, world)
    if tasks is not None and layout is None:
        return RankMap(nodes, printed=shown, why="the task layout does not fit the allocation")
    if tasks is not None and layout is not None and world is not None and world != layout[1]:
        return RankMap(
            nodes, printed=shown, why=f"the job printed {world} ranks; the scheduler's layout has {layout[1]}"
        )
    outside = sorted({h for h in shown.values() if h not in nodes})
    if outside:
        return RankMap(
            nodes,
            printed=shown,
            why=f"the job's lines name {', '.join(outside[:4])}, not in its allocation: the printed map names no node",
        )
    starts, total = layout if layout is not None else (None, world)
    trial = RankMap(nodes, starts, total, shown, trusted=True)
    if starts is not None:
        for rank, host in shown.items():
            if trial.node_of(rank) != host:
                return RankMap(
                    nodes,
                    starts,
                    total,
                    shown,
                    why=f"rank {rank} printed host {host}, the scheduler's layout puts it on "
                    f"{trial.node_of(rank) or 'no node'}: the map names no node",
                )
    elif not shown:
        return RankMap(nodes, None, total, shown, why="neither a task layout nor printed hosts say where ranks ran")
    return trial
