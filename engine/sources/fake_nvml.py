"""A FAKE NVML backend for tests and demos: scriptable GPUs behind the ``pynvml`` interface.

It is not NVML and measures nothing. It exposes the names the node agent uses, with pynvml's
own constants and exception classes (imported from ``pynvml``), so code written against it runs
unchanged against the real module::

    nv = FakeNvml([FakeGpu(uuid="GPU-1…", bus_id="00000000:3B:00.0")])
    poller = NvmlPoller("n1", backend=nv)
    nv.gpus[0].bump("ecc_uncorrected_volatile")      # counters you can bump
    nv.gpus[0].remap_pending = True                  # flags you can set
    nv.gpus[0].not_supported("nvmlDeviceGetNvLinkState")
    nv.gpus[0].lost = True                           # every call raises NVMLError_GpuIsLost
    nv.inject_xid(0, 79)                             # an event for nvmlEventSetWait
"""

from __future__ import annotations

import threading
from collections import Counter, deque
from dataclasses import dataclass, field
from types import SimpleNamespace

import pynvml

__all__ = ["FakeNvml", "FakeGpu"]

# the names copied from pynvml: constants, event and clock-reason masks, the exception classes
_COPIED_PREFIXES = ("NVML_", "nvmlEventType", "nvmlClocksEventReason", "nvmlClocksThrottleReason", "NVMLError")

_COUNTER_FIELDS = {
    "ecc_corrected_volatile": ("ecc", (0, 0)),
    "ecc_corrected_aggregate": ("ecc", (0, 1)),
    "ecc_uncorrected_volatile": ("ecc", (1, 0)),
    "ecc_uncorrected_aggregate": ("ecc", (1, 1)),
    "row_remap_correctable": ("remap_correctable", None),
    "row_remap_uncorrectable": ("remap_uncorrectable", None),
    "pcie_replay": ("pcie_replay", None),
}


@dataclass(eq=False)
class FakeGpu:
    """One scripted GPU. Counters are plain attributes; ``bump`` adds to them by stable name."""

    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    bus_id: str = "00000000:3B:00.0"
    name: str = "FAKE GPU (test double)"
    ecc: dict = field(default_factory=lambda: {(0, 0): 0, (0, 1): 0, (1, 0): 0, (1, 1): 0})
    remap_correctable: int = 0
    remap_uncorrectable: int = 0
    remap_pending: bool = False
    remap_failure: bool = False
    retired_pending: bool = False
    retired_pages: dict = field(default_factory=lambda: {0: [], 1: []})
    nvlink_links: int = 0  # links that exist; link states for these are in ``nvlink_active``
    nvlink_active: dict = field(default_factory=dict)
    nvlink_errors: dict = field(default_factory=dict)  # (link, counter) → value
    pcie_replay: int = 0
    pcie_gen: int = 4
    pcie_width: int = 16
    clocks_event_reasons: int = 0
    temperature: int = 40
    supported_events: int = 0x8 | 0x1 | 0x2
    lost: bool = False
    reset_required: bool = False
    failures: dict = field(default_factory=dict)  # function name → pynvml exception class

    def __post_init__(self) -> None:
        for link in range(self.nvlink_links):
            self.nvlink_active.setdefault(link, True)

    def bump(self, counter: str, by: int = 1, link: int | None = None) -> None:
        """Add to a counter by its stable name (``ecc_uncorrected_volatile``, ``nvlink_crc``…)."""
        if counter.startswith("nvlink_"):
            kind = {"nvlink_replay": 0, "nvlink_recovery": 1, "nvlink_crc": 2, "nvlink_crc_data": 3}[counter]
            key = (0 if link is None else link, kind)
            self.nvlink_errors[key] = self.nvlink_errors.get(key, 0) + by
            return
        attr, index = _COUNTER_FIELDS[counter]
        if index is None:
            setattr(self, attr, getattr(self, attr) + by)
        else:
            getattr(self, attr)[index] += by

    def not_supported(self, *functions: str) -> None:
        for fn in functions:
            self.failures[fn] = pynvml.NVMLError_NotSupported

    def fail(self, function: str, error: type | None) -> None:
        """Make ``function`` raise ``error`` (a pynvml exception class); ``None`` clears it."""
        if error is None:
            self.failures.pop(function, None)
        else:
            self.failures[function] = error


class FakeNvml:
    """The fake module: ``nvmlInit``, device queries, event sets, pynvml's constants and errors.

    ``library_missing=True`` makes ``nvmlInit`` raise ``NVMLError_LibraryNotFound`` (a machine
    without the driver), ``driver_not_loaded=True`` ``NVMLError_DriverNotLoaded``. ``calls``
    counts the calls per function name.
    """

    def __init__(
        self, gpus: list[FakeGpu] | None = None, *, library_missing: bool = False, driver_not_loaded: bool = False
    ) -> None:
        for name in dir(pynvml):
            if name.startswith(_COPIED_PREFIXES):
                setattr(self, name, getattr(pynvml, name))
        self.gpus: list[FakeGpu] = list(gpus or [])
        self.library_missing = library_missing
        self.driver_not_loaded = driver_not_loaded
        self.calls: Counter = Counter()
        self.count_error: type | None = None  # an error class nvmlDeviceGetCount raises (a driver in trouble)
        self._init_count = 0
        self._sets: list[dict] = []
        self._cond = threading.Condition()

    # -- plumbing -----------------------------------------------------------------------------
    def _enter(self, fn: str, handle: FakeGpu | None = None) -> None:
        self.calls[fn] += 1
        if self._init_count <= 0:
            raise pynvml.NVMLError_Uninitialized()
        if handle is not None:
            if not isinstance(handle, FakeGpu):
                raise pynvml.NVMLError_InvalidArgument()
            if fn in handle.failures:
                raise handle.failures[fn]()
            if handle.lost:
                raise pynvml.NVMLError_GpuIsLost()
            if handle.reset_required:
                raise pynvml.NVMLError_ResetRequired()

    # -- init ---------------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        self.calls["nvmlInit"] += 1
        if self.library_missing:
            raise pynvml.NVMLError_LibraryNotFound()
        if self.driver_not_loaded:
            raise pynvml.NVMLError_DriverNotLoaded()
        self._init_count += 1

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        self._init_count -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._enter("nvmlSystemGetDriverVersion")
        return "0.0.fake"

    # -- devices ------------------------------------------------------------------------------
    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        if self.count_error is not None:
            raise self.count_error()
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        self._enter("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self.gpus):
            raise pynvml.NVMLError_InvalidArgument()
        return self.gpus[index]

    def nvmlDeviceGetIndex(self, h: FakeGpu) -> int:
        self._enter("nvmlDeviceGetIndex", h)
        return self.gpus.index(h)

    def nvmlDeviceGetUUID(self, h: FakeGpu) -> str:
        self._enter("nvmlDeviceGetUUID", h)
        return h.uuid

    def nvmlDeviceGetName(self, h: FakeGpu) -> str:
        self._enter("nvmlDeviceGetName", h)
        return h.name

    def nvmlDeviceGetPciInfo(self, h: FakeGpu) -> SimpleNamespace:
        self._enter("nvmlDeviceGetPciInfo", h)
        dom, bus, rest = h.bus_id.split(":")
        return SimpleNamespace(
            busId=h.bus_id,
            busIdLegacy=h.bus_id[4:],
            domain=int(dom, 16),
            bus=int(bus, 16),
            device=int(rest.split(".")[0], 16),
            pciDeviceId=0x233010DE,
        )

    def nvmlDeviceGetTotalEccErrors(self, h: FakeGpu, errorType: int, counterType: int) -> int:
        self._enter("nvmlDeviceGetTotalEccErrors", h)
        return h.ecc[(int(errorType), int(counterType))]

    def nvmlDeviceGetRemappedRows(self, h: FakeGpu) -> tuple[int, int, int, int]:
        self._enter("nvmlDeviceGetRemappedRows", h)
        return (h.remap_correctable, h.remap_uncorrectable, int(h.remap_pending), int(h.remap_failure))

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h: FakeGpu) -> int:
        self._enter("nvmlDeviceGetRetiredPagesPendingStatus", h)
        return pynvml.NVML_FEATURE_ENABLED if h.retired_pending else pynvml.NVML_FEATURE_DISABLED

    def nvmlDeviceGetRetiredPages(self, h: FakeGpu, sourceFilter: int) -> list[int]:
        self._enter("nvmlDeviceGetRetiredPages", h)
        return list(h.retired_pages.get(int(sourceFilter), []))

    def _link(self, h: FakeGpu, link: int) -> None:
        if not 0 <= link < h.nvlink_links:
            raise pynvml.NVMLError_InvalidArgument() if h.nvlink_links else pynvml.NVMLError_NotSupported()

    def nvmlDeviceGetNvLinkState(self, h: FakeGpu, link: int) -> int:
        self._enter("nvmlDeviceGetNvLinkState", h)
        self._link(h, link)
        return pynvml.NVML_FEATURE_ENABLED if h.nvlink_active.get(link, True) else pynvml.NVML_FEATURE_DISABLED

    def nvmlDeviceGetNvLinkErrorCounter(self, h: FakeGpu, link: int, counter: int) -> int:
        self._enter("nvmlDeviceGetNvLinkErrorCounter", h)
        self._link(h, link)
        return h.nvlink_errors.get((link, int(counter)), 0)

    def nvmlDeviceGetPcieReplayCounter(self, h: FakeGpu) -> int:
        self._enter("nvmlDeviceGetPcieReplayCounter", h)
        return h.pcie_replay

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h: FakeGpu) -> int:
        self._enter("nvmlDeviceGetCurrPcieLinkGeneration", h)
        return h.pcie_gen

    def nvmlDeviceGetCurrPcieLinkWidth(self, h: FakeGpu) -> int:
        self._enter("nvmlDeviceGetCurrPcieLinkWidth", h)
        return h.pcie_width

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: FakeGpu) -> int:
        self._enter("nvmlDeviceGetCurrentClocksEventReasons", h)
        return h.clocks_event_reasons

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h: FakeGpu) -> int:
        self._enter("nvmlDeviceGetCurrentClocksThrottleReasons", h)
        return h.clocks_event_reasons

    def nvmlDeviceGetTemperature(self, h: FakeGpu, sensor: int) -> int:
        self._enter("nvmlDeviceGetTemperature", h)
        return h.temperature

    # -- events -------------------------------------------------------------------------------
    def nvmlEventSetCreate(self) -> dict:
        self._enter("nvmlEventSetCreate")
        es = {"devices": {}, "queue": deque(), "freed": False}
        self._sets.append(es)
        return es

    def nvmlDeviceGetSupportedEventTypes(self, h: FakeGpu) -> int:
        self._enter("nvmlDeviceGetSupportedEventTypes", h)
        return h.supported_events

    def nvmlDeviceRegisterEvents(self, h: FakeGpu, eventTypes: int, eventSet: dict) -> None:
        self._enter("nvmlDeviceRegisterEvents", h)
        if eventTypes & ~h.supported_events:
            raise pynvml.NVMLError_NotSupported()
        eventSet["devices"][id(h)] = eventSet["devices"].get(id(h), 0) | int(eventTypes)

    def nvmlEventSetWait(self, eventSet: dict, timeoutms: int) -> SimpleNamespace:
        self._enter("nvmlEventSetWait")
        with self._cond:
            if not eventSet["queue"]:
                self._cond.wait_for(lambda: bool(eventSet["queue"]) or eventSet["freed"], max(0, timeoutms) / 1000.0)
            if not eventSet["queue"]:
                raise pynvml.NVMLError_Timeout()
            return eventSet["queue"].popleft()

    nvmlEventSetWait_v2 = nvmlEventSetWait

    def nvmlEventSetFree(self, eventSet: dict) -> None:
        self._enter("nvmlEventSetFree")
        with self._cond:
            eventSet["freed"] = True
            self._cond.notify_all()

    def inject_event(self, index: int, event_type: int, data: int, gpu_instance: int = 0xFFFFFFFF) -> int:
        """Deliver an event from GPU ``index`` to every set that registered it; returns how many."""
        gpu = self.gpus[index]
        delivered = 0
        with self._cond:
            for es in self._sets:
                if not es["freed"] and es["devices"].get(id(gpu), 0) & event_type:
                    es["queue"].append(
                        SimpleNamespace(
                            device=gpu,
                            eventType=event_type,
                            eventData=data,
                            gpuInstanceId=gpu_instance,
                            computeInstanceId=0xFFFFFFFF,
                        )
                    )
                    delivered += 1
            self._cond.notify_all()
        return delivered

    def inject_xid(self, index: int, code: int) -> int:
        return self.inject_event(index, pynvml.nvmlEventTypeXidCriticalError, code)
