"""Live flight-recorder dumps: once a job attempt's incident is a collective timeout, find the
dumps its ranks write, wait for them a bounded time, read them off the loop, and ingest their
rank signals into that attempt's incident.

Where the dumps are: the prefix the job's own log printed (``TORCH_NCCL_DEBUG_INFO_TEMP_FILE=``,
``TORCH_FR_DUMP_TEMP_FILE=``, looked for in the first ``HEAD_BYTES`` of the log the scheduler
named), used only inside the folders the site allows (``fr_dump_dirs``); else the site's own
folder (``fr_dump_dir``, with ``{job}``). Detection never waits for any of it: the incident is
open and acted on by its own rules; the signals join it when they come, from a worker thread
that only reads files, through a queue the loop drains (the engine is the loop's alone).

    watch = DumpWatch(site_dir="/scratch/fr/{job}/", allowed=["/scratch/fr"])
    watch.job_log("4242", 0, "/home/u/slurm-4242.out")     # as the scheduler names it
    watch.step(engine, batch, now)                         # every pass of the loop
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from typing import Sequence

from engine.core.decide import split_key
from engine.core.incidents import Engine
from engine.errors import DumpRefused
from engine.sources.files import open_regular
from engine.sources.flight_recorder import Limits
from engine.sources.fr_analysis import analyze, signal_facts
from engine.sources.fr_locate import DumpWait, Place, locate, printed_prefix, site_place

logger = logging.getLogger(__name__)

__all__ = ["DumpWatch", "HEAD_BYTES", "TIMEOUT_CLASSES"]

#: how much of a job's log is searched for the printed prefix (jobs print their environment first)
HEAD_BYTES = 1 << 20
#: incidents whose dumps are looked for
TIMEOUT_CLASSES = frozenset({"nccl_timeout"})
#: how often a waiting folder is listed
POLL_S = 0.5
#: job attempts remembered (their logs, whether their dumps were looked for): the oldest go first
MAX_REMEMBERED = 20000


def _remember(table: dict, key, value) -> None:
    table.pop(key, None)
    table[key] = value
    while len(table) > MAX_REMEMBERED:
        del table[next(iter(table))]


def printed_in_log(path: str) -> str | None:
    """The last dump prefix printed in the first HEAD_BYTES of a job's log (None if none or
    unreadable); the log is opened like every followed file (no link, no FIFO)."""
    try:
        fd, _ = open_regular(path)
    except OSError:
        return None
    try:
        head = os.pread(fd, HEAD_BYTES, 0)
    except OSError:
        return None
    finally:
        os.close(fd)
    found = None
    for line in head.decode("utf-8", "replace").splitlines():
        if "TEMP_FILE" in line:
            found = printed_prefix(line) or found
    return found


class DumpWatch:
    def __init__(
        self,
        site_dir: str | None = None,
        allowed: Sequence[str] = (),
        wait_s: float = 120.0,
        settle_s: float = 10.0,
        limits: Limits = Limits(),
    ) -> None:
        self.site_dir, self.allowed = site_dir, list(allowed)
        self.wait_s, self.settle_s, self.limits = wait_s, settle_s, limits
        self.logs: dict[tuple[str, int], str] = {}
        self.seen: dict[tuple[str, int], float] = {}  # insertion-ordered: bounded by age
        self.waits: dict[tuple[str, int], DumpWait] = {}
        self.polled: dict[tuple[str, int], float] = {}
        self.results: queue.Queue = queue.Queue()
        self.workers: list[threading.Thread] = []
        self.stats = {"waited": 0, "read": 0, "refused": 0, "signals": 0, "prefix_refused": 0}

    @property
    def enabled(self) -> bool:
        return bool(self.site_dir or self.allowed)

    def job_log(self, job: str, attempt: int, path: str) -> None:
        """The log the scheduler named for a job attempt (where a printed prefix is looked for)."""
        _remember(self.logs, (job, attempt), path)

    def _place(self, job: str, attempt: int) -> Place | None:
        log = self.logs.get((job, attempt))
        prefix = printed_in_log(log) if log and self.allowed else None
        if prefix is not None:
            try:
                return locate(prefix, self.allowed)
            except DumpRefused as exc:  # the job's word: said once, then the site's folder
                self.stats["prefix_refused"] += 1
                logger.warning("job %s: dump prefix %s refused: %s", job, exc.path, exc.reason)
        if self.site_dir:
            try:
                return site_place(self.site_dir, job)
            except DumpRefused as exc:
                logger.warning("job %s: no dump folder: %s", job, exc.reason)
        return None

    def _start(self, engine: Engine, now: float) -> None:
        for inc in list(engine.open.values()):
            job, attempt = split_key(inc.key)
            if job is None or attempt is None or (job, attempt) in self.seen:
                continue
            if inc.best is None or inc.best.get("fault_class") not in TIMEOUT_CLASSES:
                continue
            _remember(self.seen, (job, attempt), now)
            place = self._place(job, attempt)
            if place is not None:
                settle = min(self.settle_s, self.wait_s / 4)  # a short wait settles sooner
                self.waits[(job, attempt)] = DumpWait(place, now, self.wait_s, settle, limits=self.limits)
                self.stats["waited"] += 1

    def _read(self, job: str, attempt: int, wait: DumpWait) -> None:
        """In a worker: the dumps read and analysed (files only: no engine, no store)."""
        try:
            dumps, refused = wait.read()
            for r in refused:
                logger.warning("job %s: refused dump %s: %s", job, r.path, r.reason)
            signals = analyze(dumps, unread={r.rank for r in refused if r.rank is not None})
            self.results.put((job, attempt, len(dumps), len(refused), signals))
        except Exception:
            logger.exception("job %s: reading its flight-recorder dumps failed", job)

    def step(self, engine: Engine, batch, now: float) -> None:
        """Start waits for new timeout incidents, poll the waits (a listing, at most every
        POLL_S), hand finished ones to a worker, and ingest what workers found."""
        if not self.enabled:
            return
        self._start(engine, now)
        for key, wait in list(self.waits.items()):
            if now - self.polled.get(key, -POLL_S) < POLL_S:
                continue
            self.polled[key] = now
            if wait.poll(now) is None:
                continue
            del self.waits[key]
            self.polled.pop(key, None)
            if wait.error:
                logger.warning("job %s: %s", key[0], wait.error)
            if wait.names:
                worker = threading.Thread(target=self._read, args=(*key, wait), name=f"frdumps-{key[0]}", daemon=True)
                self.workers = [w for w in self.workers if w.is_alive()] + [worker]
                worker.start()
        while True:
            try:
                job, attempt, n, bad, signals = self.results.get_nowait()
            except queue.Empty:
                return
            self.stats["read"] += n
            self.stats["refused"] += bad
            for fact in signal_facts(signals, job, attempt, now):
                engine.ingest(fact)
                batch.count_fact()
                self.stats["signals"] += 1
