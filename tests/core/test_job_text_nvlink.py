"""A job's own words about NVLink recommend the drain; the node's log acts (gpu8).

nvlink_error_text reads CUDA's, NCCL's and the fabric manager's NVLink words in any stream. From a
job's output they are the job's word, not the node's (docs/rulebook.md, "Job text about GPU
hardware"): a job of one node has that node named, and recommended, never drained in act mode.
The same words in the node's kernel log or from the scheduler act as before."""

from __future__ import annotations

from engine.core.incidents import Engine
from engine.facts import Fact
from engine.rulebook import require_rulebook
from engine.store import Store

CUDA = "RuntimeError: CUDA error: uncorrectable NVLink error detected during the execution"
FABRIC = (
    "n1 nv-fabricmanager[2261]: detected NVSwitch fatal error 20034 on fid 0 on NVSwitch pci bus id 00000000:86:00.0"
)


def _incident(source: str, text: str, **extra):
    """Act mode; job 7 runs on n1 alone; one nvlink_error_text hit of ``source``."""
    store = Store(":memory:")
    engine = Engine(require_rulebook(), store, mode="act")
    engine.ingest(Fact.make("job", {"job": "7", "attempt": 0, "state": "RUNNING", "nodes": ["n1"]}, 0.0, "s"))
    attrs = {"matcher": "nvlink_error_text", "node": "n1", "source": source, "text": text, **extra}
    engine.ingest(Fact.make("log", attrs, 1.0, "f:1"))
    engine.advance(1000.0)
    (inc,) = store.incidents()
    return inc, [(a["action"], a["mode"]) for a in store.actions()]


def test_nvlink_words_in_a_jobs_output_recommend_the_drain():
    inc, actions = _incident("job", CUDA, job="7", attempt=0)
    assert (inc.fault_class, inc.nodes, inc.mode) == ("nvlink_error", ("n1",), "recommend")
    assert "job text only" in inc.mode_why
    assert not any(mode == "act" for _, mode in actions)


def test_the_same_words_in_the_nodes_kernel_log_still_act():
    inc, actions = _incident("kernel", FABRIC)
    assert (inc.fault_class, inc.nodes, inc.mode) == ("nvlink_error", ("n1",), "act")
    assert ("drain", "act") in actions
