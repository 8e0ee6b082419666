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

from engine.core.incidents import ClosedIncident, Engine
from engine.core.replay import ReplayResult, replay
from engine.errors import (
    ConfigError,
    ExplainError,
    FactError,
    RecoverError,
    RulebookError,
    SchedulerError,
    StoreError,
)
from engine.facts import Fact
from engine.rulebook import CompiledRulebook, LoadResult, load_rulebook
from engine.store import Store

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
