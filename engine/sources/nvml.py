"""NVML source of the node agent: GPU counters and states as facts.

``NvmlPoller`` samples every device on each ``poll(now)`` (ECC totals, row remapping, retired
pages, NVLink state and error counters, PCIe replays, clock-event reasons, temperature) and
returns facts only for changes: ``gpu_counter`` facts with ``delta``, ``value`` and
``rate_per_s``, ``gpu_state`` facts for throttling, temperature crossings, NVLinks going down and
lost GPUs. The first sample is a baseline. Each call is guarded: a counter a device does not
support is skipped from then on (logged once), a lost GPU is a ``gpu_state`` fact, never a crash.

What a sample means against the rulebook's thresholds is judged in ``gpu_judge`` (pure, no
NVML); Xid events come from ``nvml_events.NvmlEventWatcher``. The poller takes the NVML module
as ``backend`` (``pynvml`` by default; the test double is ``engine.sources.fake_nvml``).
"""

from __future__ import annotations
from engine.errors import NvmlUnavailable, RecoverError

import logging
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Mapping

from engine.clock import SYSTEM, Clock
from engine.facts import Fact, FactError
from engine.core.xid import normalize_pci
from engine.rulebook.thresholds import THRESHOLD_KEYS, thresholds_for
from engine.sources.gpu_judge import (
    StateChange,
    counter_change,
    judge_counter,
    link_change,
    pcie_budget,
    temperature_change,
    throttle_change,
)

logger = logging.getLogger(__name__)

__all__ = ["NvmlPoller", "NvmlUnavailable", "default_thresholds"]


def default_thresholds() -> dict[str, Any]:
    """The shipped rulebook's ``policy.thresholds`` (rules/15-gpu-thresholds.yaml)."""
    from engine.sources.kmsg import default_rulebook

    return dict(default_rulebook().policy.thresholds)


class _Lost(RecoverError):
    def __init__(self, state: str, error: str) -> None:
        super().__init__(state)
        self.state, self.error = state, error


_SKIP = object()


@dataclass
class _Device:
    index: int
    handle: Any
    uuid: str | None
    pci: str | None
    unsupported: set = field(default_factory=set)
    logged: set = field(default_factory=set)
    last: dict = field(default_factory=dict)  # counter key → (value, t)
    windows: dict = field(default_factory=dict)  # counter key → deque[(t, value)]
    links: dict = field(default_factory=dict)  # link → active (bool)
    thresholds: dict = field(default_factory=dict)  # the rulebook's values for this GPU's model
    name: str | None = None
    throttle: tuple | None = None  # alerting reasons last reported
    temp_high: bool | None = None
    lost: str | None = None
    pcie_budget: float | None = None

    @property
    def key(self) -> str:
        return self.uuid or f"index:{self.index}"


class NvmlPoller:
    """Samples NVML counters of every GPU of a node and reports what changed.

    ``thresholds`` is the rulebook's ``policy.thresholds`` (the shipped rulebook's when ``None``;
    a partial mapping is layered over the shipped values, as a site file is); each GPU is judged
    by the values for its model (``models``). ``expected_gpus`` is how many GPUs the node should
    have (else ``thresholds["expected_gpus"]``, else the count first seen): fewer, or a count
    NVML cannot give, is a ``gpus_missing`` state. ``start()`` initialises NVML and raises
    ``NvmlUnavailable`` when it cannot; ``poll(now)`` never raises. ``snapshot()`` /
    ``restore()`` carry the last samples across an agent restart, so that a restarted agent
    reports changes against what it saw before instead of re-reporting a set flag.
    """

    def __init__(
        self,
        node: str,
        backend: Any = None,
        thresholds: Mapping[str, Any] | None = None,
        expected_gpus: int | None = None,
        clock: Clock = SYSTEM,
    ) -> None:
        self.clock = clock  # a poll's time when the caller gives none
        if backend is None:
            import pynvml  # the module is the backend

            backend = pynvml
        self.node = node
        self.nv = backend
        self.thresholds = self._thresholds(thresholds)
        configured = self.thresholds.get("expected_gpus")
        self.expected: int | None = expected_gpus if expected_gpus else (int(configured) if configured else None)
        self.count_error: str | None = None
        self.devices: list[_Device] = []
        self.started = False
        self._restored: dict[str, Any] = {}
        self._count_low: int | None = None
        e = backend
        self._unsupported_errors = tuple(
            c for c in (getattr(e, "NVMLError_NotSupported", None), getattr(e, "NVMLError_FunctionNotFound", None)) if c
        )
        self._link_errors = tuple(
            c for c in (getattr(e, "NVMLError_InvalidArgument", None), getattr(e, "NVMLError_NotFound", None)) if c
        )
        self._lost_error = getattr(e, "NVMLError_GpuIsLost", None)
        self._reset_error = getattr(e, "NVMLError_ResetRequired", None)
        self._nvml_error = getattr(e, "NVMLError", Exception)

    @staticmethod
    def _thresholds(given: Mapping[str, Any] | None) -> dict[str, Any]:
        out = default_thresholds()
        if given:
            unknown = set(given) - set(THRESHOLD_KEYS) - {"models"}
            if unknown:
                logger.warning("nvml thresholds: ignoring unknown keys %s", ", ".join(sorted(unknown)))
            out.update({k: v for k, v in given.items() if k not in unknown})
        return out

    def use_thresholds(self, thresholds: Mapping[str, Any] | None) -> None:
        """A reloaded rulebook's ``policy.thresholds``, for the next poll (each GPU's by its
        model). The samples and windows kept so far stay; the expected GPU count is not changed."""
        new = self._thresholds(thresholds)
        per_device = [thresholds_for(new, dev.name) for dev in self.devices]  # all built before any is set
        self.thresholds = new
        for dev, t in zip(self.devices, per_device):
            dev.thresholds = t

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        """Initialise NVML and enumerate the devices. Raises ``NvmlUnavailable``."""
        nv = self.nv
        try:
            nv.nvmlInit()
        except self._nvml_error as exc:
            name = type(exc).__name__
            if name in ("NVMLError_LibraryNotFound", "NVMLError_DriverNotLoaded"):
                raise NvmlUnavailable(f"NVML unavailable ({name}: {exc}): no NVIDIA driver on this node") from None
            raise NvmlUnavailable(f"NVML init failed ({name}: {exc})") from None
        except OSError as exc:
            raise NvmlUnavailable(f"NVML unavailable: {exc}") from None
        try:
            count = int(nv.nvmlDeviceGetCount())
        except Exception as exc:
            if not self.expected:
                self._shutdown()
                raise NvmlUnavailable(f"NVML cannot count devices ({type(exc).__name__}: {exc})") from None
            # the node should have GPUs and NVML cannot even count them: that is the fault to report
            count, self.count_error = 0, f"nvmlDeviceGetCount: {type(exc).__name__}: {exc}"[:200]
            logger.warning("nvml: %s on %s; %d GPU(s) expected", self.count_error, self.node, self.expected)
        self.devices = [self._describe(i) for i in range(count)]
        self.started = True
        if self.expected is None and count:
            self.expected = count  # the count first seen; the agent remembers it across restarts
        logger.info("nvml: %d GPU(s) on %s (%s expected)", count, self.node, self.expected)

    def _describe(self, index: int) -> _Device:
        nv = self.nv
        handle = uuid = pci = None
        try:
            handle = nv.nvmlDeviceGetHandleByIndex(index)
        except Exception as exc:
            logger.warning("nvml: gpu%d: no handle (%s: %s)", index, type(exc).__name__, exc)
        if handle is not None:
            try:
                uuid = str(nv.nvmlDeviceGetUUID(handle))
            except Exception as exc:
                logger.warning("nvml: gpu%d: no UUID (%s)", index, type(exc).__name__)
            try:
                info = nv.nvmlDeviceGetPciInfo(handle)
                bus = info.busId
                pci = normalize_pci(bus.decode() if isinstance(bus, bytes) else str(bus))
            except Exception as exc:
                logger.warning("nvml: gpu%d: no PCI info (%s)", index, type(exc).__name__)
            try:
                name = nv.nvmlDeviceGetName(handle)
                name = name.decode() if isinstance(name, bytes) else str(name)
            except Exception:
                name = None
        dev = _Device(index, handle, uuid, pci, name=name if handle is not None else None)
        dev.thresholds = thresholds_for(self.thresholds, dev.name)
        snap = self._restored.get(dev.key)
        if snap:
            self._apply(dev, snap)
        return dev

    def stop(self) -> None:
        if self.started:
            self._shutdown()
            self.started = False

    def _shutdown(self) -> None:
        try:
            self.nv.nvmlShutdown()
        except Exception:
            pass

    # -- persistence --------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """The last samples per device (by UUID), JSON-serialisable."""
        out: dict[str, Any] = {}
        for d in self.devices:
            out[d.key] = {
                "last": {k: [v, t] for k, (v, t) in d.last.items()},
                "links": {str(k): v for k, v in d.links.items()},
                "throttle": list(d.throttle) if d.throttle is not None else None,
                "temp_high": d.temp_high,
                "lost": d.lost,
            }
        return out

    def restore(self, snapshot: Mapping[str, Any] | None) -> None:
        """Use samples saved by ``snapshot()`` as the baseline (call before or after ``start``)."""
        self._restored = dict(snapshot) if isinstance(snapshot, Mapping) else {}
        for d in self.devices:
            snap = self._restored.get(d.key)
            if snap:
                self._apply(d, snap)

    @staticmethod
    def _apply(dev: _Device, snap: Any) -> None:
        if not isinstance(snap, Mapping):
            return
        try:
            for k, pair in (snap.get("last") or {}).items():
                v, t = pair
                dev.last[str(k)] = (int(v), float(t))
            for k, v in (snap.get("links") or {}).items():
                dev.links[int(k)] = bool(v)
            th = snap.get("throttle")
            dev.throttle = tuple(str(x) for x in th) if isinstance(th, list) else None
            th = snap.get("temp_high")
            dev.temp_high = th if isinstance(th, bool) else None
            lost = snap.get("lost")
            dev.lost = lost if isinstance(lost, str) else None
        except (TypeError, ValueError):
            logger.warning("nvml: ignoring a malformed saved sample for %s", dev.key)

    # -- guarded calls ------------------------------------------------------------------------
    def _once(self, dev: _Device, key: Any, level: int, msg: str, *args: Any) -> None:
        if key not in dev.logged:
            dev.logged.add(key)
            logger.log(level, msg, *args)

    def _link_counter(self, dev: _Device, link: int, const: str, fallback: int) -> Any:
        """One NVLink error counter of one link (the constant's number when the binding lacks it)."""
        kind = getattr(self.nv, const, fallback)
        return self._call(dev, "nvmlDeviceGetNvLinkErrorCounter", link, kind, skip_key=(link, const), link=True)

    def _call(self, dev: _Device, fn_name: str, *args: Any, skip_key: Any = None, link: bool = False) -> Any:
        key = (fn_name, skip_key)
        if key in dev.unsupported:
            return _SKIP
        fn = getattr(self.nv, fn_name, None)
        if fn is None:
            dev.unsupported.add(key)
            self._once(
                dev,
                ("missing", fn_name),
                logging.INFO,
                "nvml: gpu%d: %s is not in this NVML binding",
                dev.index,
                fn_name,
            )
            return _SKIP
        try:
            return fn(dev.handle, *args)
        except Exception as exc:
            if self._lost_error is not None and isinstance(exc, self._lost_error):
                raise _Lost("lost", f"{fn_name}: {exc}") from None
            if self._reset_error is not None and isinstance(exc, self._reset_error):
                raise _Lost("reset_required", f"{fn_name}: {exc}") from None
            if isinstance(exc, self._unsupported_errors) or (link and isinstance(exc, self._link_errors)):
                dev.unsupported.add(key)
                self._once(
                    dev,
                    ("unsupported", fn_name),
                    logging.INFO,
                    "nvml: gpu%d: %s not supported (%s); skipping it",
                    dev.index,
                    fn_name,
                    type(exc).__name__,
                )
                return _SKIP
            self._once(
                dev,
                ("error", fn_name, type(exc).__name__),
                logging.WARNING,
                "nvml: gpu%d: %s failed (%s: %s); will retry",
                dev.index,
                fn_name,
                type(exc).__name__,
                exc,
            )
            return _SKIP

    # -- polling ------------------------------------------------------------------------------
    def poll(self, now: float | None = None) -> list[Fact]:
        """Sample every device; the facts of what changed since the previous sample."""
        now = self.clock.wall() if now is None else float(now)
        out: list[Fact] = []
        if not self.started:
            return out
        self._check_count(now, out)
        for dev in self.devices:
            try:
                self._poll_device(dev, now, out)
            except _Lost as lost:
                if dev.lost != lost.state:
                    dev.lost = lost.state
                    self._state(dev, now, out, lost.state, "fail", error=lost.error[:200])
                    logger.warning("nvml: gpu%d (%s) on %s: %s", dev.index, dev.pci, self.node, lost.error)
            except Exception:  # never let one device's surprise stop the others
                self._once(dev, ("crash",), logging.ERROR, "nvml: gpu%d: unexpected error while polling", dev.index)
                logger.debug("nvml: gpu%d: unexpected error", dev.index, exc_info=True)
        return out

    def _check_count(self, now: float, out: list[Fact]) -> None:
        expected = self.expected
        if not expected:
            return
        error = None
        try:
            count = int(self.nv.nvmlDeviceGetCount())
        except Exception as exc:
            count, error = 0, f"nvmlDeviceGetCount: {type(exc).__name__}: {exc}"[:200]
        self.count_error = error
        low = count if count < int(expected) else None
        if low != self._count_low:
            self._count_low = low
            attrs = {
                "node": self.node,
                "state": "gpus_missing" if low is not None else "gpus_complete",
                "count": count,
                "expected": int(expected),
                "severity": "fail" if low is not None else "info",
            }
            if error:
                attrs["error"] = error
            self._emit(out, "gpu_state", attrs, now, f"nvml:{self.node}:count")

    def _poll_device(self, dev: _Device, now: float, out: list[Fact]) -> None:
        nv = self.nv
        if dev.handle is None:
            return
        if dev.lost:
            # the identity query answering again means the GPU came back (after a reset)
            uuid = self._call(dev, "nvmlDeviceGetUUID")  # raises _Lost while it is still gone
            if uuid is _SKIP:
                return
            if not dev.uuid:
                dev.uuid = str(uuid)
            previous, dev.lost = dev.lost, None
            dev.last.clear()
            dev.windows.clear()
            self._state(dev, now, out, "recovered", "info", previous=previous)
        # ECC totals
        for etype, ename in ((1, "uncorrected"), (0, "corrected")):
            for ctype, cname in ((0, "volatile"), (1, "aggregate")):
                err = getattr(
                    nv, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED" if etype else "NVML_MEMORY_ERROR_TYPE_CORRECTED", etype
                )
                cnt = getattr(nv, "NVML_VOLATILE_ECC" if ctype == 0 else "NVML_AGGREGATE_ECC", ctype)
                v = self._call(dev, "nvmlDeviceGetTotalEccErrors", err, cnt, skip_key=(etype, ctype))
                if v is not _SKIP:
                    self._counter(dev, f"ecc_{ename}_{cname}", v, now, out)
        # row remapping (Ampere and newer)
        v = self._call(dev, "nvmlDeviceGetRemappedRows")
        if v is not _SKIP:
            try:
                corr, unc, pending, failure = v
            except (TypeError, ValueError):
                pass
            else:
                self._counter(dev, "row_remap_correctable", corr, now, out)
                self._counter(dev, "row_remap_uncorrectable", unc, now, out)
                self._counter(dev, "row_remap_pending", 1 if pending else 0, now, out)
                self._counter(dev, "row_remap_failure", 1 if failure else 0, now, out)
        # page retirement (pre-Ampere; NotSupported on newer parts)
        v = self._call(dev, "nvmlDeviceGetRetiredPagesPendingStatus")
        if v is not _SKIP:
            self._counter(dev, "retired_pages_pending", 1 if _int(v) else 0, now, out)
        for cause, cname in ((0, "sbe"), (1, "dbe")):
            c = getattr(
                nv,
                "NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR"
                if cause
                else "NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS",
                cause,
            )
            v = self._call(dev, "nvmlDeviceGetRetiredPages", c, skip_key=cause)
            if v is not _SKIP:
                try:
                    self._counter(dev, f"retired_pages_{cname}", len(v), now, out)
                except TypeError:
                    pass
        # NVLink per link
        max_links = _int(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18)) or 18
        for link in range(max_links):
            st = self._call(dev, "nvmlDeviceGetNvLinkState", link, skip_key=link, link=True)
            if st is _SKIP:
                continue
            self._link_state(dev, link, bool(_int(st)), now, out)
            for counter, const, fallback in (
                ("nvlink_replay", "NVML_NVLINK_ERROR_DL_REPLAY", 0),
                ("nvlink_recovery", "NVML_NVLINK_ERROR_DL_RECOVERY", 1),
            ):
                v = self._link_counter(dev, link, const, fallback)
                if v is not _SKIP:
                    self._counter(dev, counter, v, now, out, link=link)
            crc = None
            for const, fallback in (("NVML_NVLINK_ERROR_DL_CRC_FLIT", 2), ("NVML_NVLINK_ERROR_DL_CRC_DATA", 3)):
                v = self._link_counter(dev, link, const, fallback)
                if v is not _SKIP:
                    crc = (crc or 0) + _int(v)
            if crc is not None:
                self._counter(dev, "nvlink_crc", crc, now, out, link=link)
        # PCIe replays
        v = self._call(dev, "nvmlDeviceGetPcieReplayCounter")
        if v is not _SKIP:
            if dev.pcie_budget is None:
                dev.pcie_budget = self._pcie_budget(dev)
            self._counter(dev, "pcie_replay", v, now, out)
        # clock-event (throttle) reasons
        v = self._call(dev, "nvmlDeviceGetCurrentClocksEventReasons")
        if v is _SKIP:
            v = self._call(dev, "nvmlDeviceGetCurrentClocksThrottleReasons")
        if v is not _SKIP:
            self._throttle(dev, _int(v), now, out)
        # temperature
        v = self._call(dev, "nvmlDeviceGetTemperature", getattr(nv, "NVML_TEMPERATURE_GPU", 0), skip_key="temp")
        if v is not _SKIP:
            self._temperature(dev, float(_int(v)), now, out)

    def _pcie_budget(self, dev: _Device) -> float:
        gen = width = None
        if dev.thresholds.get("pcie_replay_per_min") is None:  # a fixed budget needs no NVML call
            g = self._call(dev, "nvmlDeviceGetCurrPcieLinkGeneration")
            w = self._call(dev, "nvmlDeviceGetCurrPcieLinkWidth")
            if g is not _SKIP and w is not _SKIP:
                gen, width = _int(g), _int(w)
        return pcie_budget(dev.thresholds, gen, width)

    # -- fact builders ------------------------------------------------------------------------
    def _base(self, dev: _Device) -> dict[str, Any]:
        attrs: dict[str, Any] = {"node": self.node, "gpu": dev.index}
        if dev.uuid:
            attrs["uuid"] = dev.uuid
        if dev.pci:
            attrs["pci"] = dev.pci
        return attrs

    def _emit(self, out: list[Fact], kind: str, attrs: dict[str, Any], at: float, origin: str) -> None:
        try:
            out.append(Fact.make(kind, attrs, at, origin))
        except FactError as exc:
            logger.warning("nvml: dropped a malformed fact (%s)", exc)

    def _state(self, dev: _Device, now: float, out: list[Fact], state: str, severity: str, **extra: Any) -> None:
        attrs = self._base(dev)
        attrs.update(state=state, severity=severity, **extra)
        self._emit(out, "gpu_state", attrs, now, f"nvml:{self.node}:gpu{dev.index}:{state}")

    def _report(self, dev: _Device, now: float, out: list[Fact], change: StateChange | None) -> None:
        if change is not None:
            self._state(dev, now, out, change.state, change.severity, **change.extra)

    def _counter(
        self, dev: _Device, name: str, value: Any, now: float, out: list[Fact], link: int | None = None
    ) -> None:
        value = _int(value)
        key = name if link is None else f"{name}:{link}"
        prev = dev.last.get(key)
        dev.last[key] = (value, now)
        window = dev.windows.setdefault(key, deque())
        change = counter_change(name, value, now, prev, window, float(dev.thresholds.get("window_s") or 60.0))
        if change is None:
            return
        if change.reset:
            logger.info("nvml: gpu%d: %s went back from %d to %d; new baseline", dev.index, key, change.previous, value)
            return
        attrs = self._base(dev)
        attrs.update(counter=name, value=value, delta=change.delta, rate_per_s=change.rate)
        if link is not None:
            attrs["link"] = link
        if change.baseline:
            attrs["baseline"] = True
        retired = sum(v for k, (v, _) in dev.last.items() if k in ("retired_pages_sbe", "retired_pages_dbe"))
        severity, exceeded, limit = judge_counter(
            name,
            value,
            change.delta,
            change.rate,
            window,
            dev.thresholds,
            retired_total=retired,
            budget=dev.pcie_budget,
        )
        attrs.update(severity=severity, exceeded=exceeded)
        if limit is not None:
            attrs["limit"] = limit
        field_name = key.replace(":", ":link")
        self._emit(out, "gpu_counter", attrs, now, f"nvml:{self.node}:gpu{dev.index}:{field_name}")

    def _link_state(self, dev: _Device, link: int, active: bool, now: float, out: list[Fact]) -> None:
        change = link_change(dev.links.get(link), active, link)
        dev.links[link] = active
        self._report(dev, now, out, change)

    def _throttle(self, dev: _Device, mask: int, now: float, out: list[Fact]) -> None:
        dev.throttle, change = throttle_change(mask, dev.throttle, dev.thresholds)
        self._report(dev, now, out, change)

    def _temperature(self, dev: _Device, temp: float, now: float, out: list[Fact]) -> None:
        dev.temp_high, change = temperature_change(temp, dev.temp_high, dev.thresholds)
        self._report(dev, now, out, change)


def _int(v: Any) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        try:
            return int(v.value)  # ctypes values
        except (AttributeError, TypeError, ValueError):
            return 0
