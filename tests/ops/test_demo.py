"""The demo: real controller and agents against the simulated cluster find what was injected."""

from engine.ops.demo import run_demo
from engine.ops.goodput import CAUSES
from engine.ops.goodput_text import CAUSE_NAMES, render_summary
from engine.store import Store

EXPECTED = {  # failure-mix component -> the fault class the default rulebook must find
    "faulty_gpu": "gpu_fell_off_bus",
    "io_expansion_board": "gpu_fell_off_bus",
    "gpu_hbm3_memory": "gpu_memory_uncorrectable",
    "gpu_sram_memory": "gpu_memory_uncorrectable",
    "gpu_system_processor": "gpu_hardware_other",
    "software_bug": "app_error",
    "dependency": "app_error",
    "network_switch_cable": "nccl_network_error",
    "nic": "nccl_network_error",
    "nccl_watchdog_timeout": "nccl_timeout",
    "silent_data_corruption": "app_error",
    "ssd": "storage_io_error",
    "host_maintenance_unplanned": "node_failure",
    "power_supply": "node_failure",
    "server_chassis": "node_failure",
    "cpu": "node_failure",
    "system_memory": "node_failure",
    "gpu_thermal": "nccl_timeout",
}


def test_demo_finds_every_injected_failure(tmp_path):
    db = str(tmp_path / "demo.db")
    result = run_demo(db, jobs=6, seed=11)
    by_job = {r.job: r for r in result.incidents}
    assert result.injected
    for comp, job, node in result.injected:
        assert job in by_job, (comp, job, [r.to_dict() for r in result.incidents])
        row = by_job[job]
        assert row.status == "closed"
        assert row.fault_class == EXPECTED[comp], (comp, row.to_dict())
        if EXPECTED[comp] in ("gpu_fell_off_bus", "gpu_memory_uncorrectable", "gpu_hardware_other", "node_failure"):
            assert node in row.nodes  # blamed on the node it was injected on
    store = Store(db, readonly=True)
    acts = store.actions()
    assert acts and {a["mode"] for a in acts} == {"recommend"}  # monitor mode: recorded, never run
    for r in result.incidents:
        drains = {a["target"] for a in store.actions(r.id) if a["action"] == "drain"}
        if r.decision == "isolate_and_restart":
            assert drains <= set(r.nodes)
            down = {n for g in r.guards if g["guard"] == "inhibit" for n in r.nodes}
            assert drains | down == set(r.nodes)  # drained, unless already down
        else:
            assert not drains
    # one collective timeout is always attributed: its stopped rank's node is a suspect, and the
    # restart excludes it without a drain (issue 21)
    timeouts = [
        r for (comp, job, _), r in ((i, by_job[i[1]]) for i in result.injected) if comp == "nccl_watchdog_timeout"
    ]
    assert timeouts, result.injected
    attributed = timeouts[0]
    node = next(n for comp, j, n in result.injected if j == attributed.job)
    assert [(s["rank"], s["node"]) for s in attributed.suspects] == [(3, node)]
    assert attributed.decision == "restart" and attributed.nodes == (node,)
    assert {a["action"] for a in store.actions(attributed.id)} == {"requeue", "exclude"}

    # it ends with its goodput: every job watched; the jobs the scheduler saw end (a node down, a
    # software bug) are failures, of injected jobs only (monitor mode: the rest still run)
    gp = result.goodput
    assert gp["cluster"]["jobs"] == 6 and gp["gpus_per_node"] == 1
    failed_jobs = {f["job"] for f in gp["failures"]}
    assert failed_jobs and failed_jobs <= {job for _, job, _ in result.injected}, (result.injected, gp["failures"])
    assert 0 < gp["cluster"]["ettr"] < 1 and gp["cluster"]["lost_gpu_hours"]["total"] > 0
    text = render_summary(gp)
    assert text.startswith("Goodput: cluster ETTR") and all(CAUSE_NAMES[c] in text for c in CAUSES)
