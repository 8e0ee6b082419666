"""The Slurm adapter: ``SlurmAdapter`` reads squeue/sinfo/scontrol and runs rendered commands."""

from .adapter import SlurmAdapter
from .hostlist import HostlistError, expand_hostlist

__all__ = ["HostlistError", "SlurmAdapter", "expand_hostlist"]
