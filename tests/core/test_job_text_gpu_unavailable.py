"""A job's own words that it could not load the NVIDIA driver's libraries (review20, item 1).

The container hook that cannot load NVML, nvidia-smi without libnvidia-ml.so and the loader's
"libcuda.so.1: cannot open shared object file" (kinds4's k4_nvml_unloadable) say the job's
environment lacks the driver's user-space: a container started without GPU access, a login
node, a driver mount missing from an image. No drain fixes that, and a job's text is not the
node's word: in act mode the incident is recommended, never acted on, unless node-scoped
evidence (the node's kernel: its driver probed no GPU) agrees. Kernel evidence keeps acting."""

from __future__ import annotations

from engine.core.incidents import Engine
from engine.core.policy import GuardContext, decide
from engine.facts import Fact
from engine.rulebook import require_rulebook
from engine.store import Store

LOADER = "./train: error while loading shared libraries: libcuda.so.1: cannot open shared object file: No such file or directory"
KERNEL = "2026-11-29T10:00:01.000000+00:00 n1 kernel: NVRM: No NVIDIA graphics adapter probed!"


def _incident(*logs: tuple[str, str, dict]):
    """Act mode; job 7 runs on n1 alone; ``logs``: (matcher, text, extra attrs) at t=1, 2, ..."""
    compiled = require_rulebook()
    store = Store(":memory:")
    engine = Engine(compiled, store, mode="act")
    engine.ingest(Fact.make("job", {"job": "7", "attempt": 0, "state": "RUNNING", "nodes": ["n1"]}, 0.0, "s"))
    for i, (matcher, text, extra) in enumerate(logs, 1):
        attrs = {"matcher": matcher, "node": "n1", "text": text, **extra}
        engine.ingest(Fact.make("log", attrs, float(i), f"f:{i}"))
    engine.advance(1000.0)
    (inc,) = store.incidents()
    return inc, [(a["action"], a["mode"]) for a in store.actions()]


def test_the_loader_without_libcuda_in_a_jobs_text_recommends_the_drain():
    inc, actions = _incident(("k4_nvml_unloadable", LOADER, {"job": "7", "attempt": 0}))
    assert (inc.fault_class, inc.decision, inc.nodes) == ("gpu_unavailable", "isolate_and_restart", ("n1",))
    assert inc.mode == "recommend"
    assert "job text only" in inc.mode_why
    assert ("drain", "recommend") in actions and not any(mode == "act" for _, mode in actions)


def test_the_nodes_kernel_saying_its_driver_found_no_gpu_still_acts():
    inc, actions = _incident(
        ("k4_nvml_unloadable", LOADER, {"job": "7", "attempt": 0}),
        ("kernel_nvidia_no_device", KERNEL, {}),
    )
    assert (inc.fault_class, inc.nodes, inc.mode) == ("gpu_unavailable", ("n1",), "act")
    assert ("drain", "act") in actions


def test_the_kernel_evidence_alone_acts_as_before():
    inc, actions = _incident(("kernel_nvidia_no_device", KERNEL, {}))
    assert (inc.fault_class, inc.nodes, inc.mode) == ("gpu_unavailable", ("n1",), "act")
    assert ("drain", "act") in actions


def test_a_fault_that_may_only_recommend_is_recommended_whatever_the_grant():
    compiled = require_rulebook()
    ctx = GuardContext(job="7", attempt=0)
    assert decide(compiled, "gpu_unavailable", ("n1",), "x", ctx).autonomy == "act"
    d = decide(compiled, "gpu_unavailable", ("n1",), "x", ctx, recommend="job text only")
    assert d.autonomy == "recommend" and "job text only" in d.mode_why
