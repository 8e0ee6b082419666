"""Slurm's hostlist syntax lives in ``engine.hostlist`` (the engine reads it in job logs too)."""

from engine.hostlist import MAX_HOSTS, HostlistError, expand_hostlist

__all__ = ["MAX_HOSTS", "HostlistError", "expand_hostlist"]
