"""The node agent (``recover agent``): kernel log, NVML counters and Xid events → the spool.

``run_agent`` runs the sources of one node in a loop until ``stop_event`` is set: the kernel log
(a file, or ``/dev/kmsg``) every tick, the NVML poller every ``poll_interval`` seconds, NVML Xid
events in a background thread. Facts are appended to ``<spool_dir>/<node>.jsonl``; only after
they are there is the state (kernel-log position, last NVML samples) written, atomically, to
``state_dir``. A ``kill -9`` at any point therefore neither loses a kernel-log fact (the line is
read again) nor doubles one (the re-read line has the same ``Fact.id``, which the spool writer
already holds, and the spool reader de-duplicates as well).

Without a GPU, NVML is reported unavailable once and the kernel-log source keeps running.
"""

from __future__ import annotations

import logging
import os
import queue
import re
import shutil
import signal
import subprocess
import threading
import time
from typing import Any, Callable, Mapping

from engine.facts import Fact
from engine.sources.kmsg import KernelLogSource, _load_json, atomic_write_json, default_rulebook
from engine.sources.nvml import NvmlEventWatcher, NvmlPoller, NvmlUnavailable
from engine.sources.spool import SpoolWriter

logger = logging.getLogger(__name__)

__all__ = ["run_agent", "default_state_dir", "gres_gpu_count", "EXIT_OK", "EXIT_NO_SOURCE"]

EXIT_OK = 0
EXIT_NO_SOURCE = 2
STATE_VERSION = 1
#: facts kept in memory while the spool cannot be written; older ones are dropped past this
MAX_PENDING = 100_000


def default_state_dir(spool_dir: str, node: str) -> str:
    return os.path.join(spool_dir, f".agent-{node}.state")


_GRES_RE = re.compile(r"(?:^|\s)Gres=(\S*)")
_GPU_RE = re.compile(r"(?:^|,)gpu(?::[A-Za-z0-9_.-]+)?:(\d{1,4})")


def gres_gpu_count(node: str, run: Callable[..., Any] = subprocess.run) -> int | None:
    """How many GPUs Slurm's GRES gives this node (``scontrol show node -o NODE``: ``Gres=gpu:8``,
    ``gpu:h100:4(S:0),gpu:a100:4``), or ``None`` when Slurm cannot say. No shell; bounded."""
    if not re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$", node) or (
        run is subprocess.run and not shutil.which("scontrol")
    ):
        return None
    try:
        proc = run(["scontrol", "show", "node", "-o", node], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError) as exc:
        logger.info("agent %s: cannot ask Slurm for the node's GRES (%s)", node, exc)
        return None
    if getattr(proc, "returncode", 1) != 0:
        return None
    m = _GRES_RE.search(str(proc.stdout)[:65536])
    if not m:
        return None
    counts = [int(c) for c in _GPU_RE.findall(m.group(1))]
    return sum(counts) if counts else None


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
    replay: bool = False,
    thresholds: Mapping[str, Any] | None = None,
    nvml_events: bool = True,
    fsync: str | float = "batch",
    tick: float = 0.25,
    nvml_retry_s: float = 300.0,
    kmsg_path: str = "/dev/kmsg",
    rulebook: Any = None,
    expected_gpus: int | str | None = None,
) -> int:
    """Run the node agent until ``stop_event`` is set (SIGTERM/SIGINT when it is ``None``).

    Returns ``EXIT_OK`` (0) after a stop, ``EXIT_NO_SOURCE`` (2) when no source can run.
    ``replay`` reads a kernel log (or the kmsg buffer) from its start on the very first run
    instead of from its end. ``rulebook``: the compiled rulebook whose kernel matchers read the
    kernel log and whose ``policy.thresholds`` judge the NVML counters (the shipped one when
    ``None``), so that the agent and replay read lines alike and a site edits one place.
    ``expected_gpus``: how many GPUs the node should have: a number, ``"gres"`` (ask Slurm for
    the node's GRES), or ``None``; failing those, the rulebook's ``expected_gpus``, else the count
    NVML first gave, remembered in the state across restarts. Fewer GPUs, a count NVML cannot
    give, or NVML failing to start on a node that should have GPUs, is a ``gpus_missing`` fact.
    """
    if rulebook is None:
        rulebook = default_rulebook()
    if thresholds is None:
        thresholds = rulebook.policy.get("thresholds") or None
    state_dir = state_dir or default_state_dir(spool_dir, node)
    state_path = os.path.join(state_dir, "state.json")
    state = _load_json(state_path)
    if not isinstance(state, dict) or state.get("version") != STATE_VERSION or state.get("node") != node:
        if state is not None:
            logger.warning("agent %s: state in %s is not usable; starting afresh", node, state_path)
        state = {}

    kernel_sources: dict[str, KernelLogSource] = {}
    if kernel_log:
        kernel_sources["kernel_log"] = KernelLogSource(
            node, kernel_log, replay=replay, position=state.get("kernel_log"), rulebook=rulebook
        )
        if not os.path.exists(kernel_log):
            logger.warning("agent %s: kernel log %s does not exist yet; waiting for it", node, kernel_log)
    if kmsg:
        src = KernelLogSource(
            node, kmsg=True, kmsg_path=kmsg_path, replay=replay, position=state.get("kmsg"), rulebook=rulebook
        )
        try:
            src.open()
            kernel_sources["kmsg"] = src
        except OSError as exc:
            logger.warning("agent %s: cannot read %s (%s); kmsg source off", node, kmsg_path, exc)

    if expected_gpus == "gres":
        expected_gpus = gres_gpu_count(node)
        if expected_gpus:
            logger.info("agent %s: Slurm's GRES gives the node %d GPU(s)", node, expected_gpus)
    if not isinstance(expected_gpus, int) or isinstance(expected_gpus, bool) or expected_gpus <= 0:
        expected_gpus = None
    remembered = state.get("expected_gpus")
    expected: int | None = expected_gpus or (remembered if isinstance(remembered, int) and remembered > 0 else None)

    poller: NvmlPoller | None = None
    nvml_note_logged = False
    nvml_missing_reported = False
    next_nvml_try = 0.0
    early: list[Fact] = []

    def try_nvml() -> NvmlPoller | None:
        nonlocal nvml_note_logged, expected, nvml_missing_reported
        p = NvmlPoller(node, backend=nvml_backend, thresholds=thresholds, expected_gpus=expected)
        p.restore(state.get("nvml"))
        try:
            p.start()
            expected = p.expected
            nvml_missing_reported = False
        except NvmlUnavailable as exc:
            need = expected or p.expected
            if need and not nvml_missing_reported:
                # the node should have GPUs and NVML cannot reach any: the GPUs are missing
                nvml_missing_reported = True
                logger.error("agent %s: %s, and %d GPU(s) are expected: reporting them missing", node, exc, need)
                early.append(
                    Fact.make(
                        "gpu_state",
                        {
                            "node": node,
                            "state": "gpus_missing",
                            "count": 0,
                            "expected": need,
                            "severity": "fail",
                            "error": str(exc)[:200],
                        },
                        time.time(),
                        f"nvml:{node}:count",
                    )
                )
            if not nvml_note_logged:
                nvml_note_logged = True
                more = " The kernel-log source keeps running." if kernel_sources else ""
                logger.warning("agent %s: %s; GPU counters are off.%s", node, exc, more)
            else:
                logger.debug("agent %s: NVML still unavailable: %s", node, exc)
            return None
        except Exception as exc:  # an NVML binding that misbehaves is still only one source
            if not nvml_note_logged:
                nvml_note_logged = True
                logger.warning(
                    "agent %s: NVML failed to start (%s: %s); GPU counters are off", node, type(exc).__name__, exc
                )
            return None
        if nvml_note_logged:
            logger.info("agent %s: NVML is available now", node)
        return p

    if nvml:
        poller = try_nvml()
        next_nvml_try = time.monotonic() + nvml_retry_s

    if not kernel_sources and poller is None and not early:
        why = [
            "kernel log: none given" if not kernel_log else "",
            ("kmsg: not readable" if kmsg else "kmsg: not asked for"),
            ("nvml: not available" if nvml else "nvml: not asked for"),
        ]
        logger.error("agent %s: no source can run (%s)", node, "; ".join(w for w in why if w))
        return EXIT_NO_SOURCE

    own_stop = stop_event is None
    stop = stop_event if stop_event is not None else threading.Event()
    restore_signals: dict[int, Any] = {}
    if own_stop and threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            restore_signals[sig] = signal.signal(sig, lambda *_: stop.set())

    writer = SpoolWriter(spool_dir, node, fsync=fsync)
    events: "queue.Queue[Fact]" = queue.Queue()
    event_stop = threading.Event()
    event_thread: _EventThread | None = None

    def start_events(p: NvmlPoller) -> _EventThread | None:
        if not nvml_events:
            return None
        w = NvmlEventWatcher(node, backend=p.nv)
        try:
            w.start()
        except NvmlUnavailable as exc:
            logger.info("agent %s: %s; Xids come from the kernel log only", node, exc)
            return None
        t = _EventThread(w, events, event_stop)
        t.start()
        return t

    if poller is not None:
        event_thread = start_events(poller)

    pending: list[Fact] = list(early)
    early.clear()
    saved_state: dict[str, Any] | None = None
    next_poll = 0.0
    logger.info(
        "agent %s: running (sources: %s) → %s",
        node,
        ", ".join([*kernel_sources, *(["nvml"] if poller else [])]),
        writer.path,
    )

    def current_state() -> dict[str, Any]:
        st: dict[str, Any] = {"version": STATE_VERSION, "node": node}
        for name, src in kernel_sources.items():
            st[name] = src.position()
        if poller is not None:
            st["nvml"] = poller.snapshot()
        elif isinstance(state.get("nvml"), dict):
            st["nvml"] = state["nvml"]
        if expected:
            st["expected_gpus"] = expected
        return st

    def flush() -> bool:
        """Facts to the spool, then (only then) the state."""
        nonlocal saved_state, pending
        if pending:
            try:
                writer.write(pending)
            except OSError as exc:
                logger.error(
                    "agent %s: cannot write the spool (%s); keeping %d fact(s) for later", node, exc, len(pending)
                )
                if len(pending) > MAX_PENDING:
                    logger.error("agent %s: dropping %d old fact(s)", node, len(pending) - MAX_PENDING)
                    pending = pending[-MAX_PENDING:]
                return False
            pending = []
        st = current_state()
        if st != saved_state:
            try:
                atomic_write_json(state_path, st)
                saved_state = st
            except OSError as exc:
                logger.error("agent %s: cannot save state to %s (%s)", node, state_path, exc)
                return False
        return True

    try:
        flush()  # the starting position is on disk before any line is read
        while not stop.is_set():
            for src in kernel_sources.values():
                pending.extend(src.poll())
            now_mono = time.monotonic()
            if nvml and poller is None and now_mono >= next_nvml_try:
                next_nvml_try = now_mono + nvml_retry_s
                poller = try_nvml()
                pending.extend(early)
                early.clear()
                if poller is not None:
                    event_thread = start_events(poller)
            if poller is not None and now_mono >= next_poll:
                next_poll = now_mono + poll_interval
                pending.extend(poller.poll(time.time()))
            while True:
                try:
                    pending.append(events.get_nowait())
                except queue.Empty:
                    break
            flush()
            stop.wait(max(0.01, min(tick, poll_interval)))
        for src in kernel_sources.values():
            pending.extend(src.poll())
        flush()
    finally:
        event_stop.set()
        if event_thread is not None:
            event_thread.join(timeout=2.0)
        if poller is not None:
            poller.stop()
        for src in kernel_sources.values():
            src.close()
        writer.close()
        for sig, handler in restore_signals.items():
            signal.signal(sig, handler)
    logger.info("agent %s: stopped", node)
    return EXIT_OK
