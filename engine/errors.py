"""One exception tree for everything Recover raises on purpose, so a caller catches the level it
needs (the CLI's error boundary catches ``RecoverError`` and prints one line, never a traceback)::

    RecoverError
    ├── ConfigError        recover.toml or its environment overrides (also a ValueError)
    ├── RulebookError      a rulebook with errors; ``.diagnostics`` holds every one, file:line:col
    ├── FactError          a malformed fact or spool line (also a ValueError)
    ├── StoreError         the incident database cannot be opened or written
    │   └── Fenced         a write with a stale leader term, refused by the database itself
    ├── ReteError          the rule engine refused a fact (also a RuntimeError)
    ├── PlanError          a value could not be made safe for an action template (also a ValueError)
    ├── ExplainError       no such incident (also a LookupError)
    ├── ReviewError        an operator review value that cannot be used (also a ValueError)
    ├── SpoolError         a spool that cannot be used as asked (also a ValueError)
    ├── NvmlUnavailable    NVML cannot be used on this machine (also a RuntimeError)
    ├── HostlistError      text that is not a Slurm hostlist (also a ValueError)
    ├── DumpRefused        a flight-recorder dump that is not read: ``.path`` and ``.reason`` say why
    ├── StateUnknown       the scheduler could not tell an action's state: wait, never guess
    │   └── NotYet         it answered: the job is between states, ask again shortly
    └── SchedulerError     a scheduler adapter failed
        ├── SchedulerUnavailable   its commands are missing or its controller does not answer
        └── CommandFailed          a command ran and failed (scheduler_adapters/base.py)

The second bases keep older ``except ValueError`` call sites right; new code catches these names.
"""

from __future__ import annotations

from typing import Any, Sequence

__all__ = [
    "RecoverError",
    "ConfigError",
    "RulebookError",
    "FactError",
    "StoreError",
    "Fenced",
    "ReteError",
    "PlanError",
    "ExplainError",
    "ReviewError",
    "SpoolError",
    "NvmlUnavailable",
    "HostlistError",
    "DumpRefused",
    "StateUnknown",
    "NotYet",
    "SchedulerError",
    "SchedulerUnavailable",
]


class RecoverError(Exception):
    """Base of every error Recover raises on purpose."""


class ConfigError(RecoverError, ValueError):
    """The config file cannot be read or has a wrong key or value."""


class RulebookError(RecoverError):
    """A rulebook with errors; ``diagnostics`` holds every problem found, each with file:line:col."""

    def __init__(self, diagnostics: Sequence[Any]):
        self.diagnostics = list(diagnostics)
        errors = [d for d in self.diagnostics if getattr(d, "severity", "error") == "error"]
        super().__init__("\n".join(str(d) for d in errors) or "rulebook has errors")


class FactError(RecoverError, ValueError):
    """A fact that is not well formed (bad kind, nested or non-JSON attrs, bad JSON line)."""


class StoreError(RecoverError):
    """The store could not be opened or written (bad path, full disk, not a Recover database)."""


class Fenced(StoreError):
    """The database refused a write because its leader term is not the lease's (another
    controller took over, or this one's lease ran out): this process must stop acting."""


class ReteError(RecoverError, RuntimeError):
    """The engine could not take a fact, or an action failed inside it."""


class PlanError(RecoverError, ValueError):
    """A value could not be made safe for a template (bad node name, bad job id)."""


class ExplainError(RecoverError, LookupError):
    """No such incident in the store."""


class ReviewError(RecoverError, ValueError):
    """A review value that cannot be used."""


class SpoolError(RecoverError, ValueError):
    """A spool that cannot be used as asked (bad node name, bad policy)."""


class NvmlUnavailable(RecoverError, RuntimeError):
    """NVML cannot be used on this machine (no library, no driver, or init failed)."""


class HostlistError(RecoverError, ValueError):
    """The text is not a hostlist expression."""


class DumpRefused(RecoverError, ValueError):
    """A PyTorch flight-recorder dump that is not read (too big, not a regular file, a pickle that
    names a class, a field of the wrong type...): the other dumps are read all the same."""

    def __init__(self, path: str, reason: str, rank: int | None = None):
        self.path, self.reason, self.rank = path, reason, rank
        super().__init__(f"{path}: {reason}")


class StateUnknown(RecoverError):
    """The scheduler could not tell (it did not answer) whether an action's effect is there: the
    actuator waits, never guesses, and escalates once it has waited long enough."""


class NotYet(StateUnknown):
    """The scheduler answered, but the job is between states (a requeued attempt still
    completing): ask again shortly; no escalation clock runs."""


class SchedulerError(RecoverError):
    """Base of every adapter error."""


class SchedulerUnavailable(SchedulerError):
    """The scheduler's commands are missing or its controller does not answer."""
