"""NVML Xid events of the node agent: critical-Xid events as ``xid`` facts, while it runs.

``NvmlEventWatcher`` waits on an NVML event set (in the agent's background thread) and turns each
critical-Xid event into an ``xid`` fact of the GPU it names. It takes the NVML module as
``backend`` (``pynvml`` by default; the test double is ``engine.sources.fake_nvml``). A boundary to
the NVML binding, which raises anything: a device it cannot register, or an event it cannot
read, costs that device or that event, never the watcher.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Iterator

from engine.clock import SYSTEM, Clock
from engine.core.xid import normalize_pci
from engine.errors import NvmlUnavailable
from engine.facts import Fact

logger = logging.getLogger(__name__)

__all__ = ["NvmlEventWatcher"]


class NvmlEventWatcher:
    """Critical-Xid events from NVML as ``xid`` facts (origin ``nvml-event:NODE:gpuN``).

    ``start()`` creates the event set and registers every device that supports the event
    (raises ``NvmlUnavailable`` when none does); ``wait(timeout_ms)`` returns the facts of at
    most one event; ``watch(stop_event)`` yields facts until the event is set. Only Xids raised
    while the watcher runs are seen: the kernel log remains the record of history.
    """

    def __init__(self, node: str, backend: Any = None, *, clock: Clock = SYSTEM) -> None:
        self.clock = clock  # the events' time, and the pause when there is nothing to wait on
        if backend is None:
            import pynvml

            backend = pynvml
        self.node = node
        self.nv = backend
        self._set = None
        self._by_uuid: dict[str, tuple[int, str | None]] = {}
        self._initialised = False
        self._lock = threading.Lock()

    def start(self) -> int:
        nv = self.nv
        try:
            nv.nvmlInit()
            self._initialised = True
            count = int(nv.nvmlDeviceGetCount())
            self._set = nv.nvmlEventSetCreate()
        except Exception as exc:
            self.close()
            raise NvmlUnavailable(f"NVML events unavailable ({type(exc).__name__}: {exc})") from None
        xid_mask = int(getattr(nv, "nvmlEventTypeXidCriticalError", 0x8))
        registered = 0
        for i in range(count):
            try:
                h = nv.nvmlDeviceGetHandleByIndex(i)
                uuid = str(nv.nvmlDeviceGetUUID(h))
                try:
                    bus = nv.nvmlDeviceGetPciInfo(h).busId
                    pci = normalize_pci(bus.decode() if isinstance(bus, bytes) else str(bus))
                except Exception:
                    pci = None
                try:
                    supported = int(nv.nvmlDeviceGetSupportedEventTypes(h))
                except Exception:
                    supported = xid_mask
                mask = xid_mask & supported
                if not mask:
                    logger.info("nvml events: gpu%d does not report Xid events", i)
                    continue
                nv.nvmlDeviceRegisterEvents(h, mask, self._set)
                self._by_uuid[uuid] = (i, pci)
                registered += 1
            except Exception as exc:
                logger.warning("nvml events: gpu%d not registered (%s: %s)", i, type(exc).__name__, exc)
        if not registered:
            self.close()
            raise NvmlUnavailable("no GPU on this node reports Xid events through NVML")
        return registered

    def wait(self, timeout_ms: int = 1000, now: float | None = None) -> list[Fact]:
        nv = self.nv
        if self._set is None:
            self.clock.sleep(max(0, timeout_ms) / 1000.0)
            return []
        try:
            ev = nv.nvmlEventSetWait(self._set, int(timeout_ms))
        except Exception as exc:
            if type(exc).__name__ == "NVMLError_Timeout":
                return []
            logger.warning("nvml events: wait failed (%s: %s)", type(exc).__name__, exc)
            self.clock.sleep(min(1.0, max(0, timeout_ms) / 1000.0))
            return []
        at = self.clock.wall() if now is None else now
        try:
            if not int(ev.eventType) & int(getattr(nv, "nvmlEventTypeXidCriticalError", 0x8)):
                return []
            attrs: dict[str, Any] = {"code": int(ev.eventData), "node": self.node, "source": "nvml-event"}
            origin = f"nvml-event:{self.node}:gpu?"
            try:
                uuid = str(nv.nvmlDeviceGetUUID(ev.device))
            except Exception:
                uuid = None
            if uuid is not None:
                attrs["uuid"] = uuid
                index, pci = self._by_uuid.get(uuid, (None, None))
                if index is not None:
                    attrs["gpu"] = index
                    origin = f"nvml-event:{self.node}:gpu{index}"
                if pci:
                    attrs["pci"] = pci
            gi = getattr(ev, "gpuInstanceId", 0xFFFFFFFF)
            if isinstance(gi, int) and gi != 0xFFFFFFFF:
                attrs["gpu_instance"] = gi
            return [Fact.make("xid", attrs, at, origin)]
        except Exception as exc:
            logger.warning("nvml events: unreadable event (%s)", exc)
            return []

    def watch(self, stop_event: threading.Event, timeout_ms: int = 1000) -> Iterator[Fact]:
        while not stop_event.is_set():
            yield from self.wait(timeout_ms)

    def close(self) -> None:
        if self._set is not None:
            try:
                self.nv.nvmlEventSetFree(self._set)
            except Exception:
                pass
            self._set = None
        if self._initialised:
            try:
                self.nv.nvmlShutdown()
            except Exception:
                pass
            self._initialised = False
