"""The shipped rulebook loads without problems and every embedded test passes, through the real
pipeline (the same as `recover rules check` and `recover rules test`), and every evidence matcher
is hit by a line of one of those tests."""

from __future__ import annotations

import pytest

pytest.importorskip("engine.ops.ruletest")
from engine.rulebook import load_rulebook
from engine.ops.ruletest import run_tests, unexercised_matchers


@pytest.fixture(scope="module")
def compiled():
    result = load_rulebook(tests=True)
    assert result.ok, "\n".join(str(d) for d in result.errors)
    assert not result.diagnostics, "\n".join(str(d) for d in result.diagnostics)  # no warnings either
    return result.compiled


@pytest.fixture(scope="module")
def ran(compiled):
    """(outcomes, the matchers the tests' lines hit): the shipped tests run once for the module."""
    seen: set[str] = set()
    return run_tests(compiled, seen=seen), seen


def test_embedded_tests_pass(ran):
    outcomes, _ = ran
    assert len(outcomes) >= 70
    failed = [f"{o.test.name} ({o.test.mark}): {'; '.join(o.problems)}" for o in outcomes if not o.passed]
    assert not failed, "\n".join(failed)


def test_every_shipped_evidence_matcher_is_exercised_by_a_test_line(compiled, ran):
    # a matcher no test line hits can be broken silently (a wrong escape, a wording that changed):
    # add a test with the line as the program prints it, and its source
    _, seen = ran
    assert len(seen) >= 90
    assert unexercised_matchers(compiled, seen) == []


def test_policy_is_the_documented_one(compiled):
    p = compiled.policy
    assert p["settle"] == 120.0
    assert p["decisions"] == {
        "gpu_fell_off_bus": "isolate_and_restart",
        "gpu_memory_uncorrectable": "isolate_and_restart",
        "nvlink_error": "isolate_and_restart",
        "gpu_hardware_other": "isolate_and_restart",
        "node_failure": "isolate_and_restart",
        "gpu_unavailable": "isolate_and_restart",
        "job_time_limit": "observe",
        "preempted": "observe",
        "host_oom": "stop",
        "straggler": "isolate_and_restart",
        "storage_io_error": "restart",
        "nccl_network_error": "restart",
        "cuda_oom": "stop",
        "cuda_illegal_access_app": "stop",
        "app_error": "stop",
        "nccl_timeout": "restart",
        "unknown": "restart",
    }
    # a drain is news to the site: the isolation ends with a page saying what was done
    assert tuple(p["plans"]["isolate_and_restart"]) == ("drain", "requeue", "exclude", "notify")
    # an unexplained failure is not restarted unless a site grants it restarts
    assert p["retry"]["per_class"]["unknown"] == 0
    # a job that asked for no GPU prints what a node without a driver prints: one drain, not one per attempt
    assert p["retry"]["per_class"]["gpu_unavailable"] == 1
    assert set(p["isolate"]["at_once"]) == {
        "gpu_fell_off_bus",
        "gpu_memory_uncorrectable",
        "nvlink_error",
        "gpu_hardware_other",
    }
    assert tuple(p["plans"]["restart"]) == ("requeue",)
    assert set(compiled.actions) >= {
        "drain",
        "exclude",
        "requeue",
        "hold",
        "release",
        "cancel",
        "resume",
        "notify",
        "keep_held",
        "alertmanager",
    }
