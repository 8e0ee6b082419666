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


# review5: one policy for the wordings that say the node's driver cannot be reached or does not
# match its libraries, whoever prints them (NVML and nvidia-smi in the job, the container hook
# that runs NVML on the host, docker's device request): on a job of one node the node is drained
# (gpu_unavailable's retry of 1 bounds a job that brings its own mismatched libraries to one
# drain). Only the wordings that say a library is missing from the job's environment stay
# recommend_only. Each line below is scanned by the shipped matchers, as the agent would.
NODE_STATE_WORDINGS = [
    "Failed to initialize NVML: Driver/library version mismatch",
    "nvidia-container-cli: initialization error: nvml error: driver/library version mismatch: unknown.",
    "RuntimeError: No CUDA GPUs are available",
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.",
    'docker: Error response from daemon: could not select device driver "" with capabilities: [[gpu]].',
]
ENVIRONMENT_WORDINGS = [
    LOADER,
    "nvidia-container-cli: initialization error: load library failed: libnvidia-ml.so.1: cannot open shared object file: no such file or directory",
]


def _scanned(line: str) -> list[tuple[str, str, dict]]:
    """(matcher, text, groups) of every shipped job matcher that hits ``line``."""
    from engine.core.scanner import scanner_for

    compiled = require_rulebook()
    scanner, index_map = scanner_for(compiled, "job")
    hits = scanner.feed(line.encode() + b"\n") + scanner.flush()
    out = []
    for h in hits:
        m = compiled.matchers[index_map[h.matcher]]
        if m.emit == "log":
            groups = {k: v for k, v in h.groups.items() if v is not None and k != "node"}
            out.append((m.id, line, {"job": "7", "attempt": 0, **groups}))
    assert out, line
    return out


def test_node_state_wordings_in_a_jobs_text_drain_its_one_node():
    for line in NODE_STATE_WORDINGS:
        inc, actions = _incident(*_scanned(line))
        assert (inc.fault_class, inc.decision, inc.nodes, inc.mode) == (
            "gpu_unavailable",
            "isolate_and_restart",
            ("n1",),
            "act",
        ), line
        assert ("drain", "act") in actions, line


def test_environment_wordings_in_a_jobs_text_only_recommend():
    for line in ENVIRONMENT_WORDINGS:
        inc, actions = _incident(*_scanned(line))
        assert (inc.fault_class, inc.nodes, inc.mode) == ("gpu_unavailable", ("n1",), "recommend"), line
        assert not any(mode == "act" for _, mode in actions), line
