"""Replay: evaluate a rulebook over historical logs on virtual time.

Each file is scanned in large chunks by one multi-pattern scanner; the rare hits become facts
(time from the line's own timestamp, else the file's last one), and the facts of all files are
then fed to the engine in time order, so a kernel log and a job log given separately correlate
as they would have live.

Usage::

    result = replay(["slurm-1234.out", "kern.log"], compiled, Store("recover.db"))
    for inc in result.incidents: ...
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

from .facts import Fact
from .incidents import ClosedIncident, Engine
from .linefacts import ClusterContext, FileContext, HitConverter, job_from_filename
from .matching import MatcherSpec, Scanner
from .rulebook.compile import CompiledRulebook
from .store import Store

logger = logging.getLogger(__name__)

__all__ = ["replay", "ReplayResult", "scan_file", "matcher_specs", "CHUNK"]

CHUNK = 4 * 1024 * 1024


@dataclass
class ReplayResult:
    incidents: list[ClosedIncident] = field(default_factory=list)
    files: int = 0
    bytes: int = 0
    hits: int = 0
    facts: int = 0
    long_lines: int = 0
    unreadable: list[str] = field(default_factory=list)
    stats: dict = field(default_factory=dict)


def matcher_specs(compiled: CompiledRulebook) -> list[MatcherSpec]:
    return [MatcherSpec(m.id, m.pattern, sample=m.sample, ignore_case=m.ignore_case) for m in compiled.matchers]


def scan_file(path: str, scanner: Scanner, converter: HitConverter, ctx: FileContext,
              on_bytes: Callable[[int], None] | None = None) -> Iterable[Fact]:
    """Yield the facts of one file (context lines update ``ctx``)."""
    with open(path, "rb") as fh:
        while True:
            data = fh.read(CHUNK)
            if not data:
                hits = scanner.flush()
            else:
                hits = scanner.feed(data)
                if on_bytes:
                    on_bytes(len(data))
            for hit in hits:
                line = hit.line.decode("utf-8", errors="replace")
                fact = converter.convert(hit.matcher, hit.groups, line, hit.line_no, ctx)
                if fact is not None:
                    yield fact
            if not data:
                return


def replay(paths: Sequence[str], compiled: CompiledRulebook, store: Store, *, job: str | None = None,
           attempt: int | None = None, nodes: Sequence[str] = (), scheduler: str = "slurm",
           on_bytes: Callable[[int], None] | None = None, extra_facts: Sequence[Fact] = ()) -> ReplayResult:
    result = ReplayResult()
    cluster = ClusterContext()
    if job is not None and nodes:
        cluster.assign(job, attempt, nodes, 0.0)
    matchers = list(compiled.matchers)
    converter = HitConverter(matchers, cluster)
    specs = matcher_specs(compiled)
    collected: list[tuple[float, int, int, Fact]] = []
    for file_index, path in enumerate(paths):
        ctx = FileContext(path=path, job=job or job_from_filename(os.path.basename(path)), attempt=attempt)
        if nodes:
            ctx.nodes.update(nodes)
        if ctx.job:
            cluster.assign(ctx.job, ctx.attempt, ctx.nodes, 0.0)
        scanner = Scanner(specs)
        try:
            for seq, fact in enumerate(scan_file(path, scanner, converter, ctx, on_bytes)):
                collected.append((fact.at, file_index, seq, fact))
        except OSError as exc:
            logger.error("%s: cannot read: %s", path, exc.strerror or exc)
            result.unreadable.append(path)
            continue
        result.files += 1
        result.bytes += scanner.bytes_seen
        result.long_lines += scanner.long_lines_cut
    for fact in extra_facts:
        collected.append((fact.at, -1, 0, fact))
    collected.sort(key=lambda t: (t[0], t[1], t[2]))
    result.hits = len(collected)
    engine = Engine(compiled, store, scheduler=scheduler, cluster=cluster)
    for _, _, _, fact in collected:
        engine.ingest(fact)
    result.incidents = engine.finish()
    result.facts = engine.stats["facts"]
    result.stats = dict(engine.stats) | {"dropped_values": converter.dropped_values}
    return result
