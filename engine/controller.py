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

import json
import logging
import os
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from .facts import Fact
from .incidents import ClosedIncident, Engine
from .linefacts import ClusterContext, FileContext, HitConverter, job_from_filename
from .matching import Scanner
from .metrics import Metrics
from .replay import matcher_specs, matchers_for
from .rulebook import CompiledRulebook, load_rulebook
from .sources.follow import Follower, Tailed
from .store import Store, StoreError

logger = logging.getLogger(__name__)

__all__ = ["Controller", "ControllerConfig"]


@dataclass
class ControllerConfig:
    rules: Sequence[str] = ()
    defaults: bool = True
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


class Controller:
    def __init__(self, config: ControllerConfig, compiled: CompiledRulebook):
        self.cfg = config
        self.compiled = compiled
        self.store = Store(config.db)
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
        self.engine = self._new_engine(compiled)
        self.engine.resume()
        self.follower = Follower(list(config.follow), poll=config.poll, offsets=self.store.offsets(), on_new=self._on_new_file)
        self.spool = None
        if config.spool:
            from .sources.spool import SpoolReader

            saved = self._load_meta("spool_offsets") or {}
            self.spool = SpoolReader(config.spool, {k: tuple(v) for k, v in saved.items()})
        self._rule_mtimes = self._rulebook_mtimes()
        self._last_sched = 0.0
        self._job_states: dict[str, tuple] = {}
        self._node_states: dict[str, tuple] = {}

    # -- setup -----------------------------------------------------------------------------
    def _new_engine(self, compiled: CompiledRulebook) -> Engine:
        self.converter = HitConverter(list(compiled.matchers), self.cluster, clock=time.time)
        self.specs = matcher_specs(compiled)
        self.index_maps = {src: matchers_for(compiled, src) for src in ("job", "kernel", "slurm", "any")}
        return Engine(compiled, self.store, scheduler=self.cfg.scheduler if self.cfg.scheduler != "none" else "slurm",
                      mode=self.mode, cluster=self.cluster, on_close=self._on_close)

    def _on_new_file(self, t: Tailed) -> None:
        job = t.meta.get("job") or job_from_filename(os.path.basename(t.path))
        source = t.meta.get("source", "job")
        t.meta["ctx"] = FileContext(path=t.path, source=source, job=job, attempt=t.meta.get("attempt"))
        self._reset_scanner(t)
        self.metrics.sources.labels(kind="file").set(len(self.follower.files) if hasattr(self, "follower") else 1)

    def _reset_scanner(self, t: Tailed) -> None:
        source = t.meta.get("source", "job")
        index_map = self.index_maps["job" if source not in self.index_maps else source]
        scanner = Scanner([self.specs[i] for i in index_map])
        scanner.reset(t.offset, t.line_no)
        t.meta["scanner"] = scanner
        t.meta["index_map"] = index_map

    def _rulebook_mtimes(self) -> dict[str, float]:
        from .rulebook import default_rule_files

        paths = [str(p) for p in (default_rule_files() if self.cfg.defaults else [])]
        for p in self.cfg.rules:
            if os.path.isdir(p):
                paths += [os.path.join(p, f) for f in sorted(os.listdir(p)) if f.endswith((".yaml", ".yml"))]
            else:
                paths.append(p)
        out = {}
        for p in paths:
            try:
                out[p] = os.stat(p).st_mtime
            except OSError:
                out[p] = -1.0
        return out

    def _load_meta(self, key: str) -> Any:
        row = self.store._exec("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return json.loads(row[0]) if row else None

    def _save_meta(self, key: str, value: Any) -> None:
        self.store._exec("INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                         (key, json.dumps(value)))

    # -- reactions -------------------------------------------------------------------------
    def _on_close(self, closed: ClosedIncident) -> None:
        d = closed.decision
        self.metrics.incidents.labels(fault_class=d.fault_class, decision=d.decision).inc()
        if self.mode == "recommend":
            if not closed.plan:
                logger.warning("incident %s job=%s attempt=%s fault=%s decision=%s nodes=%s: no command",
                               closed.id, closed.job, closed.attempt, d.fault_class, d.decision, ",".join(d.nodes) or "-")
            for p in closed.plan:
                logger.warning("recommend incident=%s job=%s fault=%s decision=%s action=%s cmd=%s",
                               closed.id, closed.job, d.fault_class, d.decision, p.name, json.dumps(list(p.argv)))
        elif self.actuator is not None:
            self.actuator.submit(closed)

    def reload(self) -> bool:
        result = load_rulebook(self.cfg.rules, defaults=self.cfg.defaults)
        self._rule_mtimes = self._rulebook_mtimes()
        if not result.ok:
            for d in result.errors:
                logger.error("rulebook reload rejected: %s", d)
            self.metrics.reloads.labels(result="rejected").inc()
            return False
        self.compiled = result.compiled
        self.engine = self._new_engine(result.compiled)
        self.engine.resume()
        for t in self.follower.files.values():
            self._reset_scanner(t)
        self.metrics.reloads.labels(result="ok").inc()
        logger.warning("rulebook reloaded: %d rules, %d matchers", len(result.compiled.rules), len(result.compiled.matchers))
        return True

    # -- one batch -------------------------------------------------------------------------
    def _process_file_data(self, t: Tailed, data: bytes) -> None:
        if t.meta.pop("reset", False) or "scanner" not in t.meta:
            self._reset_scanner(t)
        scanner: Scanner = t.meta["scanner"]
        ctx: FileContext = t.meta["ctx"]
        index_map = t.meta["index_map"]
        hits = scanner.flush() if not data else scanner.feed(data)
        lines = data.count(b"\n")
        read_at = time.time()
        with self.store.transaction():
            opened_before = self.engine.stats["incidents"]
            for hit in hits:
                fact = self.converter.convert(index_map[hit.matcher], hit.groups, hit.line.decode("utf-8", "replace"), hit.line_no, ctx)
                if fact is not None:
                    self.engine.ingest(fact)
                    self.metrics.facts.inc()
            if not data:  # the old inode is finished: the next file starts at 0
                t.offset, t.line_no = 0, 0
                t.meta["reset"] = True
            else:
                t.offset, t.line_no = scanner.position
            self.store.save_offset(t.path, t.inode, t.offset, t.line_no)
        self.metrics.lines.inc(lines)
        for _ in range(self.engine.stats["incidents"] - opened_before):
            self.metrics.latency.observe(max(0.0, time.time() - read_at))

    def _enrich(self, fact: Fact) -> Fact:
        node = fact.get("node")
        if node is None or fact.get("job") is not None:
            return fact
        known = self.cluster.job_on(str(node))
        if not known:
            return fact
        attrs = dict(fact.attrs)
        attrs["job"], attempt = known
        attrs["attempt"] = attempt or 0
        return Fact.make(fact.kind, attrs, fact.at, fact.origin)

    def _process_spool(self) -> None:
        if self.spool is None:
            return
        facts = self.spool.read(max_bytes=4 << 20)
        if not facts and not self.spool.stats.get("garbage"):
            return
        with self.store.transaction():
            for f in facts:
                self.engine.ingest(self._enrich(f))
                self.metrics.facts.inc()
            self._save_meta("spool_offsets", {k: list(v) for k, v in self.spool.offsets.items()})
        self.metrics.spool_garbage.set(self.spool.stats.get("garbage", 0))

    def _poll_scheduler(self, now: float) -> None:
        if self.adapter is None or now - self._last_sched < self.cfg.scheduler_interval:
            return
        self._last_sched = now
        try:
            jobs = self.adapter.jobs()
            nodes = self.adapter.nodes()
            self.metrics.source_health.labels(source="scheduler").set(1)
        except Exception as exc:
            self.metrics.source_health.labels(source="scheduler").set(0)
            logger.warning("scheduler poll failed: %s", exc)
            return
        with self.store.transaction():
            for j in jobs:
                state = (j.state, j.attempt, j.nodes, j.reason)
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
                    self._job_states[j.job_id] = state
                    attrs = {"job": j.job_id, "attempt": j.attempt, "state": j.state, "reason": j.reason or "",
                             "nodes": list(j.nodes)}
                    if j.exit_code is not None:
                        attrs["exit_code"] = j.exit_code
                    self.engine.ingest(Fact.make("job", attrs, now, f"{self.cfg.scheduler}:jobs"))
            for n in nodes:
                state = (n.state, n.flags, n.reason)
                if self._node_states.get(n.name) != state:
                    self._node_states[n.name] = state
                    self.engine.ingest(Fact.make("node", {"node": n.name, "state": n.state, "flags": list(n.flags),
                                                          "reason": n.reason or "", "drained": n.drained, "down": n.down},
                                                 now, f"{self.cfg.scheduler}:nodes"))

    def step(self) -> None:
        """One pass: read what changed, advance time. The loop calls it every tick."""
        now = time.time()
        for t, data in self.follower.read_ready():
            try:
                self._process_file_data(t, data)
            except StoreError as exc:
                self.metrics.store_errors.inc()
                logger.error("store write failed, will retry these lines: %s", exc)
                t.meta["reset"] = True  # re-read from the last committed offset
                self.follower._close(t)
                self.follower._mark(t.path)
                time.sleep(0.5)
        try:
            self._process_spool()
        except StoreError as exc:
            self.metrics.store_errors.inc()
            logger.error("store write failed (spool): %s", exc)
        self._poll_scheduler(now)
        try:
            with self.store.transaction():
                self.engine.advance(time.time())
        except StoreError as exc:
            self.metrics.store_errors.inc()
            logger.error("store write failed (timers): %s", exc)
        if self.actuator is not None:
            self.actuator.step()

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
        self.follower.start()
        logger.warning("recover run: mode=%s follow=%s spool=%s scheduler=%s db=%s", self.mode,
                       ",".join(self.cfg.follow) or "-", self.cfg.spool or "-", self.cfg.scheduler, self.cfg.db)
        last_rescan = 0.0
        try:
            while not self.stop_event.is_set():
                self.step()
                now = time.time()
                if now - last_rescan >= 1.0:
                    last_rescan = now
                    self.follower.rescan()
                    if self._rulebook_mtimes() != self._rule_mtimes:
                        self.reload_requested.set()
                if self.reload_requested.is_set():
                    self.reload_requested.clear()
                    self.reload()
                self.follower.wake.wait(self.cfg.tick)
                self.follower.wake.clear()
        finally:
            self.follower.stop()
            self.metrics.stop()
            self.store.close()
        return 0
