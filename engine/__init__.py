"""Recover: detect, attribute, isolate and restart failed GPU training jobs.

The public surface for code that embeds Recover (the CLI is ``engine.cli``)::

    from engine import load_rulebook, replay, Store

    compiled = load_rulebook(["site/"]).compiled
    result = replay(["slurm-4242.out", "kern.log"], compiled, Store("recover.db"))
    for incident in result.incidents:
        print(incident.id, incident.decision.fault_class, incident.decision.decision)

Packages: ``rulebook`` (YAML -> compiled rulebook), ``core`` (deterministic: scanner, facts,
Rete, incidents, policy, plans, replay), ``sources`` (files, spool, kernel log, NVML), ``live``
(controller, actuator, agent), ``ops`` (explain, review, reports, rule tests), ``cli``.
docs/architecture.md draws who may import whom.
"""

import typing as _typing

from engine.errors import (
    ConfigError,
    ExplainError,
    FactError,
    RecoverError,
    RulebookError,
    SchedulerError,
    StoreError,
)

if _typing.TYPE_CHECKING:
    from engine.core.incidents import ClosedIncident, Engine
    from engine.core.replay import ReplayResult, replay
    from engine.facts import Fact
    from engine.rulebook import CompiledRulebook, LoadResult, load_rulebook
    from engine.store import Store

# imported on first use: a command that only loads a rulebook and scans never pays for the
# engine, its Rete library or SQLite (PEP 562)
_LAZY = {
    "ClosedIncident": "engine.core.incidents",
    "Engine": "engine.core.incidents",
    "ReplayResult": "engine.core.replay",
    "replay": "engine.core.replay",
    "Fact": "engine.facts",
    "CompiledRulebook": "engine.rulebook",
    "LoadResult": "engine.rulebook",
    "load_rulebook": "engine.rulebook",
    "Store": "engine.store",
}


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'engine' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
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
]
