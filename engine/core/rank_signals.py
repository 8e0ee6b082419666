"""Rank signals: one piece of evidence that points at one global rank of a job attempt.

A collective timeout prints on every rank and names no node; what tells the ranks apart is
where each one stopped. Each source of that knowledge (PyTorch's watchdog lines in a job log,
a flight-recorder dump, an NCCL transport error naming a peer) produces ``RankSignal`` values;
attribution (``core.suspects``) joins them with the attempt's rank -> node map, which only the
scheduler's allocation may confirm, into the incident's ``suspects``.

A signal never carries a node the job printed as a fact: ``host`` is what the evidence said,
kept to show, and trusted only where it is a node of the job's own allocation.

    RankSignal(rank=7, signal="fr_not_joined", detail="pg 0 seq 42 allreduce: ranks 0-6 waiting",
               origin="/scratch/fr/rank_7", group="0", seq=42)
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.errors import FactError

__all__ = ["RankSignal", "MAX_RANK"]

#: the largest global rank believed (the largest jobs run ~10^5-10^6 ranks); a larger number in a
#: log or a dump is refused, never allocated for
MAX_RANK = 1 << 22


@dataclass(frozen=True, slots=True)
class RankSignal:
    rank: int  # global rank, 0 <= rank <= MAX_RANK
    signal: str  # a short name: fr_not_joined, fr_no_pending, watchdog_behind, ...
    detail: str  # what the evidence says, bounded text (clean_text), shown by explain
    origin: str  # "path:line" of a log line, or a dump file's path
    group: str | None = None  # process group, where the evidence names one
    seq: int | None = None  # collective sequence number, where the evidence names one
    host: str | None = None  # the host the evidence printed (untrusted: see the module doc)

    def __post_init__(self) -> None:
        if isinstance(self.rank, bool) or not isinstance(self.rank, int) or not 0 <= self.rank <= MAX_RANK:
            raise FactError(f"rank out of range: {self.rank!r}")
