"""The adapter registry: names to factories, imported lazily."""

from __future__ import annotations

import re

import pytest

from scheduler_adapters import registry
from scheduler_adapters.base import CommandResult, SchedulerError
from scheduler_adapters.registry import UnknownAdapter, get_adapter, register
from scheduler_adapters.slurm import SlurmAdapter


@pytest.fixture(autouse=True)
def _restore_registry(monkeypatch):
    monkeypatch.setattr(registry, "_FACTORIES", dict(registry._FACTORIES))


def test_slurm_by_name_with_constructor_arguments():
    calls = []

    def runner(argv, timeout):
        calls.append((list(argv), timeout))
        return CommandResult(0, '{"nodes": []}')

    adapter = get_adapter("slurm", runner=runner, timeout=4)
    assert isinstance(adapter, SlurmAdapter)
    assert adapter.nodes() == []
    assert calls == [(["sinfo", "--json"], 4)]


def test_known_names():
    assert {"slurm", "simulated"} <= set(registry.adapter_names())
    assert "none" not in registry.adapter_names()


def test_none_is_not_an_adapter():
    with pytest.raises(UnknownAdapter, match="no scheduler"):
        get_adapter("none")
    with pytest.raises(ValueError):
        register("none", SlurmAdapter)


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(UnknownAdapter, match=r"'pbs'.*slurm"):
        get_adapter("pbs")


def test_errors_belong_to_the_adapter_family():
    assert issubclass(UnknownAdapter, SchedulerError) and issubclass(UnknownAdapter, LookupError)


def test_missing_module_is_a_clear_error():
    register("ghost", "scheduler_adapters.no_such_module:Ghost")
    with pytest.raises(
        UnknownAdapter,
        match=re.escape("'ghost' is not available: module scheduler_adapters.no_such_module is missing"),
    ):
        get_adapter("ghost")


def test_missing_attribute_is_a_clear_error():
    register("ghost", "scheduler_adapters.slurm:Ghost")
    with pytest.raises(UnknownAdapter, match="has no Ghost"):
        get_adapter("ghost")


def test_callable_factory():
    made = []
    register("mine", lambda **kw: made.append(kw) or "adapter")
    assert get_adapter("mine", x=1) == "adapter"
    assert made == [{"x": 1}]


def test_simulated_is_looked_up_lazily():
    # Whether or not scheduler_adapters/simulated.py exists yet, asking for it either gives
    # its SimulatedCluster or says plainly that the module is missing.
    try:
        factory = registry.get_factory("simulated")
    except UnknownAdapter as exc:
        assert "scheduler_adapters.simulated is missing" in str(exc)
    else:
        assert factory.__name__ == "SimulatedCluster"
