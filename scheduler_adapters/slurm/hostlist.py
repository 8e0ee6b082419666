"""Slurm's hostlist syntax lives in ``scheduler_adapters.hostlist`` (the engine reads it in logs too)."""

from ..hostlist import MAX_HOSTS, HostlistError, expand_hostlist

__all__ = ["MAX_HOSTS", "HostlistError", "expand_hostlist"]
