"""engine/sources/gpu_judge.py: what a GPU sample means against the thresholds, with no NVML
(no fake either): plain values in, a verdict out."""

from __future__ import annotations

import math
from collections import deque

import pytest

from engine.sources.gpu_judge import (
    COUNTERS,
    THROTTLE_REASONS,
    StateChange,
    counter_change,
    judge_counter,
    link_change,
    pcie_budget,
    temperature_change,
    throttle_change,
    throttle_reasons,
)
from engine.sources.nvml import default_thresholds

T = default_thresholds()


def test_every_judged_counter_names_a_threshold_the_shipped_rulebook_has():
    keys = {key for _, how, key in COUNTERS.values() if how != "none"}
    assert keys - {"pcie_replay_per_min"} <= set(T)  # the PCIe budget may come from the link instead


# -- counter_change -----------------------------------------------------------------------------


def test_a_first_sample_is_a_silent_baseline_unless_a_flag_or_uncorrected_errors_are_set():
    assert counter_change("ecc_corrected_volatile", 5, 0.0, None, deque(), 60) is None
    assert counter_change("row_remap_pending", 0, 0.0, None, deque(), 60) is None
    assert counter_change("row_remap_pending", 1, 0.0, None, deque(), 60).baseline
    change = counter_change("ecc_uncorrected_volatile", 2, 0.0, None, deque(), 60)
    assert (change.delta, change.rate, change.baseline, change.reset) == (2, None, True, False)


def test_a_change_has_its_delta_and_rate_and_no_change_is_nothing():
    window = deque([(0.0, 10)])
    assert counter_change("nvlink_crc", 10, 5.0, (10, 0.0), window, 60) is None
    change = counter_change("nvlink_crc", 40, 10.0, (10, 5.0), window, 60)
    assert (change.delta, change.rate, change.baseline) == (30, 6.0, False)
    assert counter_change("nvlink_crc", 41, 10.0, (40, 10.0), deque(), 60).rate is None  # no time between


def test_a_counter_that_goes_back_is_a_new_baseline_and_a_flag_that_clears_is_news():
    window = deque([(0.0, 3), (5.0, 7)])
    change = counter_change("ecc_corrected_volatile", 0, 10.0, (7, 5.0), window, 60)
    assert change.reset and change.previous == 7 and list(window) == [(10.0, 0)]
    cleared = counter_change("row_remap_pending", 0, 10.0, (1, 5.0), deque(), 60)
    assert not cleared.reset and cleared.delta == -1


def test_the_window_keeps_its_span_and_one_sample_before_it():
    window: deque = deque()
    for t, v in ((0.0, 0), (30.0, 1), (61.0, 2), (95.0, 3)):
        counter_change("nvlink_replay", v, t, None if t == 0 else (v - 1, t - 1), window, 60)
    assert list(window) == [(30.0, 1), (61.0, 2), (95.0, 3)]


# -- judge_counter ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, verdict",
    [(0, ("info", False, 0)), (1, ("fail", True, 0))],
)
def test_a_value_threshold(value, verdict):
    th = {"ecc_uncorrected_volatile_max": 0}
    assert judge_counter("ecc_uncorrected_volatile", value, value, None, deque(), th) == verdict


def test_a_value_counter_without_a_threshold_warns_on_growth_only():
    assert judge_counter("ecc_corrected_volatile", 9, 4, None, deque(), {}) == ("warn", False, None)
    assert judge_counter("row_remap_pending", 0, -1, None, deque(), {}) == ("info", False, None)


def test_retired_pages_are_judged_on_both_causes_together():
    th = {"retired_pages_max": 60}
    assert judge_counter("retired_pages_dbe", 30, 1, None, deque(), th, retired_total=60) == ("warn", False, 60)
    assert judge_counter("retired_pages_dbe", 31, 1, None, deque(), th, retired_total=61) == ("fail", True, 60)


def test_a_per_minute_threshold_counts_over_the_window():
    th = {"nvlink_replay_per_min": 10}
    window = deque([(0.0, 100), (30.0, 105), (55.0, 110)])
    assert judge_counter("nvlink_replay", 110, 5, None, window, th) == ("fail", True, 10)
    assert judge_counter("nvlink_replay", 110, 5, None, deque([(0.0, 101), (55.0, 110)]), th) == ("info", False, 10)
    assert judge_counter("nvlink_replay", 5, 5, None, deque([(0.0, 5)]), {}) == ("info", False, None)


def test_a_per_second_threshold_needs_a_rate():
    th = {"nvlink_crc_per_s": 100}
    assert judge_counter("nvlink_crc", 500, 500, 100.0, deque(), th) == ("fail", True, 100)
    assert judge_counter("nvlink_crc", 500, 500, None, deque(), th) == ("warn", False, 100)  # a baseline


def test_pcie_replays_against_the_link_s_budget_or_the_default():
    window = deque([(0.0, 0), (30.0, 20)])
    assert judge_counter("pcie_replay", 20, 20, None, window, {}, budget=32.0) == ("info", False, 32.0)
    assert judge_counter("pcie_replay", 20, 20, None, window, {}, budget=16.0) == ("warn", True, 16.0)
    assert judge_counter("pcie_replay", 20, 20, None, window, {"pcie_replay_default_per_min": 25}) == (
        "info",
        False,
        25.0,
    )


def test_an_unknown_counter_is_information():
    assert judge_counter("something_new", 1, 1, None, deque(), T) == ("info", False, None)


@pytest.mark.parametrize(
    "thresholds, gen, width, budget",
    [
        ({"pcie_replay_per_min": 5}, 4, 16, 5.0),  # fixed: the link does not matter
        ({"pcie_replay_per_lane_per_min": {4: 1.5}}, 4, 16, 24.0),
        ({"pcie_replay_per_lane_per_min": {"5": 0.3}}, 5, 8, 3.0),  # rounded up
        ({"pcie_replay_per_lane_per_min": {4: 1.5}}, 3, 16, 16.0),  # no rate for that generation
        ({"pcie_replay_per_lane_per_min": {4: 1.5}, "pcie_replay_default_per_min": 9}, None, None, 9.0),
        ({"pcie_replay_per_lane_per_min": {4: 1.5}}, 4, 0, 16.0),  # a width NVML could not give
    ],
)
def test_pcie_budget(thresholds, gen, width, budget):
    assert pcie_budget(thresholds, gen, width) == budget


# -- states -------------------------------------------------------------------------------------


def test_throttle_reasons_are_named_and_unknown_bits_kept():
    assert throttle_reasons(0) == []
    assert throttle_reasons(0x8 | 0x1) == ["gpu_idle", "hw_slowdown"]
    assert throttle_reasons(0x40 | (1 << 20)) == ["hw_thermal", "bit_20"]
    assert set(THROTTLE_REASONS.values()) >= set(T["throttle_alert_reasons"])


def test_throttle_changes_are_reported_when_the_alerting_reasons_change():
    th = {"throttle_alert_reasons": ["hw_slowdown", "hw_thermal"]}
    assert throttle_change(0x1, None, th) == ((), None)  # benign on the first sample: nothing
    alerts, change = throttle_change(0x8 | 0x4, (), th)
    assert alerts == ("hw_slowdown",)
    assert change == StateChange(
        "throttle",
        "warn",
        {"reasons": ["sw_power_cap", "hw_slowdown"], "alert_reasons": ["hw_slowdown"], "mask": 0xC, "active": True},
    )
    assert throttle_change(0x8, alerts, th) == (alerts, None)  # the same alert: said once
    alerts, change = throttle_change(0, alerts, th)
    assert alerts == () and change.severity == "info" and change.extra["active"] is False


def test_temperature_crosses_up_at_the_limit_and_down_below_the_hysteresis():
    th = {"temperature_c": 85, "temperature_hysteresis_c": 5}
    assert temperature_change(60.0, None, th) == (False, None)
    high, change = temperature_change(85.0, False, th)
    assert high is True and change == StateChange("temperature_high", "warn", {"temperature_c": 85.0, "limit": 85.0})
    assert temperature_change(81.0, True, th) == (True, None)  # within the band: still hot
    high, change = temperature_change(80.0, True, th)
    assert high is False and change.state == "temperature_normal" and change.severity == "info"
    assert temperature_change(90.0, None, th)[1].state == "temperature_high"  # hot on the first sample
    assert temperature_change(200.0, None, {"temperature_c": None}) == (None, None)  # no limit: not judged


def test_an_nvlink_down_on_the_first_sample_or_changing_is_reported():
    assert link_change(None, True, 3) is None
    assert link_change(None, False, 3) == StateChange("nvlink_inactive", "fail", {"link": 3, "baseline": True})
    assert link_change(True, True, 3) is None
    assert link_change(True, False, 3) == StateChange("nvlink_inactive", "fail", {"link": 3})
    assert link_change(False, True, 3) == StateChange("nvlink_active", "info", {"link": 3})


def test_a_rate_that_is_not_finite_is_no_rate():
    assert math.isinf(2**63 / 1e-300)
    change = counter_change("nvlink_crc", 2**63, 1e-300, (0, 0.0), deque(), 60)
    assert change.delta == 2**63 and change.rate is None
