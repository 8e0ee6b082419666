"""Judging GPU samples against the rulebook's thresholds: pure functions, no NVML.

``NvmlPoller`` (nvml.py) reads the counters and states of each GPU through NVML; what a sample
*means* is decided here, from the sample, what was seen before and the GPU's thresholds (the
rulebook's ``policy.thresholds`` for its model, ``thresholds_for``):

- ``counter_change``: whether a counter sample is a change to report (its delta and rate), a new
  baseline after a reset, or nothing; it keeps the counter's sliding window;
- ``judge_counter``: the severity of a reported change, whether it exceeds its threshold, and
  that threshold (a value, a rate per second, a count over the window, a PCIe replay budget);
- ``pcie_budget``: the PCIe replays a link may see per window, from its generation and width;
- ``throttle_change``, ``temperature_change``, ``link_change``: a state that changed, as the
  ``StateChange`` the poller turns into a ``gpu_state`` fact.

Nothing here raises on the values NVML gives (a rate of inf or NaN is no rate).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Mapping

__all__ = [
    "COUNTERS",
    "FLAGS",
    "THROTTLE_REASONS",
    "Change",
    "StateChange",
    "counter_change",
    "judge_counter",
    "link_change",
    "pcie_budget",
    "temperature_change",
    "throttle_change",
    "throttle_reasons",
]

#: clock-event / throttle reason bits (nvmlClocksEventReason*) and their stable names
THROTTLE_REASONS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal",
    0x40: "hw_thermal",
    0x80: "power_brake",
    0x100: "display_clock",
    0x200: "board_limit",
    0x400: "reliability",
}
_KNOWN_REASONS = sum(THROTTLE_REASONS)

#: counter name → (severity when exceeded, how it is judged, threshold key)
COUNTERS: dict[str, tuple[str, str, str | None]] = {
    "ecc_uncorrected_volatile": ("fail", "value", "ecc_uncorrected_volatile_max"),
    "ecc_corrected_volatile": ("warn", "value", "ecc_corrected_volatile_max"),
    "ecc_uncorrected_aggregate": ("warn", "value", "ecc_uncorrected_aggregate_max"),
    "ecc_corrected_aggregate": ("warn", "value", "ecc_corrected_aggregate_max"),
    "row_remap_failure": ("fail", "value", "row_remap_failure_max"),
    "row_remap_pending": ("fail", "value", "row_remap_pending_max"),
    "row_remap_uncorrectable": ("fail", "value", "row_remap_uncorrectable_max"),
    "row_remap_correctable": ("info", "none", None),
    "retired_pages_pending": ("warn", "value", "retired_pages_pending_max"),
    "retired_pages_sbe": ("fail", "retired", "retired_pages_max"),
    "retired_pages_dbe": ("fail", "retired", "retired_pages_max"),
    "nvlink_replay": ("fail", "per_min", "nvlink_replay_per_min"),
    "nvlink_recovery": ("fail", "per_min", "nvlink_recovery_per_min"),
    "nvlink_crc": ("fail", "per_s", "nvlink_crc_per_s"),
    "pcie_replay": ("warn", "pcie", "pcie_replay_per_min"),
}
#: boolean counters: a set flag is reported even on the baseline sample
FLAGS = frozenset({"row_remap_pending", "row_remap_failure", "retired_pages_pending"})
#: replays per window when neither a fixed budget nor the link's generation gives one
DEFAULT_PCIE_BUDGET = 16.0


@dataclass(frozen=True)
class Change:
    """A counter sample against the one before: ``reset`` (it went back: a new baseline, nothing
    to report) or a change to report (``baseline``: the first sample, reported as it is set)."""

    delta: int = 0
    rate: float | None = None
    baseline: bool = False
    reset: bool = False
    previous: int | None = None


@dataclass(frozen=True)
class StateChange:
    """A GPU state to report: ``gpu_state`` with ``state``, ``severity`` and the ``extra`` attributes."""

    state: str
    severity: str
    extra: dict[str, Any] = field(default_factory=dict)


def _finite(x: float | None) -> float | None:
    return x if x is None or math.isfinite(x) else None


def counter_change(
    name: str, value: int, now: float, prev: tuple[int, float] | None, window: deque, span: float
) -> Change | None:
    """What a sample of counter ``name`` (``value`` at ``now``; ``prev``: the last sample, as
    (value, time)) is: None when there is nothing to report. ``window`` holds the (time, value)
    samples of the last ``span`` seconds (and one before them) and is updated here."""
    window.append((now, value))
    while len(window) > 1 and window[1][0] <= now - span:
        window.popleft()
    if prev is None:
        # a first sample is a baseline: only a set flag, or uncorrected errors, are news on it
        if (name in FLAGS or name == "ecc_uncorrected_volatile") and value > 0:
            return Change(delta=value, baseline=True)
        return None
    pv, pt = prev
    if value == pv:
        return None
    if value < pv and name not in FLAGS:
        # a volatile counter reset (GPU reset, driver reload): the window starts again from here
        window.clear()
        window.append((now, value))
        return Change(reset=True, previous=pv)
    delta = value - pv
    return Change(delta=delta, rate=_finite(delta / (now - pt)) if now > pt else None, previous=pv)


def judge_counter(
    name: str,
    value: int,
    delta: int,
    rate: float | None,
    window: deque,
    thresholds: Mapping[str, Any],
    *,
    retired_total: int = 0,
    budget: float | None = None,
) -> tuple[str, bool, float | None]:
    """(severity, exceeded, limit) of a reported change of counter ``name``. ``window``: its
    samples, as ``counter_change`` keeps them; ``retired_total``: the GPU's retired pages (both
    causes); ``budget``: the link's PCIe replay budget (``pcie_budget``)."""
    severity, how, tkey = COUNTERS.get(name, ("info", "none", None))
    limit = thresholds.get(tkey) if tkey else None
    in_window = window[-1][1] - window[0][1] if len(window) > 1 else max(delta, 0)
    if how == "value":
        if limit is None:
            return ("warn" if delta > 0 else "info"), False, None
        return (severity, True, limit) if value > float(limit) else ("info", False, limit)
    if how == "retired":
        if limit is not None and retired_total > float(limit):
            return severity, True, limit
        return ("warn" if delta > 0 else "info"), False, limit
    if how == "per_min":
        if limit is not None and delta > 0 and in_window >= float(limit):
            return severity, True, limit
        return "info", False, limit
    if how == "per_s":
        if limit is not None and rate is not None and rate >= float(limit):
            return severity, True, limit
        return ("warn" if delta > 0 else "info"), False, limit
    if how == "pcie":
        if budget is None:
            budget = float(thresholds.get("pcie_replay_default_per_min") or DEFAULT_PCIE_BUDGET)
        if in_window > budget:
            return severity, True, budget
        return "info", False, budget
    return "info", False, None


def pcie_budget(thresholds: Mapping[str, Any], generation: int | None = None, width: int | None = None) -> float:
    """The PCIe replays a link may see per window: the fixed ``pcie_replay_per_min``, else the
    per-lane rate of its generation times its width (rounded up), else the default."""
    fixed = thresholds.get("pcie_replay_per_min")
    if fixed is not None:
        return float(fixed)
    per_lane = thresholds.get("pcie_replay_per_lane_per_min") or {}
    if generation is not None and width is not None:
        rate = per_lane.get(generation) or per_lane.get(str(generation))
        if rate is not None and width > 0:
            return float(math.ceil(float(rate) * width))
    return float(thresholds.get("pcie_replay_default_per_min") or DEFAULT_PCIE_BUDGET)


def throttle_reasons(mask: int) -> list[str]:
    """The names of the reason bits set in ``mask`` (``bit_N`` for one NVML has no name for)."""
    names = [n for bit, n in sorted(THROTTLE_REASONS.items()) if mask & bit]
    return names + [f"bit_{i}" for i in range(64) if (mask & ~_KNOWN_REASONS) >> i & 1]


def throttle_change(
    mask: int, before: tuple[str, ...] | None, thresholds: Mapping[str, Any]
) -> tuple[tuple[str, ...], StateChange | None]:
    """The alerting reasons of ``mask`` (to keep for the next sample) and the state to report:
    None while the alerting reasons stay as they were (``before``; None: no sample yet)."""
    names = throttle_reasons(mask)
    alert_set = set(thresholds.get("throttle_alert_reasons") or ())
    alerts = tuple(n for n in names if n in alert_set)
    if (before is None and not alerts) or before == alerts:
        return alerts, None
    extra = {"reasons": names, "alert_reasons": list(alerts), "mask": mask, "active": bool(alerts)}
    return alerts, StateChange("throttle", "warn" if alerts else "info", extra)


def temperature_change(
    temp: float, before: bool | None, thresholds: Mapping[str, Any]
) -> tuple[bool | None, StateChange | None]:
    """Whether the GPU is hot at ``temp`` (to keep for the next sample) and the state to report.
    Hot from ``temperature_c`` up; once hot, until it is ``temperature_hysteresis_c`` below it.
    Without a limit nothing is judged (``before`` stays)."""
    limit = thresholds.get("temperature_c")
    if limit is None:
        return before, None
    limit = float(limit)
    hyst = float(thresholds.get("temperature_hysteresis_c") or 0.0)
    high = temp > limit - hyst if before else temp >= limit
    if (before is None and not high) or before == high:
        return high, None
    state = "temperature_high" if high else "temperature_normal"
    return high, StateChange(state, "warn" if high else "info", {"temperature_c": temp, "limit": limit})


def link_change(before: bool | None, active: bool, link: int) -> StateChange | None:
    """An NVLink's state to report: one that is down on the first sample, or one that changed."""
    if before is None:
        return None if active else StateChange("nvlink_inactive", "fail", {"link": link, "baseline": True})
    if before == active:
        return None
    return StateChange("nvlink_active" if active else "nvlink_inactive", "info" if active else "fail", {"link": link})
