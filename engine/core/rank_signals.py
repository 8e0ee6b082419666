"""Rank signals: one piece of evidence that points at one global rank of a job attempt.

A collective timeout prints on every rank and names no node; what tells the ranks apart is
where each one stopped. Each source of that knowledge (PyTorch's watchdog lines in a job log,
a flight-recorder dump, an NCCL transport error naming a peer) produces ``RankSignal`` values;
attribution (``core.suspects``) joins them with the attempt's rank -> node map, which only the
scheduler's allocation may confirm, into the incident's ``suspects``.

A signal never carries a node the job printed as a fact: ``host`` is what the evidence said,
kept to show, and trusted only where it is a node of the job's own allocation.

A source hands a signal to the engine as a ``rank_signal`` fact of the job attempt it belongs
to (``rank_signal_fact``); the rulebook's ``symptom.rank_signal`` joins it to that attempt's
incident, or opens an ``nccl_timeout`` incident with it when nothing else did, and attribution
reads it back (``signal_of``) when the incident closes.

    RankSignal(rank=7, signal="fr_not_joined", detail="pg 0 seq 42 allreduce: ranks 0-6 waiting",
               origin="/scratch/fr/rank_7", group="0", seq=42)
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.errors import FactError
from engine.facts import JOB_RE, MAX_VALUE, Fact, clean_text

__all__ = ["RankSignal", "MAX_RANK", "rank_signal_fact", "signal_of"]

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


def rank_signal_fact(sig: RankSignal, job: str, attempt: int, at: float) -> Fact:
    """The ``rank_signal`` fact of ``sig`` for one job attempt, at ``at`` (the clock of the
    source that read it). The job attempt is the caller's to say (the scheduler's, or the
    replay's context), never the evidence's. The host the evidence printed is kept as ``host``,
    never as ``node``: nothing treats it as a claim about a node (see the module doc)."""
    if not JOB_RE.match(str(job)):
        raise FactError(f"not a job id: {job!r}")
    if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 0:
        raise FactError(f"not an attempt: {attempt!r}")
    attrs: dict[str, object] = {
        "job": str(job),
        "attempt": attempt,
        "rank": sig.rank,
        "signal": clean_text(sig.signal, 64),
        "detail": clean_text(sig.detail, MAX_VALUE),
    }
    if sig.group is not None:
        attrs["group"] = clean_text(str(sig.group), 64)
    if sig.seq is not None:
        if isinstance(sig.seq, bool) or not isinstance(sig.seq, int) or not 0 <= sig.seq < 1 << 53:
            raise FactError(f"sequence number out of range: {sig.seq!r}")
        attrs["seq"] = sig.seq
    if sig.host is not None:
        attrs["host"] = clean_text(str(sig.host), 64)
    return Fact.make("rank_signal", attrs, at, clean_text(sig.origin, MAX_VALUE))


def signal_of(fact: Fact) -> RankSignal | None:
    """The signal a ``rank_signal`` fact carries (None for any other fact, or a malformed one)."""
    if fact.kind != "rank_signal":
        return None
    rank, seq = fact.get("rank"), fact.get("seq")
    try:
        return RankSignal(
            rank=rank,
            signal=str(fact.get("signal") or "?"),
            detail=str(fact.get("detail") or ""),
            origin=fact.origin,
            group=None if fact.get("group") is None else str(fact.get("group")),
            seq=seq if isinstance(seq, int) and not isinstance(seq, bool) else None,
            host=None if fact.get("host") is None else str(fact.get("host")),
        )
    except FactError:
        return None
