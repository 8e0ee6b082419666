"""The long-running controller behind ``recover run``: it wires sources -> core -> actuator.

One loop, one thread doing the work (watchdog, the scheduler poller and the metrics server have
their own). Each ``step()`` reads the followed files and the agents' spool (``ingest``), asks the
scheduler (``schedpoll``) and advances the engine's timers, all inside one ``Batch``: the
effects (facts, firings, incidents) are committed in the same SQLite transaction as the new read
offsets, so a kill -9 neither loses nor repeats a line; closed incidents are then recommended
(monitor mode) or handed to the actuator. Time is ``config.clock``'s (engine time: its wall time,
``ingest.engine_time``), and every part built here is handed that one ``Clock``.

When the store refuses writes or a step fails unexpectedly, input pauses (``outage``) and memory
is rebuilt from what the store committed once it takes writes again. SIGTERM/SIGINT stop it
within a second; SIGHUP or a changed rulebook file reloads the rulebook after validating it
(``reload``: an invalid one is reported and the old one kept). Rules that compile to a
durable_rules ruleset this process does not hold are checked in a child process and then loaded
by a restart in place: ``run()`` stops as on SIGTERM and returns ``RESTART``, and the CLI
re-executes the same command line in the same process (durable_rules 2.0.28 crashes with two
rulesets in one process). Gauges are refreshed every second (``metrics``).

    controller = Controller(ControllerConfig(follow=["logs/*.out"], db="recover.db"), compiled)
    if controller.run() == RESTART:   # until SIGTERM; or startup() then step() in tests
        ...                           # the CLI: os.execv the same command line
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from engine.clock import SYSTEM, Clock
from engine.core.incidents import ClosedIncident, Engine
from engine.core.context import ClusterContext
from engine.core.converter import HitConverter
from engine.core.rete import is_registered, ruleset_definition
from engine.core.scope import summary
from engine.live.frdumps import DumpWatch
from engine.live.heap import HeapFreezer
from engine.sources.flight_recorder import Limits
from engine.live.batch import STORE_ERRORS, Batch
from engine.live import ingest as pacing  # its pace constants: read when used (a test may set them)
from engine.store.dialect import display_name
from engine.live.ingest import FileIngest, FileState, SpoolIngest, engine_time, set_job
from engine.live.launch import READY
from engine.live.leader import DEFAULT_LEASE_S, Leadership
from engine.live.metrics import Gauges, LogLimiter, Metrics
from engine.live.outage import StoreOutage, db_identity, db_lost
from engine.live.reload import RulebookWatch, engine_refusal
from engine.live.schedpoll import SchedulerPoll
from engine.live.standby import Standby
from engine.rulebook import CompiledRulebook, load_rulebook
from engine.sources.follow import Follower
from engine.sources.openfiles import raise_nofile_limit
from engine.errors import Fenced
from engine.store import Store

logger = logging.getLogger(__name__)

__all__ = ["READY", "RESTART", "Controller", "ControllerConfig"]

#: what ``run()`` returns when it stopped to load a rulebook whose rules changed: the caller
#: starts the service again (the CLI re-executes itself, same pid); nothing else exits with it
RESTART = 4


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
    #: this process was restarted in place to load a changed rulebook: say so and count it once started
    reloaded: bool = False
    #: flight-recorder dumps (engine.live.frdumps): the site's folder for a job's dumps ("{job}" in
    #: it), the folders a prefix a job prints may point into, and how long to wait for them
    fr_dump_dir: str | None = None
    fr_dump_dirs: Sequence[str] = ()
    fr_dump_wait: float = 120.0
    fr_dump_max_bytes: int = 64 << 20
    #: the leader lease's time to live (seconds): one controller per store acts, the others follow
    #: and take over within about this once it stops renewing
    lease_s: float = DEFAULT_LEASE_S
    #: the one clock every part reads and waits on (a test hands a FakeClock)
    clock: Clock = SYSTEM
    #: seconds between looks at the spool under run() (ingest.SPOOL_INTERVAL); step() alone looks every time
    spool_interval: float = pacing.SPOOL_INTERVAL


class Controller:
    def __init__(self, config: ControllerConfig, compiled: CompiledRulebook):
        self.cfg = config
        self.clock = clock = config.clock
        self.compiled = compiled
        if config.from_start and not config.dry_run:
            raise ValueError("from_start reads the past: only in monitor mode")
        self.store = Store(config.db, clock=clock)
        # a new database knows nothing of what was read before it: the files already there are
        # history, read from their end, unless a backfill (monitor mode) was asked for
        self.skip_existing = self.store.fresh and not config.from_start
        self._db_identity = db_identity(config.db)
        with self.store.transaction():
            scheduled = config.adapter is not None or config.scheduler not in ("none", "", None)
            self.store.set_meta("context_source", "scheduler" if scheduled else "logs")
        self.store.context = "live:scheduler" if scheduled else "live:logs"
        self.mode = "recommend" if config.dry_run else "act"
        # one controller per store records and acts; a second one follows (and says who leads)
        self.leader = Leadership(self.store, config.lease_s, mode=self.mode, info=self._seen, clock=clock)
        self.leader.tick()
        try:
            self._build(config, compiled)
        except BaseException:
            # a start that fails gives up the lease it took at once: the others need not wait it out
            self.leader.release()
            self.store.close()
            raise

    def _build(self, config: ControllerConfig, compiled: CompiledRulebook) -> None:
        clock = self.clock
        self.metrics = Metrics(config.metrics_port)
        self.limiter = LogLimiter(clock=clock)
        self.cluster = ClusterContext()
        self.stop_event = threading.Event()
        self.reload_requested = threading.Event()
        self.restart_requested = False  # a changed rulebook waits for run() to stop and return RESTART
        self.adapter = config.adapter
        if self.adapter is None and config.scheduler not in ("none", "", None):
            from scheduler_adapters.registry import get_adapter

            self.adapter = get_adapter(config.scheduler)
        self.actuator = None
        if not config.dry_run and config.actuator_factory is not None:
            self.actuator = config.actuator_factory(self)
            if hasattr(self.actuator, "may_act"):
                self.actuator.may_act = self.leader.acting  # checked again just before a command runs
        raise_nofile_limit()  # before the follower sizes its open-file budget on it
        self.follower = Follower(
            list(config.follow),
            poll=config.poll,
            offsets=self.store.offsets(),
            on_new=self._on_new_file,
            heads=self.store.offset_heads(),
            start_at_end=self.skip_existing,
            clock=clock,
        )
        self.batch = Batch(self.store, self.follower, self.metrics, self.limiter, self._announce, clock)
        scheduled = self.adapter is not None
        self.files = FileIngest(
            self.cluster, self.batch, self.metrics, self.limiter, self.stop_event, scheduled=scheduled, clock=clock
        )
        self.engine = self._new_engine(compiled)
        self.engine.resume()
        self.standby = Standby(self)  # a follower's pass: read and evaluate, record nothing
        self.spool_in: SpoolIngest | None = None
        if config.spool:
            # without a scheduler there is no other word on which job ran on a node
            self.spool_in = SpoolIngest(
                config.spool, self.store, self.batch, self.metrics, self.limiter, trust_job_claims=self.adapter is None
            )
            if self.skip_existing:
                self.spool_in.skip_to_end()
        self.sched: SchedulerPoll | None = None
        if self.adapter is not None:
            self.sched = SchedulerPoll(
                self.adapter,
                config.scheduler,
                self.store,
                self.batch,
                self.metrics,
                self.limiter,
                self.cluster,
                follow_job=self._follow_job_log,
                interval=config.scheduler_interval,
                startup_wait=config.scheduler_startup_wait,
                on_available=self._scheduler_available,
                clock=clock,
            )
        # the loader is looked up when called (a test replaces this module's load_rulebook)
        self.rulebook = RulebookWatch(
            config.rules,
            config.defaults,
            self.metrics,
            load=lambda: load_rulebook(self.cfg.rules, defaults=self.cfg.defaults, overlays=self.cfg.overlays),
        )
        self.outage = StoreOutage(self.store.path, self.metrics, self.limiter, clock=clock)
        self.gauges = Gauges(self.metrics, clock)
        self.lost_reason: str | None = None
        self.frdumps = DumpWatch(
            config.fr_dump_dir,
            config.fr_dump_dirs,
            wait_s=config.fr_dump_wait,
            limits=Limits(max_bytes=config.fr_dump_max_bytes),
        )

    # -- what tests and tools look at ----------------------------------------------------------
    @property
    def converter(self) -> HitConverter:
        return self.files.converter

    @property
    def spool(self):
        """The spool reader (its stats), or None without a spool."""
        return self.spool_in.reader if self.spool_in is not None else None

    @property
    def _failures(self) -> int:
        return self.outage.failures

    def _tx_begin(self) -> None:
        self.batch.begin()

    def _tx_commit(self) -> None:
        self.batch.commit()

    def _tx_abort(self, exc: BaseException | None = None) -> None:
        self.batch.abort(exc)

    # -- setup -----------------------------------------------------------------------------
    def db_lost(self) -> str | None:
        """Why the database this controller opened is no longer the one at its path, or None."""
        return db_lost(self.cfg.db, self._db_identity)

    def startup(self) -> None:
        """Scheduler state first (which jobs run where, the job logs it names), then the spool and
        the logs: a Xid read in the first moments after a restart finds its job."""
        if self.sched is not None and self.leader.acting():
            self.sched.wait_first_answer(self.stop_event, self._first_poll)
        self.follower.start()
        self.follower.start_at_end = False  # files that appear from now on are new: read from their start

    def _first_poll(self) -> bool:
        assert self.sched is not None
        try:
            self.sched.poll(engine_time(self.clock), self.engine)
            ok = self.sched.ok
            self.batch.commit()
        except STORE_ERRORS as exc:
            self._store_failed(exc)
            return True  # the store outage path takes over
        return ok

    def _new_engine(self, compiled: CompiledRulebook) -> Engine:
        engine = Engine(
            compiled,
            self.batch.store,  # the store the parts write now: a follower's is its scratch (live.standby)
            scheduler=self._template_scheduler(),
            mode=self.mode,
            cluster=self.cluster,
            on_close=self.batch.closed,
        )
        # only once the engine exists (a rulebook the Rete refuses leaves everything as it was)
        self.files.use(compiled)
        return engine

    def _template_scheduler(self) -> str:
        """Whose command templates to render: the adapter may speak another's (the simulation speaks Slurm)."""
        speaks = getattr(self.adapter, "template_scheduler", None)
        if speaks:
            return str(speaks)
        return self.cfg.scheduler if self.cfg.scheduler not in ("none", "", None) else "slurm"

    # -- wiring between the parts --------------------------------------------------------------
    def _on_new_file(self, t) -> None:
        self.files.on_new_file(t)

    def _follow_job_log(self, path: str, job: str, attempt: int, nodes: Sequence[str]) -> None:
        """A running job's log, named by the scheduler: followed, as that attempt's, on its nodes."""
        t = self.follower.add(path, FileState(job=job, attempt=attempt, source="job"))
        set_job(t, job, attempt, nodes)
        self.frdumps.job_log(job, attempt, path)

    def _scheduler_available(self, available: bool) -> None:
        if self.actuator is not None and hasattr(self.actuator, "available"):
            self.actuator.available = available  # actions wait while it does not answer

    def _announce(self, closed: list[ClosedIncident]) -> None:
        """Incidents closed in a committed transaction: recommended (monitor mode) or acted on."""
        self.engine.closed.clear()  # the engine keeps them for replay; a live controller must not
        for c in closed:
            d = c.decision
            self.metrics.incidents.labels(fault_class=d.fault_class, decision=d.decision).inc()
            if self.mode == "recommend":
                if not c.plan:
                    logger.info(
                        "incident %s job=%s attempt=%s fault=%s decision=%s nodes=%s: no command",
                        c.id,
                        c.job,
                        c.attempt,
                        d.fault_class,
                        d.decision,
                        ",".join(d.nodes) or "-",
                    )
                for p in c.plan:
                    logger.info(
                        "recommend incident=%s job=%s fault=%s decision=%s action=%s cmd=%s",
                        c.id,
                        c.job,
                        d.fault_class,
                        d.decision,
                        p.name,
                        json.dumps(list(p.argv)),
                    )
            elif self.actuator is not None:
                self.actuator.submit(c)

    def reload(self) -> bool:
        """Load the rulebook as its files are now; False when it was rejected (the old one kept).
        Rules whose ruleset this process holds are swapped in place; others are checked in a
        child process, and then the controller stops (``restart_requested``) for a restart."""
        compiled = self.rulebook.load()
        if compiled is None:
            return False
        if not is_registered(compiled):
            return self._restart_for(compiled)
        self.batch.commit()  # nothing is in flight between steps; to be sure
        try:
            engine = self._new_engine(compiled)
            engine.resume()
        except Exception as exc:
            logger.error("rulebook reload rejected, keeping the current rulebook: the rule engine refused it: %s", exc)
            self.rulebook.rejected()
            return False
        self.compiled = compiled
        old, self.engine = self.engine, engine
        old.session.close()  # its facts' memory is reused; the ruleset itself is shared when unchanged
        if self.actuator is not None and hasattr(self.actuator, "compiled"):
            self.actuator.compiled = compiled  # it renders and verifies with the rulebook's actions
        for t in list(self.follower.files.values()):
            self.follower.rewind(t)  # new scanners, from the consumed position (a partial line is read again)
        self.rulebook.accepted(compiled)
        return True

    def _restart_for(self, compiled: CompiledRulebook) -> bool:
        """Rules that compile to a new durable_rules ruleset: a second ruleset in this process
        would crash it at some later assertion, so the C engine is asked in a child process and,
        if it takes them, this controller stops as on SIGTERM for a restart that loads them."""
        try:
            why = engine_refusal(ruleset_definition(compiled))
        except (TypeError, ValueError) as exc:  # not JSON: durable_rules could not be given it either
            why = str(exc)
        if why is not None:
            logger.error(
                "rulebook reload rejected, keeping the current rulebook: "
                "the rule engine refused it (tried in a child process): %s",
                why,
            )
            self.rulebook.rejected()
            return False
        logger.info("rulebook changed: restarting in place to load it (pid %d kept)", os.getpid())
        self.restart_requested = True
        self.stop_event.set()
        self.follower.wake.set()
        return True

    # -- the store refusing writes -----------------------------------------------------------
    def _store_failed(self, exc: BaseException) -> None:
        self.batch.abort(exc)
        if isinstance(exc, Fenced):  # not an outage: another controller leads now
            logger.error("%s", exc)
            self.leader.step_down("the database refused this controller's term")
            return
        self.outage.failed(exc)

    # -- leadership --------------------------------------------------------------------------
    def _seen(self) -> dict:
        """What this controller sees, for ``recover status`` (written with its heartbeat)."""
        sched = getattr(self, "sched", None)
        health = "none" if sched is None else ("ok" if sched.ok else "unavailable")
        scope = summary(self.compiled.policy.scope)  # the partitions' modes in force
        seen: dict[str, Any] = {"scheduler": health, "scheduler_name": self.cfg.scheduler, "scope": scope}
        standby = getattr(self, "standby", None)
        if standby is not None and standby.active:  # a warm follower: how far its reading trails
            seen.update(behind_bytes=standby.behind_bytes, files=len(self.follower.files))
        return seen

    def _take_over(self) -> None:
        """This controller became the leader: what it holds in memory is rebuilt from what the
        store committed (the old leader's incidents, read positions, job states), so it neither
        loses nor repeats a line, and the actuator resumes the journal (planned actions run,
        started ones are verified against the scheduler before anything is redone)."""
        self.standby.leave()  # what the follower concluded is thrown away: the store's word counts
        committed = self.store.offsets()
        # files not followed yet start where the old leader left them; followed ones go back there
        self.follower.saved = dict(committed)
        self.follower.heads = self.store.offset_heads()
        self._rebuild(committed)
        if self.sched is not None:
            self.sched.fresh()  # the new engine learns the nodes and jobs from an answer asked from now
        if self.actuator is not None:
            self.actuator.pending = True
        self.metrics.takeovers.inc()
        self.metrics.follower_behind.set(0)
        logger.warning(
            "took over as leader (term %s): resuming from the store's positions and journal", self.leader.term
        )

    def _store_recover(self) -> bool:
        """Probe the store; when it takes writes again, rebuild what lived in memory only from
        what it has committed (open incidents, read positions) and read again from there."""
        if not self.outage.due():
            return False
        try:
            with self.store.transaction():
                self.store.set_meta("alive", json.dumps(self.clock.wall()))
            committed = self.store.offsets()
        except STORE_ERRORS as exc:
            self._store_failed(exc)
            return False
        why = self.outage.recovered()
        self._rebuild(committed)
        logger.warning("%s: reading again from the last committed positions", why)
        return True

    def _rebuild(self, committed: dict) -> None:
        """Memory rebuilt from what the store committed: its open incidents, read positions
        (``committed``: ``Store.offsets()``), spool positions and job states."""
        self.batch.abort()  # incidents closed in a rolled back transaction are not announced
        old, self.engine = self.engine, self._new_engine(self.compiled)
        old.session.close()
        self.engine.resume()
        self.batch.back_to(committed)
        if self.spool_in is not None:
            self.spool_in.reopen()
        if self.sched is not None:
            self.sched.restore()

    # -- the loop ----------------------------------------------------------------------------
    def step(self) -> None:
        """One pass: read what changed, advance time. The loop calls it every tick. A follower
        reads and evaluates too, into a scratch store (``live.standby``), and takes over when it can."""
        if self.leader.tick() == "took":
            self._take_over()
        if not self.leader.acting():
            self.standby.step()
            return
        lost = self.db_lost()
        if lost is not None:
            self.batch.abort()
            logger.critical(
                "%s: stopping; nothing more is read or done (a new database would replay the past "
                "as the present). Restore it, or start again on a new one (it reads from the files' end)",
                lost,
            )
            self.lost_reason = lost
            self.stop_event.set()
            return
        if self.outage.down and not self._store_recover():
            return
        try:
            self.read_and_evaluate(dumps=True)
        except STORE_ERRORS as exc:
            self._store_failed(exc)
            return
        except BaseException as exc:
            self.batch.abort(exc)
            raise
        self.outage.succeeded()
        if self.actuator is not None:
            self.actuator.step()

    def read_and_evaluate(self, dumps: bool) -> None:
        """Read what changed (files, the spool, the scheduler), evaluate it and commit the batch;
        the leader's pass and a follower's (into its scratch store) are this same step. ``dumps``:
        also collect flight-recorder dumps (the leader only; never waits: see live.frdumps)."""
        self.files.read(self.follower, self.engine)
        if not self.stop_event.is_set():
            if self.spool_in is not None:
                self.spool_in.feed(self.engine)
            if self.sched is not None:
                self.sched.poll(engine_time(self.clock), self.engine)
            self.batch.begin()
            if dumps:
                self.frdumps.step(self.engine, self.batch, engine_time(self.clock))
            self.engine.advance(engine_time(self.clock))
        self.batch.commit()

    def _update_gauges(self) -> None:
        self.gauges.of_controller(self, STORE_ERRORS)

    def on_signal(self, signum: int, frame: Any = None) -> None:
        """SIGHUP reloads; SIGTERM and SIGINT stop, and a stop wins over a restart to come."""
        if signum == signal.SIGHUP:
            self.reload_requested.set()
        else:
            self.restart_requested = False
            self.stop_event.set()
        self.follower.wake.set()

    def run(self) -> int:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                signal.signal(sig, self.on_signal)
        try:  # whatever stops it, a failed start included, gives up the lease (``_stopped``)
            self._start_running()
            with HeapFreezer() as heap:  # the long-lived heap is not walked by every full collection
                self._loop(heap)
        finally:
            self._stopped()
        if self.lost_reason:
            return 3
        return RESTART if self.restart_requested else 0

    def _start_running(self) -> None:
        self.startup()
        if self.sched is not None:
            self.sched.start_worker()
        if self.spool_in is not None:  # paced from now on (see ingest.SPOOL_INTERVAL)
            self.spool_in.pace(self.cfg.spool_interval, self.clock, self.follower.wake)
        logger.info(
            "%s%s follow=%s spool=%s scheduler=%s db=%s",
            READY,
            self.mode,
            ",".join(self.cfg.follow) or "-",
            self.cfg.spool or "-",
            self.cfg.scheduler,
            display_name(self.cfg.db),  # a DSN's password is not logged
        )
        if self.cfg.reloaded:
            self.rulebook.accepted(self.compiled)

    def _loop(self, heap: HeapFreezer) -> None:
        rescan_every = max(1.0, float(self.cfg.poll or 0.0))
        last_rescan = last_gauges = self.clock.monotonic()
        self._update_gauges()
        while not self.stop_event.is_set():
            self.follower.wake.clear()
            try:
                self.step()
            except Exception:  # a bug must not stop the service: say so, count it, go on
                self.metrics.errors.inc()
                if self.outage.failures < 3 or self.limiter.ok("step-failed"):
                    logger.exception("controller step failed (its transaction was rolled back); continuing")
                self.outage.bug()
            now = self.clock.monotonic()
            heap.tick(now)
            if now - last_rescan >= rescan_every:
                last_rescan = now
                try:
                    self.follower.rescan(full=False)  # inotify vouches for the rest (follow.SWEEP_EVERY)
                except Exception:
                    self.metrics.errors.inc()
                    logger.exception("rescan failed; continuing")
                if self.rulebook.changed():
                    logger.info("rulebook files changed: reloading")
                    self.reload_requested.set()
            if now - last_gauges >= 1.0:
                last_gauges = now
                self._update_gauges()
            if self.reload_requested.is_set() and not self.stop_event.is_set():
                self.reload_requested.clear()
                logger.info("reloading the rulebook")
                self.reload()
            if self.stop_event.is_set():
                break
            if self.outage.down:
                self.clock.wait(self.stop_event, self.outage.wait_s(self.cfg.tick))
            else:
                self.clock.wait(self.follower.wake, self.cfg.tick)
                # woken by a write: the writes of the next moments are read in the same pass
                rest = pacing.MIN_PASS_SECONDS - (self.clock.monotonic() - now)
                if rest > 0 and not self.stop_event.is_set():
                    self.clock.wait(self.stop_event, rest)

    def _stopped(self) -> None:
        logger.info("recover run: stopping")
        try:
            self.batch.commit()
        except Exception as exc:
            self._tx_abort(exc)
        try:
            self.follower.stop()
            if self.spool_in is not None:
                self.spool_in.close()
            if self.sched is not None:
                self.sched.stop()
            self.metrics.stop()
        finally:
            self.leader.release()
            self.store.close()
