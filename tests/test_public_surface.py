"""The public surface of ``engine`` is exactly its ``__all__`` (httpx's habit): adding or removing
a name is a decision made here, and every exported name resolves."""

import engine

EXPECTED = {
    "ClosedIncident",
    "CompiledRulebook",
    "ConfigError",
    "Engine",
    "ExplainError",
    "Fact",
    "FactError",
    "LoadResult",
    "RecoverError",
    "ReplayResult",
    "RulebookError",
    "SchedulerError",
    "Store",
    "StoreError",
    "load_rulebook",
    "replay",
}


def test_exported_members_are_the_documented_ones():
    assert set(engine.__all__) == EXPECTED
    public = {n for n in dir(engine) if not n.startswith("_")}
    # subpackages appear as attributes once imported; anything else public must be in __all__
    modules = {
        "cli",
        "core",
        "errors",
        "facts",
        "live",
        "ops",
        "rulebook",
        "sources",
        "store",
        "config",
        "cache",
        "hostlist",
        "clock",
    }
    assert public - modules == EXPECTED


def test_every_exported_name_resolves():
    for name in engine.__all__:
        assert getattr(engine, name) is not None, name
