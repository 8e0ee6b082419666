"""The node agent (``recover agent``): kernel log, NVML counters and Xid events → the spool.

``Agent`` (``run_agent`` runs one until ``stop_event`` is set) reads the sources of one node: the
kernel log (a file, or ``/dev/kmsg``) every tick, the NVML poller every ``poll_interval`` seconds,
NVML Xid events in a background thread. Facts are appended to ``<spool_dir>/<node>.jsonl``; only after
they are there is the state (kernel-log position, last NVML samples) written, atomically, to
``state_dir``. A ``kill -9`` at any point therefore neither loses a kernel-log fact (the line is
read again) nor doubles one (the re-read line has the same ``Fact.id``, which the spool writer
already holds, and the spool reader de-duplicates as well).

Without a GPU, NVML is reported unavailable once and the kernel-log source keeps running.

Start position: a first start (no saved state) reads the kernel log from where it ended when the
agent was *launched* (``launch_positions``, taken before anything slow: the rulebook, NVML, asking
the scheduler), not from where it ends once the agent is ready, so an Xid logged while it starts is read.

Reload: SIGHUP, or a change in the rulebook's files (checked every ``reload_check_s``, taken when
the same at two looks in a row, so a save caught mid-write waits for its end), loads the
rulebook again, as the controller does. A rulebook that does not load is reported and the running
one kept. The agent holds no durable_rules ruleset (only the kernel matchers' scanner and the
NVML thresholds), so a new one is swapped in place between two reads: the kernel-log position is
untouched, and no line is lost or read twice across the swap.
"""

from __future__ import annotations

import logging
import os
import queue
import signal
import threading
from typing import Any, Mapping, Sequence

from engine.clock import SYSTEM, Clock
from engine.errors import SchedulerError
from engine.facts import Fact
from engine.sources.kmsg import KernelLogSource, default_rulebook, launch_positions
from engine.sources.nvml import NvmlPoller, NvmlUnavailable
from engine.sources.nvml_events import NvmlEventWatcher
from engine.sources.spool_writer import SpoolWriter
from engine.sources.state import atomic_write_json, load_json

logger = logging.getLogger(__name__)

__all__ = ["Agent", "run_agent", "default_state_dir", "launch_positions", "EXIT_OK", "EXIT_NO_SOURCE"]

EXIT_OK = 0
EXIT_NO_SOURCE = 2
STATE_VERSION = 1
#: facts kept in memory while the spool cannot be written; older ones are dropped past this
MAX_PENDING = 100_000
#: how often the rulebook's files are looked at for a change (seconds)
RELOAD_CHECK_S = 2.0


def default_state_dir(spool_dir: str, node: str) -> str:
    return os.path.join(spool_dir, f".agent-{node}.state")


class _EventThread(threading.Thread):
    def __init__(self, watcher: NvmlEventWatcher, out: "queue.Queue[Fact]", stop: threading.Event) -> None:
        super().__init__(name="nvml-events", daemon=True)
        self.watcher, self.out, self.stop = watcher, out, stop

    def run(self) -> None:
        try:
            for fact in self.watcher.watch(self.stop, timeout_ms=500):
                self.out.put(fact)
        except Exception:
            logger.exception("nvml events: the watcher stopped")
        finally:
            self.watcher.close()


def _gpus_missing(node: str, need: int, exc: Exception, at: float) -> Fact:
    return Fact.make(
        "gpu_state",
        {
            "node": node,
            "state": "gpus_missing",
            "count": 0,
            "expected": need,
            "severity": "fail",
            "error": str(exc)[:200],
        },
        at,
        f"nvml:{node}:count",
    )


class Agent:
    """The sources of one node, the spool they write to and the state saved after it.

    ``Agent(...)``, then ``start()`` (False: no source can run), ``step()`` once per tick,
    ``reload()`` for a new rulebook, ``close()``; ``run()`` does all of it until a stop. The
    parameters are ``run_agent``'s.
    """

    def __init__(
        self,
        node: str,
        spool_dir: str,
        kernel_log: str | None = None,
        kmsg: bool = False,
        nvml: bool = True,
        poll_interval: float = 10.0,
        nvml_backend: Any = None,
        state_dir: str | None = None,
        *,
        replay: bool = False,
        thresholds: Mapping[str, Any] | None = None,
        nvml_events: bool = True,
        fsync: str | float = "batch",
        tick: float = 0.25,
        nvml_retry_s: float = 300.0,
        kmsg_path: str = "/dev/kmsg",
        rulebook: Any = None,
        expected_gpus: int | str | None = None,
        scheduler: Any = None,
        rules: Sequence[str] | None = None,
        defaults: bool = True,
        launch: Mapping[str, Any] | None = None,
        reload_check_s: float = RELOAD_CHECK_S,
        clock: Clock = SYSTEM,
    ) -> None:
        # first, before anything slow: where the kernel log ends now is where a first start begins
        self.launch = dict(launch) if launch is not None else launch_positions(kernel_log, kmsg, kmsg_path)
        self.node, self.spool_dir, self.clock = node, spool_dir, clock  # handed to every part it builds
        self.kernel_log, self.kmsg, self.kmsg_path, self.replay = kernel_log, kmsg, kmsg_path, replay
        self.nvml, self.nvml_backend, self.nvml_events = nvml, nvml_backend, nvml_events
        self.poll_interval, self.tick, self.nvml_retry_s, self.fsync = poll_interval, tick, nvml_retry_s, fsync
        self.rulebook = rulebook if rulebook is not None else default_rulebook()
        self.fixed_thresholds = thresholds is not None  # given by the caller: a reload leaves them
        self.thresholds = thresholds if thresholds is not None else (self.rulebook.policy.thresholds or None)
        self.rules, self.defaults = (list(rules) if rules is not None else None), defaults
        self.reload_check_s = reload_check_s
        self.watch: Any = None
        if self.rules is not None:  # its files as they are now: a change from here on is a reload
            from engine.live.reload import RulebookWatch
            from engine.rulebook import load_rulebook

            paths = self.rules
            self.watch = RulebookWatch(paths, defaults, None, load=lambda: load_rulebook(paths, defaults=defaults))
        self.expected_arg = expected_gpus
        self.scheduler = scheduler
        self.state_dir = state_dir or default_state_dir(spool_dir, node)
        self.state_path = os.path.join(self.state_dir, "state.json")
        state = load_json(self.state_path)
        if not isinstance(state, dict) or state.get("version") != STATE_VERSION or state.get("node") != node:
            if state is not None:
                logger.warning("agent %s: state in %s is not usable; starting afresh", node, self.state_path)
            state = {}
        self.state: dict[str, Any] = state
        self.kernel_sources: dict[str, KernelLogSource] = {}
        self.expected: int | None = None
        self.poller: NvmlPoller | None = None
        self.writer: SpoolWriter | None = None
        self.events: "queue.Queue[Fact]" = queue.Queue()
        self.event_stop = threading.Event()
        self.event_thread: _EventThread | None = None
        self.pending: list[Fact] = []
        self.saved_state: dict[str, Any] | None = None
        self._nvml_note_logged = False
        self._nvml_missing_reported = False
        self._next_nvml_try = 0.0
        self._next_poll = 0.0
        self._next_check = 0.0

    # -- start --------------------------------------------------------------------------------
    def _position(self, name: str) -> Any:
        """Where a kernel source begins: its saved position, else (a first start, not replay)
        where it ended at launch."""
        saved = self.state.get(name)
        if saved is not None or self.replay:
            return saved
        return self.launch.get(name)

    def start(self) -> bool:
        """Open the sources and the spool; False (said in the log) when no source can run."""
        node = self.node
        if self.kernel_log:
            self.kernel_sources["kernel_log"] = KernelLogSource(
                node,
                self.kernel_log,
                replay=self.replay,
                position=self._position("kernel_log"),
                rulebook=self.rulebook,
                clock=self.clock,
            )
            if not os.path.exists(self.kernel_log):
                logger.warning("agent %s: kernel log %s does not exist yet; waiting for it", node, self.kernel_log)
        if self.kmsg:
            src = KernelLogSource(
                node,
                kmsg=True,
                kmsg_path=self.kmsg_path,
                replay=self.replay,
                position=self._position("kmsg"),
                rulebook=self.rulebook,
                clock=self.clock,
            )
            try:
                src.open()
                self.kernel_sources["kmsg"] = src
            except OSError as exc:
                logger.warning("agent %s: cannot read %s (%s); kmsg source off", node, self.kmsg_path, exc)
        expected_gpus = self.expected_arg
        if expected_gpus == "gres":
            expected_gpus = self._scheduler_gpu_count()
        if not isinstance(expected_gpus, int) or isinstance(expected_gpus, bool) or expected_gpus <= 0:
            expected_gpus = None
        remembered = self.state.get("expected_gpus")
        self.expected = expected_gpus or (remembered if isinstance(remembered, int) and remembered > 0 else None)
        if self.nvml:
            self.poller = self._try_nvml()
            self._next_nvml_try = self.clock.monotonic() + self.nvml_retry_s
        if not self.kernel_sources and self.poller is None and not self.pending:
            why = [
                "kernel log: none given" if not self.kernel_log else "",
                ("kmsg: not readable" if self.kmsg else "kmsg: not asked for"),
                ("nvml: not available" if self.nvml else "nvml: not asked for"),
            ]
            logger.error("agent %s: no source can run (%s)", node, "; ".join(w for w in why if w))
            self.close()
            return False
        self.writer = SpoolWriter(self.spool_dir, node, fsync=self.fsync, clock=self.clock)
        if self.poller is not None:
            self.event_thread = self._start_events(self.poller)
        self._next_check = self.clock.monotonic() + self.reload_check_s
        logger.info(
            "agent %s: running (sources: %s) → %s",
            node,
            ", ".join([*self.kernel_sources, *(["nvml"] if self.poller else [])]),
            self.writer.path,
        )
        self.flush()  # the starting position is on disk before any line is read
        return True

    def _scheduler_gpu_count(self) -> int | None:
        """The GPUs the scheduler gives this node; None (said in the log) when there is no
        scheduler, or it cannot say: the count NVML first gives is then the one expected."""
        node, adapter = self.node, self.scheduler
        ask = getattr(adapter, "node_gpu_count", None)
        if ask is None:
            why = (
                "no scheduler to ask" if adapter is None else f"the {getattr(adapter, 'name', '?')} adapter cannot say"
            )
            logger.info("agent %s: %s how many GPUs the node has", node, why)
            return None
        try:
            count = ask(node)
        except (SchedulerError, ValueError) as exc:
            logger.info("agent %s: cannot ask the scheduler for the node's GPUs (%s)", node, exc)
            return None
        except Exception as exc:  # a site adapter that misbehaves costs the count, not the agent
            logger.warning(
                "agent %s: the scheduler adapter failed to give the node's GPUs (%s: %s)", node, type(exc).__name__, exc
            )
            return None
        if isinstance(count, int) and not isinstance(count, bool) and count > 0:
            logger.info("agent %s: the scheduler gives the node %d GPU(s)", node, count)
            return count
        said = "does not know the node" if count is None else "gives the node no GPU"
        logger.info("agent %s: the scheduler %s", node, said)
        return None

    def _try_nvml(self) -> NvmlPoller | None:
        node = self.node
        p = NvmlPoller(
            node, backend=self.nvml_backend, thresholds=self.thresholds, expected_gpus=self.expected, clock=self.clock
        )
        p.restore(self.state.get("nvml"))
        try:
            p.start()
            self.expected = p.expected
            self._nvml_missing_reported = False
        except NvmlUnavailable as exc:
            need = self.expected or p.expected
            if need and not self._nvml_missing_reported:
                # the node should have GPUs and NVML cannot reach any: the GPUs are missing
                self._nvml_missing_reported = True
                logger.error("agent %s: %s, and %d GPU(s) are expected: reporting them missing", node, exc, need)
                self.pending.append(_gpus_missing(node, need, exc, self.clock.wall()))
            if not self._nvml_note_logged:
                self._nvml_note_logged = True
                more = " The kernel-log source keeps running." if self.kernel_sources else ""
                logger.warning("agent %s: %s; GPU counters are off.%s", node, exc, more)
            else:
                logger.debug("agent %s: NVML still unavailable: %s", node, exc)
            return None
        except Exception as exc:  # an NVML binding that misbehaves is still only one source
            if not self._nvml_note_logged:
                self._nvml_note_logged = True
                logger.warning(
                    "agent %s: NVML failed to start (%s: %s); GPU counters are off", node, type(exc).__name__, exc
                )
            return None
        if self._nvml_note_logged:
            logger.info("agent %s: NVML is available now", node)
        return p

    def _start_events(self, p: NvmlPoller) -> _EventThread | None:
        if not self.nvml_events:
            return None
        w = NvmlEventWatcher(self.node, backend=p.nv, clock=self.clock)
        try:
            w.start()
        except NvmlUnavailable as exc:
            logger.info("agent %s: %s; Xids come from the kernel log only", self.node, exc)
            return None
        t = _EventThread(w, self.events, self.event_stop)
        t.start()
        return t

    # -- the loop's work ----------------------------------------------------------------------
    def current_state(self) -> dict[str, Any]:
        st: dict[str, Any] = {"version": STATE_VERSION, "node": self.node}
        for name, src in self.kernel_sources.items():
            st[name] = src.position()
        if self.poller is not None:
            st["nvml"] = self.poller.snapshot()
        elif isinstance(self.state.get("nvml"), dict):
            st["nvml"] = self.state["nvml"]
        if self.expected:
            st["expected_gpus"] = self.expected
        return st

    def flush(self) -> bool:
        """Facts to the spool, then (only then) the state."""
        assert self.writer is not None
        node = self.node
        if self.pending:
            try:
                self.writer.write(self.pending)
            except OSError as exc:
                logger.error(
                    "agent %s: cannot write the spool (%s); keeping %d fact(s) for later", node, exc, len(self.pending)
                )
                if len(self.pending) > MAX_PENDING:
                    logger.error("agent %s: dropping %d old fact(s)", node, len(self.pending) - MAX_PENDING)
                    self.pending = self.pending[-MAX_PENDING:]
                return False
            self.pending = []
        st = self.current_state()
        if st != self.saved_state:
            try:
                atomic_write_json(self.state_path, st)
                self.saved_state = st
            except OSError as exc:
                logger.error("agent %s: cannot save state to %s (%s)", node, self.state_path, exc)
                return False
        return True

    def read_kernel(self) -> None:
        for src in self.kernel_sources.values():
            self.pending.extend(src.poll())

    def step(self) -> None:
        """One tick: the kernel log, NVML when due, the NVML events; then the spool and state."""
        self.read_kernel()
        now_mono = self.clock.monotonic()
        if self.nvml and self.poller is None and now_mono >= self._next_nvml_try:
            self._next_nvml_try = now_mono + self.nvml_retry_s
            self.poller = self._try_nvml()
            if self.poller is not None:
                self.event_thread = self._start_events(self.poller)
        if self.poller is not None and now_mono >= self._next_poll:
            self._next_poll = now_mono + self.poll_interval
            self.pending.extend(self.poller.poll(self.clock.wall()))
        while True:
            try:
                self.pending.append(self.events.get_nowait())
            except queue.Empty:
                break
        self.flush()

    def rulebook_changed(self) -> bool:
        """Whether the rulebook's files changed (looked at every ``reload_check_s``)."""
        if self.watch is None or self.clock.monotonic() < self._next_check:
            return False
        self._next_check = self.clock.monotonic() + self.reload_check_s
        return bool(self.watch.changed())

    # -- reload -------------------------------------------------------------------------------
    def reload(self) -> bool:
        """Load the rulebook again and swap it in; False (said in the log, the running one kept)
        when it does not load, or when its kernel matchers do not compile."""
        if self.watch is None:
            logger.warning("agent %s: a reload asked for, but no rulebook files were given (--rules)", self.node)
            return False
        compiled = self.watch.load()
        if compiled is None:
            return False  # RulebookWatch said why, at ERROR
        try:
            # everything new is built before anything is swapped: a failure here changes nothing
            lines = {name: src.lines_for(compiled) for name, src in self.kernel_sources.items()}
            thresholds = self.thresholds if self.fixed_thresholds else (compiled.policy.thresholds or None)
            if self.poller is not None:
                self.poller.use_thresholds(thresholds)
        except Exception as exc:
            logger.error("rulebook reload rejected, keeping the current rulebook: %s: %s", type(exc).__name__, exc)
            self.watch.rejected()
            return False
        # between two reads: the positions stay, so the next line is read once, with the new matchers
        for name, src in self.kernel_sources.items():
            src.lines = lines[name]
        self.rulebook, self.thresholds = compiled, thresholds
        self.watch.accepted(compiled)
        # routine, so INFO, which the agent logs by default (`recover agent`): a rollout is checked
        # in its journal; a rulebook not taken is said at ERROR
        kernel = sum(1 for m in compiled.matchers if "kernel" in m.sources or "any" in m.sources)
        logger.info("agent %s: new rulebook taken: %d kernel matcher(s)", self.node, kernel)
        return True

    # -- stop ---------------------------------------------------------------------------------
    def close(self) -> None:
        self.event_stop.set()
        if self.event_thread is not None:
            self.event_thread.join(timeout=2.0)
        if self.poller is not None:
            self.poller.stop()
        for src in self.kernel_sources.values():
            src.close()
        if self.writer is not None:
            self.writer.close()

    def run(self, stop: threading.Event, reload_requested: threading.Event | None = None) -> int:
        """``start``, then ``step`` every tick (and ``reload`` when asked or the rulebook files
        changed) until ``stop``; what was read by then is written before it returns."""
        if not self.start():
            return EXIT_NO_SOURCE
        reload_requested = reload_requested if reload_requested is not None else threading.Event()
        try:
            while not stop.is_set():
                self.step()
                if self.rulebook_changed():
                    logger.warning("agent %s: rulebook files changed: reloading", self.node)
                    reload_requested.set()
                if reload_requested.is_set() and not stop.is_set():
                    reload_requested.clear()
                    self.reload()
                self.clock.wait(stop, max(0.01, min(self.tick, self.poll_interval)))
            self.read_kernel()
            self.flush()
        finally:
            self.close()
        logger.info("agent %s: stopped", self.node)
        return EXIT_OK


def run_agent(
    node: str,
    spool_dir: str,
    kernel_log: str | None = None,
    kmsg: bool = False,
    nvml: bool = True,
    poll_interval: float = 10.0,
    nvml_backend: Any = None,
    stop_event: threading.Event | None = None,
    state_dir: str | None = None,
    *,
    reload_event: threading.Event | None = None,
    **options: Any,
) -> int:
    """Run the node agent until ``stop_event`` is set (SIGTERM/SIGINT when it is ``None``; SIGHUP
    then reloads the rulebook, as ``reload_event`` does).

    Returns ``EXIT_OK`` (0) after a stop, ``EXIT_NO_SOURCE`` (2) when no source can run.
    ``replay`` reads a kernel log (or the kmsg buffer) from its start on the very first run
    instead of from where it ended at launch (``launch``: ``launch_positions``, taken by the
    caller as early as it can; here, else). ``rulebook``: the compiled rulebook whose kernel
    matchers read the kernel log and whose ``policy.thresholds`` judge the NVML counters (the
    shipped one when ``None``), so that the agent and replay read lines alike and a site edits
    one place. ``rules``/``defaults``: the files it was loaded from, loaded again on a reload or
    when they change (without ``rules`` there is nothing to reload).
    ``expected_gpus``: how many GPUs the node should have: a number, ``"gres"`` (ask
    ``scheduler``, an adapter, for the node's: ``node_gpu_count``), or ``None``; failing those, the rulebook's ``expected_gpus``, else the count
    NVML first gave, remembered in the state across restarts. Fewer GPUs, a count NVML cannot
    give, or NVML failing to start on a node that should have GPUs, is a ``gpus_missing`` fact.
    ``clock``: the one ``Clock`` the agent reads and waits on, handed to every part it builds (the
    kernel log, the NVML poller and event watcher, the spool writer); the machine's by default.
    Other keyword options are ``Agent``'s.
    """
    agent = Agent(node, spool_dir, kernel_log, kmsg, nvml, poll_interval, nvml_backend, state_dir, **options)
    stop = stop_event if stop_event is not None else threading.Event()
    reload_requested = reload_event if reload_event is not None else threading.Event()
    restore_signals: dict[signal.Signals, Any] = {}
    if stop_event is None and threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            restore_signals[sig] = signal.signal(sig, lambda *_: stop.set())
        restore_signals[signal.SIGHUP] = signal.signal(signal.SIGHUP, lambda *_: reload_requested.set())
    try:
        return agent.run(stop, reload_requested)
    finally:
        for sig, handler in restore_signals.items():
            signal.signal(sig, handler)
