"""NvmlPoller and NvmlEventWatcher against the fake NVML backend (and real pynvml for 'no GPU')."""

from __future__ import annotations

import logging

import pynvml
import pytest

from engine.sources.fake_nvml import FakeGpu, FakeNvml
from engine.sources.nvml import NvmlPoller, NvmlUnavailable
from engine.sources.nvml_events import NvmlEventWatcher

UUID0 = "GPU-aaaaaaaa-0000-0000-0000-000000000000"
UUID1 = "GPU-bbbbbbbb-0000-0000-0000-000000000001"


def make(*gpus: FakeGpu, **thresholds):
    nv = FakeNvml(list(gpus) or [FakeGpu(uuid=UUID0), FakeGpu(uuid=UUID1, bus_id="00000008:86:00.0")])
    p = NvmlPoller("n1", backend=nv, thresholds=thresholds or None)
    p.start()
    return nv, p


def by(facts, **match):
    return [f for f in facts if all(f.get(k) == v for k, v in match.items())]


def test_start_without_library_or_driver_raises_nvml_unavailable():
    for nv in (FakeNvml(library_missing=True), FakeNvml(driver_not_loaded=True)):
        with pytest.raises(NvmlUnavailable, match="NVMLError_(LibraryNotFound|DriverNotLoaded)"):
            NvmlPoller("n1", backend=nv).start()


def test_real_pynvml_on_this_machine_is_unavailable():
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:  # pragma: no cover - only on a GPU machine
        pynvml.nvmlShutdown()
        pytest.skip("this machine has an NVIDIA driver")
    with pytest.raises(NvmlUnavailable, match="LibraryNotFound|DriverNotLoaded"):
        NvmlPoller("n1").start()


def test_fake_exposes_pynvml_names_and_classes():
    nv = FakeNvml()
    assert nv.NVMLError_GpuIsLost is pynvml.NVMLError_GpuIsLost
    assert nv.NVML_VOLATILE_ECC == pynvml.NVML_VOLATILE_ECC
    assert nv.nvmlEventTypeXidCriticalError == pynvml.nvmlEventTypeXidCriticalError
    for name in (
        "nvmlInit",
        "nvmlDeviceGetTotalEccErrors",
        "nvmlDeviceGetRemappedRows",
        "nvmlDeviceGetNvLinkState",
        "nvmlDeviceGetNvLinkErrorCounter",
        "nvmlDeviceGetPcieReplayCounter",
        "nvmlEventSetWait",
    ):
        assert callable(getattr(nv, name)) and hasattr(pynvml, name)
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        nv.nvmlDeviceGetCount()


def test_first_poll_is_a_baseline():
    nv, p = make()
    nv.gpus[0].ecc[(0, 0)] = 17  # corrected errors before start: not news
    nv.gpus[0].pcie_replay = 3
    assert p.poll(100.0) == []
    assert p.poll(110.0) == []


def test_baseline_reports_set_flags_and_volatile_uncorrectable():
    g = FakeGpu(uuid=UUID0, remap_pending=True, retired_pending=True)
    g.ecc[(1, 0)] = 2
    nv, p = make(g)
    facts = p.poll(100.0)
    assert {f.get("counter") for f in facts} == {
        "row_remap_pending",
        "retired_pages_pending",
        "ecc_uncorrected_volatile",
    }
    for f in facts:
        assert f.kind == "gpu_counter" and f.get("baseline") is True and f.get("rate_per_s") is None
    unc = by(facts, counter="ecc_uncorrected_volatile")[0]
    assert unc.get("value") == 2 and unc.get("severity") == "fail" and unc.get("exceeded") is True
    assert p.poll(110.0) == []  # nothing changed since


def test_deltas_and_rates_with_identity():
    nv, p = make()
    p.poll(100.0)
    nv.gpus[1].bump("ecc_corrected_volatile", 5)
    facts = p.poll(110.0)
    assert len(facts) == 1
    f = facts[0]
    assert f.kind == "gpu_counter" and f.get("counter") == "ecc_corrected_volatile"
    assert (f.get("delta"), f.get("value"), f.get("rate_per_s")) == (5, 5, 0.5)
    assert (f.get("gpu"), f.get("uuid"), f.get("pci"), f.get("node")) == (1, UUID1, "0008:86:00", "n1")
    assert f.origin == "nvml:n1:gpu1:ecc_corrected_volatile"
    nv.gpus[1].bump("ecc_corrected_volatile", 10)
    f2 = p.poll(130.0)[0]
    assert (f2.get("delta"), f2.get("value"), f2.get("rate_per_s")) == (10, 15, 0.5)


def test_uncorrectable_volatile_and_aggregate():
    nv, p = make()
    p.poll(0.0)
    nv.gpus[0].bump("ecc_uncorrected_volatile")
    nv.gpus[0].bump("ecc_uncorrected_aggregate")
    facts = p.poll(10.0)
    vol = by(facts, counter="ecc_uncorrected_volatile")[0]
    agg = by(facts, counter="ecc_uncorrected_aggregate")[0]
    assert vol.get("severity") == "fail" and vol.get("exceeded") is True
    assert agg.get("exceeded") is False and agg.get("severity") == "warn"


def test_row_remap_flags_set_and_cleared_and_uncorrectable_limit():
    nv, p = make(FakeGpu(uuid=UUID0))
    p.poll(0.0)
    g = nv.gpus[0]
    g.remap_pending = True
    g.remap_failure = True
    g.remap_uncorrectable = 512
    facts = p.poll(10.0)
    assert by(facts, counter="row_remap_pending")[0].get("value") == 1
    assert by(facts, counter="row_remap_failure")[0].get("severity") == "fail"
    unc = by(facts, counter="row_remap_uncorrectable")[0]
    assert unc.get("exceeded") is True and unc.get("limit") == 511
    g.remap_pending = False  # the GPU was reset
    cleared = p.poll(20.0)
    assert [(f.get("counter"), f.get("value"), f.get("delta")) for f in cleared] == [("row_remap_pending", 0, -1)]


def test_nvlink_counters_states_and_thresholds():
    g = FakeGpu(uuid=UUID0, nvlink_links=4)
    nv, p = make(g)
    assert p.poll(0.0) == []
    g.bump("nvlink_replay", 1, link=2)
    g.bump("nvlink_crc", 50, link=1)  # 5/s: below 100/s
    facts = p.poll(10.0)
    rep = by(facts, counter="nvlink_replay")[0]
    assert rep.get("link") == 2 and rep.get("severity") == "fail" and rep.get("exceeded") is True
    crc = by(facts, counter="nvlink_crc")[0]
    assert crc.get("link") == 1 and crc.get("severity") == "warn" and crc.get("exceeded") is False
    g.bump("nvlink_crc", 1500, link=1)
    g.bump("nvlink_crc_data", 600, link=1)  # flit + data: 2100 in 10 s = 210/s
    crc2 = by(p.poll(20.0), counter="nvlink_crc")[0]
    assert crc2.get("delta") == 2100 and crc2.get("rate_per_s") == 210.0 and crc2.get("exceeded") is True
    g.nvlink_active[3] = False
    down = p.poll(30.0)
    assert [(f.kind, f.get("state"), f.get("link")) for f in down] == [("gpu_state", "nvlink_inactive", 3)]
    g.nvlink_active[3] = True
    assert [f.get("state") for f in p.poll(40.0)] == ["nvlink_active"]


def test_inactive_link_at_start_is_reported():
    g = FakeGpu(uuid=UUID0, nvlink_links=2)
    g.nvlink_active[1] = False
    nv, p = make(g)
    facts = p.poll(0.0)
    assert [(f.get("state"), f.get("link"), f.get("baseline")) for f in facts] == [("nvlink_inactive", 1, True)]


def test_pcie_replay_budget_from_link_generation_and_width():
    g = FakeGpu(uuid=UUID0, pcie_gen=5, pcie_width=16)  # ceil(1.92 * 16) = 31 per minute
    nv, p = make(g)
    p.poll(0.0)
    g.bump("pcie_replay", 20)
    f = p.poll(10.0)[0]
    assert f.get("counter") == "pcie_replay" and f.get("limit") == 31 and f.get("exceeded") is False
    g.bump("pcie_replay", 20)  # 40 within the minute
    f = p.poll(20.0)[0]
    assert f.get("exceeded") is True and f.get("severity") == "warn"
    g.bump("pcie_replay", 1)
    f = p.poll(200.0)[0]  # the window moved on
    assert f.get("exceeded") is False


def test_thresholds_come_from_the_caller():
    g = FakeGpu(uuid=UUID0)
    nv, p = make(g, ecc_corrected_volatile_max=3, pcie_replay_per_min=2)
    p.poll(0.0)
    g.bump("ecc_corrected_volatile", 4)
    g.bump("pcie_replay", 3)
    facts = p.poll(10.0)
    assert by(facts, counter="ecc_corrected_volatile")[0].get("exceeded") is True
    assert by(facts, counter="pcie_replay")[0].get("limit") == 2


def test_counter_reset_is_a_new_baseline_not_a_fact():
    g = FakeGpu(uuid=UUID0)
    nv, p = make(g)
    g.ecc[(0, 0)] = 100
    p.poll(0.0)
    g.ecc[(0, 0)] = 0  # GPU reset clears volatile counters
    assert p.poll(10.0) == []
    g.bump("ecc_corrected_volatile", 2)
    assert by(p.poll(20.0), counter="ecc_corrected_volatile")[0].get("delta") == 2


def test_not_supported_is_skipped_remembered_and_logged_once(caplog):
    g = FakeGpu(uuid=UUID0)
    g.not_supported("nvmlDeviceGetRemappedRows", "nvmlDeviceGetPcieReplayCounter")
    g.fail("nvmlDeviceGetRetiredPages", pynvml.NVMLError_FunctionNotFound)
    nv, p = make(g)
    with caplog.at_level(logging.INFO, logger="engine.sources.nvml"):
        for t in range(5):
            p.poll(float(t))
    assert nv.calls["nvmlDeviceGetRemappedRows"] == 1
    assert nv.calls["nvmlDeviceGetPcieReplayCounter"] == 1
    assert nv.calls["nvmlDeviceGetRetiredPages"] == 2  # once per cause
    assert nv.calls["nvmlDeviceGetTotalEccErrors"] == 5 * 4  # the others keep going
    msgs = [r.getMessage() for r in caplog.records if "not supported" in r.getMessage()]
    assert sum("nvmlDeviceGetRemappedRows" in m for m in msgs) == 1
    assert sum("nvmlDeviceGetRetiredPages" in m for m in msgs) == 1
    # the unsupported counters do not stop the supported ones
    g.bump("ecc_corrected_volatile")
    assert by(p.poll(10.0), counter="ecc_corrected_volatile")


def test_other_errors_are_retried_and_logged_once(caplog):
    g = FakeGpu(uuid=UUID0)
    g.fail("nvmlDeviceGetTemperature", pynvml.NVMLError_Unknown)
    nv, p = make(g)
    with caplog.at_level(logging.WARNING, logger="engine.sources.nvml"):
        p.poll(0.0)
        p.poll(1.0)
    assert nv.calls["nvmlDeviceGetTemperature"] == 2
    assert sum("nvmlDeviceGetTemperature failed" in r.getMessage() for r in caplog.records) == 1


def test_gpu_is_lost_is_a_state_fact_once_and_others_keep_polling():
    nv, p = make()
    p.poll(0.0)
    nv.gpus[0].lost = True
    nv.gpus[1].bump("ecc_corrected_volatile")
    facts = p.poll(10.0)
    lost = by(facts, state="lost")
    assert len(lost) == 1
    assert lost[0].kind == "gpu_state" and lost[0].get("gpu") == 0 and lost[0].get("uuid") == UUID0
    assert lost[0].get("pci") == "0000:3b:00" and lost[0].get("severity") == "fail"
    assert by(facts, counter="ecc_corrected_volatile", gpu=1)
    assert p.poll(20.0) == []  # still lost: said once
    nv.gpus[0].lost = False
    back = p.poll(30.0)
    assert [f.get("state") for f in back] == ["recovered"]
    assert p.poll(40.0) == []  # a fresh baseline after it came back


def test_reset_required_is_a_state_fact():
    nv, p = make()
    p.poll(0.0)
    nv.gpus[1].reset_required = True
    assert [f.get("state") for f in p.poll(10.0)] == ["reset_required"]


def test_gpu_lost_at_start_does_not_stop_the_poller():
    g = FakeGpu(uuid=UUID0, lost=True)
    nv, p = make(g, FakeGpu(uuid=UUID1, bus_id="00000000:86:00.0"))
    assert p.devices[0].uuid is None
    facts = p.poll(0.0)
    assert [f.get("state") for f in facts] == ["lost"]
    assert facts[0].get("gpu") == 0


def test_throttle_reasons_are_decoded_and_reported_on_change():
    g = FakeGpu(uuid=UUID0)
    nv, p = make(g)
    p.poll(0.0)
    g.clocks_event_reasons = 0x1  # idle: benign
    assert p.poll(10.0) == []
    g.clocks_event_reasons = 0x1 | 0x8 | 0x40 | 0x4
    f = p.poll(20.0)[0]
    assert f.get("state") == "throttle" and f.get("active") is True
    assert list(f.get("reasons")) == ["gpu_idle", "sw_power_cap", "hw_slowdown", "hw_thermal"]
    assert list(f.get("alert_reasons")) == ["hw_slowdown", "hw_thermal"]
    assert p.poll(30.0) == []
    g.clocks_event_reasons = 0x80 | 0x20
    f = p.poll(40.0)[0]
    assert list(f.get("alert_reasons")) == ["sw_thermal", "power_brake"]
    g.clocks_event_reasons = 0
    f = p.poll(50.0)[0]
    assert f.get("active") is False and f.get("severity") == "info"


def test_throttle_falls_back_to_the_old_call():
    g = FakeGpu(uuid=UUID0, clocks_event_reasons=0x8)
    g.fail("nvmlDeviceGetCurrentClocksEventReasons", pynvml.NVMLError_FunctionNotFound)
    nv, p = make(g)
    assert [list(f.get("alert_reasons")) for f in p.poll(0.0)] == [["hw_slowdown"]]
    assert nv.calls["nvmlDeviceGetCurrentClocksThrottleReasons"] == 1


def test_temperature_crossing_with_hysteresis():
    g = FakeGpu(uuid=UUID0, temperature=60)
    nv, p = make(g, temperature_c=85, temperature_hysteresis_c=5)
    p.poll(0.0)
    g.temperature = 86
    f = p.poll(10.0)[0]
    assert (f.get("state"), f.get("temperature_c"), f.get("limit")) == ("temperature_high", 86.0, 85.0)
    g.temperature = 82  # within the hysteresis band: still high
    assert p.poll(20.0) == []
    g.temperature = 79
    assert [f.get("state") for f in p.poll(30.0)] == ["temperature_normal"]


def test_expected_gpu_count():
    nv, p = make(FakeGpu(uuid=UUID0), expected_gpus=2)
    f = p.poll(0.0)[0]
    assert (f.get("state"), f.get("count"), f.get("expected")) == ("gpus_missing", 1, 2)
    assert p.poll(1.0) == []


def test_snapshot_restore_avoids_re_reporting_after_restart():
    g = FakeGpu(uuid=UUID0, remap_pending=True)
    nv, p = make(g)
    assert by(p.poll(100.0), counter="row_remap_pending")
    g.bump("ecc_corrected_volatile", 3)
    p.poll(110.0)
    snap = p.snapshot()
    # agent restarts: same GPUs, samples restored
    p2 = NvmlPoller("n1", backend=nv)
    p2.restore(snap)
    p2.start()
    g.bump("ecc_corrected_volatile", 2)
    facts = p2.poll(130.0)
    assert [f.get("counter") for f in facts] == ["ecc_corrected_volatile"]  # pending was already reported
    f = facts[0]
    # the delta and rate are against the sample saved at t=110
    assert (f.get("delta"), f.get("value"), f.get("rate_per_s")) == (2, 5, 0.1)
    assert p2.poll(140.0) == []


def test_poll_before_start_returns_nothing():
    assert NvmlPoller("n1", backend=FakeNvml([FakeGpu()])).poll(0.0) == []


# -- events -----------------------------------------------------------------------------------------


def test_event_watcher_yields_xid_facts():
    nv = FakeNvml([FakeGpu(uuid=UUID0), FakeGpu(uuid=UUID1, bus_id="00000000:86:00.0")])
    w = NvmlEventWatcher("n1", backend=nv)
    assert w.start() == 2
    assert w.wait(timeout_ms=10) == []  # a timeout is normal
    nv.inject_xid(1, 79)
    facts = w.wait(timeout_ms=1000, now=5.0)
    assert len(facts) == 1
    f = facts[0]
    assert f.kind == "xid" and f.get("code") == 79 and f.get("gpu") == 1
    assert f.get("uuid") == UUID1 and f.get("pci") == "0000:86:00" and f.origin == "nvml-event:n1:gpu1"
    nv.inject_event(0, pynvml.nvmlEventTypeSingleBitEccError, 0)  # not registered: not delivered
    assert w.wait(timeout_ms=10) == []
    w.close()


def test_event_watcher_without_support_is_unavailable():
    nv = FakeNvml([FakeGpu(uuid=UUID0, supported_events=0x1)])
    with pytest.raises(NvmlUnavailable):
        NvmlEventWatcher("n1", backend=nv).start()
    with pytest.raises(NvmlUnavailable):
        NvmlEventWatcher("n1", backend=FakeNvml(library_missing=True)).start()


def test_event_watch_loop_stops():
    import threading

    nv = FakeNvml([FakeGpu(uuid=UUID0)])
    w = NvmlEventWatcher("n1", backend=nv)
    w.start()
    stop = threading.Event()
    nv.inject_xid(0, 48)
    gen = w.watch(stop, timeout_ms=20)
    assert next(gen).get("code") == 48
    stop.set()
    assert list(gen) == []
