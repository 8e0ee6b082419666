"""The scheduler adapter protocol: what Recover needs to know of and ask from a scheduler.

``engine`` talks to schedulers only through this protocol; it never imports a concrete adapter
(they are looked up by name in ``scheduler_adapters.registry``).

An adapter reports job and node state, and runs already-rendered argv lists (never a shell).
Rendering the argv from the rulebook's Jinja templates is the action layer's job
(``engine/core/actions.py``); the adapter only knows how to run a command and how to read state back
to verify it.

Exceptions::

    SchedulerError            anything the adapter could not do
    ├── SchedulerUnavailable  the scheduler's commands are missing or it does not answer
    └── CommandFailed         a command ran and failed (rc != 0 or timed out)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol, Sequence, runtime_checkable

# engine's vocabulary, which adapters may import (the contract in pyproject.toml): the error tree
# and the job states in which a job holds (or is about to hold) nodes, re-exported for adapters
from engine.errors import SchedulerError, SchedulerUnavailable
from engine.facts import JOB_ACTIVE_STATES

#: the most characters of a job's comment an adapter keeps (a longer one is cut to this; Recover
#: ignores any comment longer than engine.core.jobcomment.MAX_COMMENT that holds a directive)
MAX_COMMENT_KEPT = 4096

#: job states after which it will not run again by itself (``JobInfo.ended``)
ENDED_STATES = frozenset({"CANCELLED", "COMPLETED", "FAILED"})

__all__ = [
    "JobInfo",
    "JobRecord",
    "NodeInfo",
    "CommandResult",
    "Runner",
    "SchedulerAdapter",
    "SchedulerError",
    "SchedulerUnavailable",
    "CommandFailed",
    "JOB_ACTIVE_STATES",
]


class CommandFailed(SchedulerError):
    def __init__(self, argv: Sequence[str], result: "CommandResult"):
        self.argv = list(argv)
        self.result = result
        super().__init__(f"{argv[0] if argv else '?'} failed (rc={result.rc}): {result.stderr[:200]}")


@dataclass(frozen=True)
class JobInfo:
    job_id: str
    attempt: int  # the scheduler's restart count: (job_id, attempt) identifies one attempt
    state: str  # upper case, Slurm's names: PENDING RUNNING COMPLETED FAILED NODE_FAIL TIMEOUT PREEMPTED CANCELLED ...
    reason: str = ""
    nodes: tuple[str, ...] = ()
    name: str = ""
    exit_code: int | None = None  # the program's exit status (not a raw wait status)
    signal: int | None = None
    stdout: str | None = None  # expanded paths where the scheduler can tell
    stderr: str | None = None
    excluded_nodes: tuple[str, ...] = ()
    requeue: bool = True
    user: str = ""
    partition: str = ""
    required_nodes: tuple[str, ...] = ()  # nodes the job asked for by name (-w); never excluded
    gpus: tuple[tuple[str, tuple[int, ...]], ...] = ()  # (node, GPU indexes the job holds there)
    detailed: bool = False  # required_nodes and gpus were read (the adapter's job_detail)
    #: its task layout as SLURM_TASKS_PER_NODE writes it ("2(x3),1"); "" where not certain
    tasks_per_node: str = ""
    #: the job's comment (``sbatch --comment``): its owner's text, as the scheduler holds it; at
    #: most MAX_COMMENT_KEPT characters (longer: cut, and then ignored whole by engine.core.jobcomment)
    comment: str = ""

    # What the scheduler's words mean, said here (the adapters' side) so that the engine asks
    # questions of a job instead of reading Slurm's state names and reasons itself.
    @property
    def active(self) -> bool:
        """It holds its nodes (running, completing, configuring or suspended)."""
        return self.state in JOB_ACTIVE_STATES

    @property
    def held(self) -> bool:
        """Held by a user or an admin: it will not start until released (Slurm's reason
        JobHeldUser / JobHeldAdmin)."""
        return "held" in (self.reason or "").lower()

    @property
    def ended(self) -> bool:
        """Cancelled, completed or failed: it will not run again unless someone requeues it."""
        return self.state in ENDED_STATES

    def gpus_on(self, node: str) -> tuple[int, ...] | None:
        """The GPU indexes this job holds on ``node``; None when not known."""
        if not self.detailed:
            return None
        for name, idx in self.gpus:
            if name == node:
                return idx
        return ()


@dataclass(frozen=True)
class NodeInfo:
    name: str
    state: str  # lower case base state: idle allocated mixed down drained draining ...
    flags: tuple[str, ...] = ()  # e.g. DRAIN, NOT_RESPONDING, REBOOT
    reason: str = ""
    partitions: tuple[str, ...] = ()

    @property
    def drained(self) -> bool:
        return "DRAIN" in self.flags or self.state in ("drained", "draining")

    @property
    def down(self) -> bool:
        return self.state == "down" or "NOT_RESPONDING" in self.flags


@dataclass(frozen=True)
class CommandResult:
    rc: int
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False
    duration_s: float = 0.0
    truncated: bool = False  # it printed more than the runner reads: killed, its stdout dropped


@dataclass(frozen=True)
class JobRecord:
    """One job attempt as the scheduler's accounting recorded it (``job_history``): times are epoch
    seconds, None where accounting has none (not started yet, still running)."""

    job_id: str
    attempt: int  # its place among the job's records, oldest first (a requeue makes a new one)
    state: str  # Slurm's name, upper case: REQUEUED for an attempt that was requeued
    submit_at: float | None = None
    eligible_at: float | None = None
    start_at: float | None = None
    end_at: float | None = None
    nodes: tuple[str, ...] = ()


#: the test seam: something that runs an argv list (no shell) with a timeout
Runner = Callable[[Sequence[str], float], CommandResult]


@runtime_checkable
class SchedulerAdapter(Protocol):
    name: str

    def jobs(self) -> list[JobInfo]:
        """Jobs the scheduler knows now (running, pending, and recently finished)."""

    def job(self, job_id: str) -> JobInfo | None:
        """One job, or None when the scheduler no longer knows it."""

    def nodes(self) -> list[NodeInfo]:
        """Every node with its state."""

    def jobs_on(self, nodes: Sequence[str]) -> list[JobInfo]:
        """The job attempts that hold any of ``nodes`` now (in one of ``JOB_ACTIVE_STATES``).
        Asked when a node's fault arrives before a poll has shown which job runs there; an
        adapter without it is answered from ``jobs()`` (see ``worker.jobs_on``)."""

    def node_gpu_count(self, node: str) -> int | None:
        """How many GPUs the scheduler gives ``node`` (0: none); None when it does not know the
        node. What the node agent expects NVML to find (``recover agent --expected-gpus gres``);
        the agent treats an adapter without it as one that cannot say."""

    def run(self, argv: Sequence[str], timeout: float = 30.0) -> CommandResult:
        """Run one rendered command without a shell; never raises for rc != 0."""

    def unreachable(self, output: str) -> bool:
        """Did a command that printed ``output`` fail because the scheduler's controller did not
        answer (not a verdict on the command itself)? Each scheduler words this its own way, so
        the adapter reads it; an adapter without this method is taken to never say so."""

    # Optional, not in the protocol: ``job_history(since, until, job=None) -> list[JobRecord] | None``,
    # the scheduler's own accounting of job attempts (Slurm's sacct); None where the site has no
    # accounting. Callers ask ``getattr(adapter, "job_history", None)``.
