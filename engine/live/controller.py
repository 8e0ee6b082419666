"""The long-running controller behind ``recover run``.

One loop, one thread doing the work (watchdog and the metrics server have their own):
followed files and the agents' spool are read as they change; each batch of lines is scanned,
turned into facts and evaluated, and its effects (facts, firings, incidents) are committed in
the same SQLite transaction as the new read offsets — so a kill -9 neither loses nor repeats a
line. Time is wall time; the engine's timers (settle, for:, absent_for) advance every tick.

SIGTERM/SIGINT stop it within a second; SIGHUP or a changed rulebook file reloads the rulebook
after validating it (an invalid one is reported and the old one kept).
"""

from __future__ import annotations

import copy
import json
import logging
import math
import os
import signal
import sqlite3
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from engine.facts import JOB_ACTIVE_STATES, Fact
from engine.core.incidents import ClosedIncident, Engine
from engine.core.linefacts import ClusterContext, FileContext, Flood, HitConverter, StreamFacts, job_from_filename
from engine.core.matching import Scanner
from engine.live.metrics import Metrics
from engine.core.replay import matcher_specs, matchers_for
from engine.rulebook import CompiledRulebook, load_rulebook
from engine.sources.follow import Follower, Tailed
from engine.store import Store, StoreError

logger = logging.getLogger(__name__)

__all__ = ["Controller", "ControllerConfig"]

#: one transaction holds at most this many scanner hits, or this much work: a burst of matching
#: lines is committed in pieces (each with its read offset), so a stop request is honoured within
#: a fraction of a second and a kill -9 loses at most the piece in progress (read again later)
BATCH_HITS = 500
BATCH_SECONDS = 0.25
#: resolution of the engine's clock (see _clock)
CLOCK_STEP = 0.01
#: while the store refuses writes, try again this often
STORE_RETRY_S = 1.0
#: errors of the same kind are logged at most this often
LOG_EVERY_S = 30.0

_STORE_ERRORS = (StoreError, sqlite3.Error)


def _clock() -> float:
    """Engine time, live: wall time in steps of CLOCK_STEP. Every fact is stamped on arrival;
    with a new time for each fact the engine would run its timers (every open incident, every
    tracked job attempt) once per fact; in steps, at most 1/CLOCK_STEP times a second."""
    return math.floor(time.time() / CLOCK_STEP) * CLOCK_STEP


def _raise_nofile_limit() -> None:
    """Open files: the soft limit raised to the hard one (the follower keeps at most a share of
    it open, see Follower.max_open; the shipped unit sets LimitNOFILE)."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = hard if hard != resource.RLIM_INFINITY else max(soft, 65536)
        if soft != resource.RLIM_INFINITY and soft < want:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    except (ImportError, ValueError, OSError) as exc:
        logger.info("could not raise the open-file limit: %s", exc)


def _describe(exc: BaseException) -> str:
    """The error and what caused it (a failed ROLLBACK can hide the real cause, e.g. a full disk)."""
    parts, seen = [], set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen and len(parts) < 3:
        seen.add(id(e))
        parts.append(str(e) or type(e).__name__)
        e = e.__cause__ or e.__context__
    return "; after: ".join(parts)


@dataclass
class ControllerConfig:
    rules: Sequence[str] = ()
    defaults: bool = True
    overlays: Sequence[tuple[str, str]] = ()  # in-memory rulebook layers (autonomy from recover.toml)
    db: str = "recover.db"
    follow: Sequence[str] = ()
    spool: str | None = None
    scheduler: str = "none"
    dry_run: bool = True
    poll: float | None = None
    metrics_port: int | None = None
    tick: float = 0.2
    scheduler_interval: float = 5.0
    adapter: Any = None  # a SchedulerAdapter; built from `scheduler` when None
    actuator_factory: Callable[..., Any] | None = None
    from_start: bool = False  # a new database reads existing files from their start (monitor mode only)
    #: at startup, input waits this long at most for the scheduler's first answer
    scheduler_startup_wait: float = 30.0


class Controller:
    def __init__(self, config: ControllerConfig, compiled: CompiledRulebook):
        self.cfg = config
        self.compiled = compiled
        if config.from_start and not config.dry_run:
            raise ValueError("from_start reads the past: only in monitor mode")
        self.store = Store(config.db)
        # a new database knows nothing of what was read before it: the files already there are
        # history, read from their end, unless a backfill (monitor mode) was asked for
        self.skip_existing = self.store.fresh and not config.from_start
        self._db_identity = self._identity_of_db()
        with self.store.transaction():
            scheduled = config.adapter is not None or config.scheduler not in ("none", "", None)
            self.store.set_meta("context_source", "scheduler" if scheduled else "logs")
        self.metrics = Metrics(config.metrics_port)
        self.cluster = ClusterContext()
        self.stop_event = threading.Event()
        self.reload_requested = threading.Event()
        self.mode = "recommend" if config.dry_run else "act"
        self.adapter = config.adapter
        if self.adapter is None and config.scheduler not in ("none", "", None):
            from scheduler_adapters.registry import get_adapter

            self.adapter = get_adapter(config.scheduler)
        self.actuator = None
        if not config.dry_run and config.actuator_factory is not None:
            self.actuator = config.actuator_factory(self)
        self._closed_pending: list[ClosedIncident] = []
        self.engine = self._new_engine(compiled)
        self.engine.resume()
        self.follower = Follower(
            list(config.follow),
            poll=config.poll,
            offsets=self.store.offsets(),
            on_new=self._on_new_file,
            heads=self.store.offset_heads(),
            start_at_end=self.skip_existing,
        )
        self.spool = None
        if config.spool:
            self.spool = self._new_spool_reader()
            if self.skip_existing:
                self.spool.skip_to_end()
        self._rule_mtimes = self._rulebook_mtimes()
        self._last_sched = 0.0
        # the last job states seen, kept in the store: a job that ended while the controller was
        # down is still noticed, while the history a fresh database finds is not acted on
        self._job_states, self._states_known = self._saved_job_states()
        self._node_states: dict[str, tuple] = {}
        # the transaction in progress (see _tx_begin/_tx_commit) and what it holds
        self._tx = None
        self._tx_started = 0.0
        self._tx_hits = 0
        self._tx_files: dict[str, Tailed] = {}
        self._tx_lines = 0
        self._tx_facts = 0
        self._tx_latency: list[float] = []
        self._tx_spool: dict | None = None
        self._tx_garbage = 0
        # store outage
        self._store_down_since: float | None = None
        self._store_retry_at = 0.0
        self._last_logged: dict[str, float] = {}
        # rates and counters mirrored into metrics
        self._n_lines = 0
        self._n_facts = 0
        self._rate_mark = (time.monotonic(), 0, 0)
        self._follower_stats: dict[str, int] = {}
        self._spool_garbage = self.spool.stats.get("garbage", 0) if self.spool else 0
        self._tx_spool_last = dict(self.spool.offsets) if self.spool else None
        self._failures = 0  # unexpected errors in a row
        self._sched_ok = False
        self._poller = None  # started by run() after startup(); step() alone polls inline (tests)
        self._resync_reason: str | None = None
        self.lost_reason: str | None = None
        self._refused_seen: dict[str, int] = {}

    # -- setup -----------------------------------------------------------------------------
    def _identity_of_db(self) -> tuple[int, int] | None:
        if self.cfg.db == ":memory:":
            return None
        try:
            st = os.stat(self.cfg.db)
        except OSError:
            return None
        return (st.st_dev, st.st_ino)

    def db_lost(self) -> str | None:
        """Why the database this controller opened is no longer the one at its path (deleted,
        replaced), or None. A controller that went on would forget what it did and redo it."""
        if self._db_identity is None:
            return None
        now = self._identity_of_db()
        if now is None:
            return f"incident store {self.cfg.db} was deleted while running"
        if now != self._db_identity:
            return f"incident store {self.cfg.db} was replaced by another file while running"
        return None

    def startup(self) -> None:
        """Scheduler state first (which jobs run where, the job logs it names), then the spool and
        the logs: a Xid read in the first moments after a restart finds its job."""
        if self.adapter is not None:
            deadline = time.monotonic() + max(0.0, self.cfg.scheduler_startup_wait)
            while not self.stop_event.is_set():
                self._last_sched = float("-inf")
                if self._first_poll():
                    break
                if time.monotonic() >= deadline:
                    logger.error(
                        "scheduler did not answer within %.0f s of startup: reading input without its state "
                        "(facts of nodes have no job until it answers)",
                        self.cfg.scheduler_startup_wait,
                    )
                    break
                self.stop_event.wait(1.0)
        self.follower.start()
        self.follower.start_at_end = False  # files that appear from now on are new: read from their start

    def _first_poll(self) -> bool:
        try:
            self._poll_scheduler(_clock())
            ok = self._sched_ok
            self._tx_commit()
        except _STORE_ERRORS as exc:
            self._store_failed(exc)
            return True  # the store outage path takes over
        return ok

    def _new_engine(self, compiled: CompiledRulebook) -> Engine:
        engine = Engine(
            compiled,
            self.store,
            scheduler=self._template_scheduler(),
            mode=self.mode,
            cluster=self.cluster,
            on_close=self._on_close,
        )
        # only once the engine exists (a rulebook the Rete refuses leaves everything as it was)
        self.converter = HitConverter(list(compiled.matchers), self.cluster, clock=_clock)
        self.converter.scheduler = self.adapter is not None  # only the scheduler says which job runs where
        self.specs = matcher_specs(compiled)
        self.index_maps = {src: matchers_for(compiled, src) for src in ("job", "kernel", "slurm", "any")}
        self._scanner_templates: dict[str, Scanner] = {}
        return engine

    def _new_spool_reader(self):
        from engine.sources.spool import SpoolReader

        saved = self._load_meta("spool_offsets") or {}
        # without a scheduler there is no other word on which job ran on a node
        return SpoolReader(
            self.cfg.spool, {k: tuple(v) for k, v in saved.items()}, trust_job_claims=self.adapter is None
        )

    def _on_new_file(self, t: Tailed) -> None:
        job = t.meta.get("job") or job_from_filename(os.path.basename(t.path))
        source = t.meta.get("source", "job")
        t.meta["ctx"] = FileContext(path=t.path, source=source, job=job, attempt=t.meta.get("attempt"))
        t.meta["committed"] = (t.inode, t.offset, t.line_no)
        self._reset_scanner(t)

    def _scanner_for(self, source: str) -> Scanner:
        """A fresh scanner for one file. Compiling the patterns (a hyperscan database: ~0.2 s for
        25 patterns) is done once per source kind and rulebook; each file gets a shallow copy that
        shares the compiled databases and has its own stream state (set by reset()). A Scanner is
        not thread-safe, and neither are these copies: all of them are used by this one thread."""
        tmpl = self._scanner_templates.get(source)
        if tmpl is None:
            tmpl = self._scanner_templates[source] = Scanner([self.specs[i] for i in self.index_maps[source]])
        scanner = copy.copy(tmpl)
        scanner.lines_seen = scanner.long_lines_cut = scanner.bytes_seen = 0
        scanner.reset(0, 0)
        return scanner

    def _reset_scanner(self, t: Tailed) -> None:
        source = t.meta.get("source", "job")
        source = "job" if source not in self.index_maps else source
        index_map = self.index_maps[source]
        scanner = self._scanner_for(source)
        scanner.reset(t.offset, t.line_no)
        t.meta["scanner"] = scanner
        t.meta["index_map"] = index_map
        t.meta["long_lines"] = 0

    def _rulebook_mtimes(self) -> dict[str, float]:
        from engine.rulebook import default_rule_files

        paths = [str(p) for p in (default_rule_files() if self.cfg.defaults else [])]
        for p in self.cfg.rules:
            if os.path.isdir(p):
                try:
                    paths += [os.path.join(p, f) for f in sorted(os.listdir(p)) if f.endswith((".yaml", ".yml"))]
                except OSError:
                    paths.append(p)
            else:
                paths.append(p)
        out = {}
        for p in paths:
            try:
                st = os.stat(p)
                out[p] = (st.st_mtime_ns, st.st_size, st.st_ino)
            except OSError:
                out[p] = -1.0
        return out

    @staticmethod
    def _head_of(t: Tailed) -> str | None:
        """The fingerprint of the followed file's first bytes, taken once per inode (and again while
        the file is still shorter than the fingerprint's span)."""
        from engine.sources.files import HEAD_BYTES, file_head

        cached = t.meta.get("head")
        if cached is not None and cached[0] == t.inode and cached[1].startswith(f"{HEAD_BYTES}:"):
            return cached[1]  # a full-length fingerprint of this inode never changes
        head = file_head(t.path)
        if head is not None:
            t.meta["head"] = (t.inode, head)
        return head

    def _template_scheduler(self) -> str:
        """Whose command templates to render: the adapter may speak another's (the simulation speaks Slurm)."""
        speaks = getattr(self.adapter, "template_scheduler", None)
        if speaks:
            return str(speaks)
        return self.cfg.scheduler if self.cfg.scheduler not in ("none", "", None) else "slurm"

    def _saved_job_states(self) -> tuple[dict[str, tuple], bool]:
        saved = self._load_meta("job_states")
        if not isinstance(saved, dict):
            return {}, False
        out = {}
        for k, v in saved.items():
            try:
                out[str(k)] = (v[0], int(v[1]), tuple(v[2]), v[3])
            except (TypeError, ValueError, IndexError):
                continue
        return out, True

    def _load_meta(self, key: str) -> Any:
        row = self.store._exec("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return json.loads(row[0]) if row else None

    def _save_meta(self, key: str, value: Any) -> None:
        self.store._exec(
            "INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            (key, json.dumps(value)),
        )

    def _log_every_ok(self, key: str) -> bool:
        now = time.monotonic()
        if now - self._last_logged.get(key, -LOG_EVERY_S) >= LOG_EVERY_S:
            self._last_logged[key] = now
            return True
        return False

    def _log_every(self, key: str, level: int, msg: str, *args: Any) -> None:
        """Log, but the same kind of problem at most once per LOG_EVERY_S."""
        if self._log_every_ok(key):
            logger.log(level, msg, *args)

    # -- reactions -------------------------------------------------------------------------
    def _on_close(self, closed: ClosedIncident) -> None:
        # announced once its transaction is committed (a rolled back close is done again later)
        self._closed_pending.append(closed)

    def _announce(self) -> None:
        pending, self._closed_pending = self._closed_pending, []
        self.engine.closed.clear()  # the engine keeps them for replay; a live controller must not
        for closed in pending:
            d = closed.decision
            self.metrics.incidents.labels(fault_class=d.fault_class, decision=d.decision).inc()
            if self.mode == "recommend":
                if not closed.plan:
                    logger.warning(
                        "incident %s job=%s attempt=%s fault=%s decision=%s nodes=%s: no command",
                        closed.id,
                        closed.job,
                        closed.attempt,
                        d.fault_class,
                        d.decision,
                        ",".join(d.nodes) or "-",
                    )
                for p in closed.plan:
                    logger.warning(
                        "recommend incident=%s job=%s fault=%s decision=%s action=%s cmd=%s",
                        closed.id,
                        closed.job,
                        d.fault_class,
                        d.decision,
                        p.name,
                        json.dumps(list(p.argv)),
                    )
            elif self.actuator is not None:
                self.actuator.submit(closed)

    def reload(self) -> bool:
        self._rule_mtimes = self._rulebook_mtimes()
        try:
            result = load_rulebook(self.cfg.rules, defaults=self.cfg.defaults, overlays=self.cfg.overlays)
        except Exception as exc:  # a loader bug must not stop the service either
            logger.error("rulebook reload rejected, keeping the current rulebook: %s", exc)
            self.metrics.reloads.labels(result="rejected").inc()
            return False
        if not result.ok:
            logger.error("rulebook reload rejected, keeping the current rulebook: %d error(s)", len(result.errors))
            for d in result.errors:
                logger.error("rulebook reload rejected: %s", d)
            self.metrics.reloads.labels(result="rejected").inc()
            return False
        self._tx_commit()  # nothing is in flight between steps; to be sure
        try:
            engine = self._new_engine(result.compiled)
            engine.resume()
        except Exception as exc:
            logger.error("rulebook reload rejected, keeping the current rulebook: the rule engine refused it: %s", exc)
            self.metrics.reloads.labels(result="rejected").inc()
            return False
        self.compiled = result.compiled
        old, self.engine = self.engine, engine
        old.session.close()  # its facts' memory is reused; the ruleset itself is shared when unchanged
        if self.actuator is not None and hasattr(self.actuator, "compiled"):
            self.actuator.compiled = result.compiled  # it renders and verifies with the rulebook's actions
        for t in list(self.follower.files.values()):
            self.follower.rewind(t)  # new scanners, from the consumed position (a partial line is read again)
        self.metrics.reloads.labels(result="ok").inc()
        logger.warning(
            "rulebook reloaded: %d rules, %d matchers", len(result.compiled.rules), len(result.compiled.matchers)
        )
        return True

    # -- transactions ------------------------------------------------------------------------
    def _tx_begin(self) -> None:
        if self._tx is None:
            tx = self.store.transaction()
            tx.__enter__()
            self._tx = tx
            self._tx_started = time.monotonic()
            self._tx_hits = 0

    def _tx_full(self) -> bool:
        return self._tx is not None and (
            self._tx_hits >= BATCH_HITS or time.monotonic() - self._tx_started >= BATCH_SECONDS
        )

    def _tx_commit(self) -> None:
        """Commit facts, incidents and the read offsets of the files they came from, together."""
        if self._tx is None:
            return
        tx = self._tx
        # every followed file whose position moved since its last commit (read, rotated, handed a
        # rotated file's position, truncated): saved with the facts those bytes produced
        self._tx_files = {
            p: t for p, t in self.follower.files.items() if t.meta.get("committed") != (t.inode, t.offset, t.line_no)
        }
        try:
            for t in self._tx_files.values():
                self.store.save_offset(t.path, t.inode, t.offset, t.line_no, self._head_of(t))
            if self._tx_spool is not None:
                self._save_meta("spool_offsets", self._tx_spool)
        except BaseException as exc:
            self._tx_abort(exc)
            raise
        self._tx = None
        try:
            tx.__exit__(None, None, None)
        except BaseException:
            self._tx_discard()
            raise
        now = time.time()
        for t in self._tx_files.values():
            t.meta["committed"] = (t.inode, t.offset, t.line_no)
        if self._tx_lines:
            self.metrics.lines.inc(self._tx_lines)
        if self._tx_facts:
            self.metrics.facts.inc(self._tx_facts)
        self._n_lines += self._tx_lines
        self._n_facts += self._tx_facts
        for start in self._tx_latency:
            self.metrics.latency.observe(max(0.0, now - start))
        if self._tx_garbage:
            self.metrics.source_errors.labels(kind="spool", reason="garbage").inc(self._tx_garbage)
        self._tx_discard()
        self._announce()

    def _tx_discard(self) -> None:
        self._tx_files = {}
        self._tx_lines = self._tx_facts = self._tx_garbage = 0
        self._tx_latency = []
        self._tx_spool = None

    def _tx_abort(self, exc: BaseException | None = None) -> None:
        tx, self._tx = self._tx, None
        self._tx_discard()
        self._closed_pending.clear()
        if tx is not None:
            try:
                tx.__exit__(type(exc) if exc else RuntimeError, exc, None)
            except Exception as e:  # e.g. the rollback itself failed: SQLite already rolled back
                logger.debug("rollback: %s", e)

    # -- one batch -------------------------------------------------------------------------
    def _process_file_data(self, t: Tailed, data: bytes) -> bool:
        """Scan what was read, ingest the facts and record the new position, inside the current
        transaction (committed in pieces when a burst of hits fills it). False when it stopped
        early because the controller is stopping."""
        if t.meta.pop("reset", False) or "scanner" not in t.meta:
            self._reset_scanner(t)
        scanner: Scanner = t.meta["scanner"]
        ctx: FileContext = t.meta["ctx"]
        index_map = t.meta["index_map"]
        stream = t.meta.get("stream")
        if stream is None or stream.scanner is not scanner or stream.ctx is not ctx:
            stream = t.meta["stream"] = StreamFacts(scanner, self.converter, ctx, index_map)
        if data:
            hits = stream.scan(data)  # converted one by one below: a stop can come between lines
            end = scanner.position
            lines = data.count(b"\n")
        else:  # the old inode is finished: its last partial line counts; the next file starts at 0
            before = scanner.position
            hits = stream.scan_end()
            lines = scanner.position[1] - before[1]
            # where the old file ends, if it lives on renamed: a partial last line was judged now;
            # what may still be appended to it there gets that line's number again
            t.meta["eof_position"] = (scanner.position[0], before[1])
            end = (0, 0)
            t.meta["reset"] = True
        cut = scanner.long_lines_cut - t.meta.get("long_lines", 0)
        if cut > 0:
            t.meta["long_lines"] = scanner.long_lines_cut
            self.metrics.source_errors.labels(kind="file", reason="long_line").inc(cut)
            self._log_every(
                "long:" + t.path,
                logging.WARNING,
                "%s: %d line(s) longer than %d bytes cut (their head is still scanned)",
                t.path,
                cut,
                scanner.max_line,
            )
        i, n = 0, len(hits)
        while True:
            self._tx_begin()
            opened_before = self.engine.stats["incidents"]
            j = i
            while j < n:
                line_no = hits[j].line_no
                while j < n and hits[j].line_no == line_no:  # all hits of one line go together
                    hit = hits[j]
                    try:
                        item = stream.item(hit)
                        if isinstance(item, Flood):  # repeats of an earlier fact: counted, not asserted
                            self.engine.flooded(item)
                        elif item is not None:
                            self.engine.ingest(item)
                            self._tx_facts += 1
                    except _STORE_ERRORS:
                        raise  # the store's trouble, not this line's: input pauses (see _store_failed)
                    except Exception as exc:  # this line alone is poison: set it aside, go on
                        self._quarantine("line", f"{t.path}:{hit.line_no}", hit.line.decode("utf-8", "replace"), exc)
                    j += 1
                    self._tx_hits += 1
                if j < n and (self._tx_full() or self.stop_event.is_set()):
                    break
            for flood in stream.grown():  # repeats after a flood's first one in this piece
                self.engine.flooded(flood)
            opened = self.engine.stats["incidents"] - opened_before
            if opened > 0:
                self._tx_latency += [self._written_at(t)] * opened
            if j >= n:
                t.offset, t.line_no = end
                self._tx_lines += lines
                return True
            # a piece of a burst: commit up to the end of the last line ingested
            last = hits[j - 1]
            t.offset, t.line_no = self._line_end(t, data, last.offset), last.line_no
            self._tx_commit()
            if self.stop_event.is_set():
                self.follower.rewind(t)  # the rest of this read is read again (after a restart)
                return False
            i = j

    @staticmethod
    def _written_at(t: Tailed) -> float:
        """When the bytes that opened an incident were written, at the latest: the file's mtime
        (its last write; for the detection latency metric), or when they were read if earlier."""
        try:
            return min(t.read_at, os.fstat(t.fh.fileno()).st_mtime) if t.fh is not None else t.read_at
        except OSError:
            return t.read_at

    @staticmethod
    def _line_end(t: Tailed, data: bytes, offset: int) -> int:
        """File offset just past the newline that ends the line that starts at ``offset``."""
        k = offset - t.read_pos
        nl = data.find(b"\n", max(0, k))
        return t.read_pos + nl + 1

    def _process_spool(self) -> None:
        if self.spool is None:
            return
        try:
            facts = self.spool.read(max_bytes=4 << 20)
            self.metrics.source_health.labels(source="spool").set(1 if os.path.isdir(self.cfg.spool) else 0)
        except OSError as exc:
            self.metrics.source_health.labels(source="spool").set(0)
            self._log_every("spool", logging.WARNING, "spool %s: read failed: %s", self.cfg.spool, exc)
            return
        for key, reason in (
            ("refused_node", "spool_other_node"),
            ("refused_kind", "spool_scheduler_kind"),
            ("not_regular", "not_regular_file"),
        ):
            seen = self.spool.stats.get(key, 0)
            d = seen - self._refused_seen.get(key, 0)
            if d > 0:
                self.metrics.refused.labels(reason=reason).inc(d)
                self._refused_seen[key] = seen
        garbage = self.spool.stats.get("garbage", 0)
        new_garbage = garbage - self._spool_garbage
        if not facts and not new_garbage and self.spool.offsets == self._tx_spool_last:
            return
        self._tx_begin()
        for f in facts:
            try:
                self.engine.ingest(f)  # the engine gives a node's fact the job running there
                self._tx_facts += 1
            except _STORE_ERRORS:
                raise
            except Exception as exc:  # this fact alone is poison
                self._quarantine("spool", f"spool:{f.origin}", f.to_json(), exc)
        offsets = {k: list(v) for k, v in self.spool.offsets.items()}
        self._tx_spool = offsets
        self._tx_spool_last = dict(self.spool.offsets)
        if new_garbage > 0:
            self._spool_garbage = garbage
            self._tx_garbage += new_garbage
            self.metrics.spool_garbage.set(garbage)
            self._log_every(
                "spool-garbage",
                logging.WARNING,
                "spool %s: %d line(s) skipped that are not facts (garbage, truncated or too long JSON); %d so far",
                self.cfg.spool,
                new_garbage,
                garbage,
            )

    def _poll_scheduler(self, now: float) -> None:
        if self.adapter is None:
            return
        if self._poller is not None:  # `recover run`: polled on its own thread, never blocking this loop
            snap = self._poller.take()
            self.metrics.source_health.labels(source="scheduler").set(1 if self._poller.available else 0)
            if self.actuator is not None and hasattr(self.actuator, "available"):
                self.actuator.available = self._poller.available  # actions wait while it does not answer
            if snap is None:
                return
            jobs, nodes = snap.jobs, snap.nodes
            self._sched_ok = True
        else:
            if now - self._last_sched < self.cfg.scheduler_interval:
                return
            self._last_sched = now
            self._sched_ok = False
            try:
                jobs = self.adapter.jobs()
                nodes = self.adapter.nodes()
                self.metrics.source_health.labels(source="scheduler").set(1)
                self._sched_ok = True
            except Exception as exc:
                self.metrics.source_health.labels(source="scheduler").set(0)
                self._log_every("scheduler", logging.WARNING, "scheduler poll failed: %s", exc)
                return
        self._tx_begin()
        states_changed = False
        # nodes first: a node that died is seen while its job is still assigned to it
        first_poll = not self._node_states
        for n in nodes:
            state = (n.state, n.flags, n.reason)
            if self._node_states.get(n.name) != state:
                self._node_states[n.name] = state
                if first_poll:  # how nodes were when we started is state to know, not an event to act on
                    self.engine.node_states[n.name] = {"state": n.state, "drained": n.drained, "down": n.down}
                    continue
                self.engine.ingest(
                    Fact.make(
                        "node",
                        {
                            "node": n.name,
                            "state": n.state,
                            "flags": list(n.flags),
                            "reason": n.reason or "",
                            "drained": n.drained,
                            "down": n.down,
                        },
                        now,
                        f"{self.cfg.scheduler}:nodes",
                    )
                )
        for j in jobs:
            state = (j.state, j.attempt, tuple(j.nodes), j.reason or "")
            if j.state == "RUNNING":
                self.cluster.assign(j.job_id, j.attempt, j.nodes, now)
                for path in {j.stdout, j.stderr} - {None, ""}:
                    t = self.follower.add(path, {"job": j.job_id, "attempt": j.attempt, "source": "job"})
                    ctx = t.meta.get("ctx")
                    if ctx is not None and (ctx.job != j.job_id or ctx.attempt != j.attempt):
                        ctx.job, ctx.attempt = j.job_id, j.attempt
                    if ctx is not None:
                        ctx.nodes = set(j.nodes)
            if self._job_states.get(j.job_id) != state:
                first_time = j.job_id not in self._job_states
                self._job_states[j.job_id] = state
                states_changed = True
                if first_time and not self._states_known and j.state not in JOB_ACTIVE_STATES | {"PENDING"}:
                    continue  # it ended before this controller ever watched: history, not an event
                attrs = {
                    "job": j.job_id,
                    "attempt": j.attempt,
                    "state": j.state,
                    "reason": j.reason or "",
                    "nodes": list(j.nodes),
                }
                if j.exit_code is not None:
                    attrs["exit_code"] = j.exit_code
                self.engine.ingest(Fact.make("job", attrs, now, f"{self.cfg.scheduler}:jobs"))
        self._states_known = True
        if states_changed:
            self._save_meta("job_states", {k: [v[0], v[1], list(v[2]), v[3]] for k, v in self._job_states.items()})

    def _quarantine(self, kind: str, origin: str, text: str, exc: BaseException) -> None:
        """One input whose handling raised: kept in the store with its error (``recover incidents
        --errors``), counted, logged (rate-limited); the batch it came in goes on without it."""
        error = f"{type(exc).__name__}: {exc}"
        self.metrics.quarantined.labels(kind=kind).inc()
        self._log_every(
            "quarantine", logging.ERROR, "%s: input set aside (quarantined), the rest goes on: %s", origin, error
        )
        logger.debug("quarantined %s", origin, exc_info=exc)
        self.store.quarantine(origin, text, error)

    # -- the store refusing writes -----------------------------------------------------------
    def _store_failed(self, exc: BaseException) -> None:
        self._tx_abort(exc)
        self.metrics.store_errors.inc()
        self.metrics.store_healthy.set(0)
        self._resync_reason = None
        if self._store_down_since is None:
            self._store_down_since = time.time()
            logger.error(
                "incident store %s refused a write (%s): input paused; nothing is lost, reading resumes "
                "from the last committed positions once it accepts writes again",
                self.store.path,
                _describe(exc),
            )
        else:
            self._log_every(
                "store-down",
                logging.ERROR,
                "incident store %s still refuses writes (%s), down for %.0f s",
                self.store.path,
                _describe(exc),
                time.time() - self._store_down_since,
            )
        self._store_retry_at = time.monotonic() + STORE_RETRY_S

    def _store_recover(self) -> bool:
        """Probe the store; when it takes writes again, rebuild what lived in memory only from
        what it has committed (open incidents, read positions) and read again from there."""
        if time.monotonic() < self._store_retry_at:
            return False
        try:
            with self.store.transaction():
                self._save_meta("alive", time.time())
            committed = self.store.offsets()
        except _STORE_ERRORS as exc:
            self._store_failed(exc)
            return False
        down = time.time() - (self._store_down_since or time.time())
        self._store_down_since = None
        self.metrics.store_healthy.set(1)
        self._closed_pending.clear()
        old, self.engine = self.engine, self._new_engine(self.compiled)
        old.session.close()
        self.engine.resume()
        for t in list(self.follower.files.values()):
            inode, offset, line_no = committed.get(t.path, (t.inode, 0, 0))
            t.inode, t.offset, t.line_no = inode, offset, line_no
            t.meta["committed"] = (inode, offset, line_no)
            self.follower.rewind(t)
        if self.spool is not None:
            self.spool = self._new_spool_reader()
            self._spool_garbage = self.spool.stats.get("garbage", 0)
            self._tx_spool_last = dict(self.spool.offsets)
        self._job_states, self._states_known = self._saved_job_states()
        self._node_states.clear()
        logger.warning(
            "%s: reading again from the last committed positions",
            self._resync_reason or f"incident store {self.store.path} accepts writes again after {down:.1f} s",
        )
        self._resync_reason = None
        return True

    # -- the loop ----------------------------------------------------------------------------
    def step(self) -> None:
        """One pass: read what changed, advance time. The loop calls it every tick."""
        lost = self.db_lost()
        if lost is not None:
            self._tx_abort(None)
            logger.critical(
                "%s: stopping; nothing more is read or done (a new database would replay the past "
                "as the present). Restore it, or start again on a new one (it reads from the files' end)",
                lost,
            )
            self.lost_reason = lost
            self.stop_event.set()
            return
        if self._store_down_since is not None and not self._store_recover():
            return
        try:
            gen = self.follower.read_ready()
            try:
                for t, data in gen:
                    if not self._process_file_data(t, data) or self.stop_event.is_set():
                        break
                    if self._tx_full() or self._tx_latency:  # a new incident is committed at once
                        self._tx_commit()
            finally:
                gen.close()
            if not self.stop_event.is_set():
                self._process_spool()
                self._poll_scheduler(_clock())
                self._tx_begin()
                self.engine.advance(_clock())
            self._tx_commit()
        except _STORE_ERRORS as exc:
            self._store_failed(exc)
            return
        except BaseException as exc:
            self._tx_abort(exc)
            raise
        self._failures = 0
        if self.actuator is not None:
            self.actuator.step()

    def _recover_from_bug(self) -> None:
        """After an unexpected error in a step: its transaction was rolled back; make memory agree
        with the store again (as after a store outage) and read again from the committed positions."""
        self._failures += 1
        self._store_down_since = self._store_down_since or time.time()
        self._store_retry_at = time.monotonic() + min(30.0, 0.5 * 2 ** min(self._failures, 6))
        self._resync_reason = "after an unexpected error"

    def _update_gauges(self) -> None:
        now = time.monotonic()
        t0, l0, f0 = self._rate_mark
        if now - t0 >= 1.0:
            self.metrics.lines_rate.set((self._n_lines - l0) / (now - t0))
            self.metrics.facts_rate.set((self._n_facts - f0) / (now - t0))
            self._rate_mark = (now, self._n_lines, self._n_facts)
        healthy, unhealthy = self.follower.health()
        self.metrics.sources.labels(kind="file").set(healthy + unhealthy)
        self.metrics.sources_healthy.labels(kind="file").set(healthy)
        self.metrics.sources_unhealthy.labels(kind="file").set(unhealthy)
        if self.spool is not None:
            ok = os.path.isdir(self.cfg.spool)
            self.metrics.sources.labels(kind="spool").set(1)
            self.metrics.sources_healthy.labels(kind="spool").set(1 if ok else 0)
            self.metrics.sources_unhealthy.labels(kind="spool").set(0 if ok else 1)
            if not ok:
                self._log_every("spool-missing", logging.WARNING, "spool %s: not a readable folder", self.cfg.spool)
        if self.adapter is not None:
            self.metrics.sources.labels(kind="scheduler").set(1)
        for key, reason in (
            ("unreadable", "unreadable"),
            ("vanished", "vanished"),
            ("read_errors", "read_error"),
            ("rotations", "rotated"),
            ("truncations", "truncated"),
        ):
            v = self.follower.stats.get(key, 0)
            d = v - self._follower_stats.get(key, 0)
            if d > 0:
                self.metrics.source_errors.labels(kind="file", reason=reason).inc(d)
                self._follower_stats[key] = v

    def run(self) -> int:
        def on_signal(signum, frame):
            if signum == signal.SIGHUP:
                self.reload_requested.set()
            else:
                self.stop_event.set()
            self.follower.wake.set()

        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                signal.signal(sig, on_signal)
        _raise_nofile_limit()
        self.startup()
        if self.adapter is not None:
            from scheduler_adapters.worker import PollWorker

            self._poller = PollWorker(
                self.adapter, self.cfg.scheduler_interval, timeout=max(10.0, 2 * self.cfg.scheduler_interval)
            )
            self._poller.start()
        logger.warning(
            "recover run: mode=%s follow=%s spool=%s scheduler=%s db=%s",
            self.mode,
            ",".join(self.cfg.follow) or "-",
            self.cfg.spool or "-",
            self.cfg.scheduler,
            self.cfg.db,
        )
        rescan_every = max(1.0, float(self.cfg.poll or 0.0))
        last_rescan = last_gauges = time.monotonic()
        self._update_gauges()
        try:
            while not self.stop_event.is_set():
                self.follower.wake.clear()
                try:
                    self.step()
                except Exception:  # a bug must not stop the service: say so, count it, go on
                    self.metrics.errors.inc()
                    if self._failures < 3 or self._log_every_ok("step-failed"):
                        logger.exception("controller step failed (its transaction was rolled back); continuing")
                    self._recover_from_bug()
                now = time.monotonic()
                if now - last_rescan >= rescan_every:
                    last_rescan = now
                    try:
                        self.follower.rescan()
                    except Exception:
                        self.metrics.errors.inc()
                        logger.exception("rescan failed; continuing")
                    if self._rulebook_mtimes() != self._rule_mtimes:
                        logger.warning("rulebook files changed: reloading")
                        self.reload_requested.set()
                if now - last_gauges >= 1.0:
                    last_gauges = now
                    self._update_gauges()
                if self.reload_requested.is_set() and not self.stop_event.is_set():
                    self.reload_requested.clear()
                    logger.warning("reloading the rulebook")
                    self.reload()
                if self.stop_event.is_set():
                    break
                if self._store_down_since is not None:
                    self.stop_event.wait(
                        min(self.cfg.tick, max(0.0, self._store_retry_at - time.monotonic())) or self.cfg.tick
                    )
                else:
                    self.follower.wake.wait(self.cfg.tick)
        finally:
            logger.warning("recover run: stopping")
            try:
                self._tx_commit()
            except Exception as exc:
                self._tx_abort(exc)
            self.follower.stop()
            if self._poller is not None:
                self._poller.stop()
            self.metrics.stop()
            self.store.close()
        return 3 if self.lost_reason else 0
