"""What is known about the job behind a log file, and which job attempt runs on which node.

Also the readers of a log's own words about jobs and nodes: the job id a file's name gives, and
a hostlist printed in the log (bounded; malformed text gives nothing, never an error).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable

from engine.core.linetime import LineClock
from engine.core.scope import SchedulerView
from engine.facts import NODE_RE
from engine.hostlist import HostlistError, expand_hostlist as _expand_hostlist

#: the job id a log's file name gives when nothing else does (replay, unscheduled following; with a
#: scheduler, a job's files are the StdOut/StdErr paths it reports). Tried in order; docs/commands.md
#: lists the shapes. The generic one reads the last number before the extension, after a `-`, `_`
#: or `.` (or the whole name): `%x-%j.out` with a job named `123` is `123-456.out`, job 456; a
#: trailing NUMBER_NUMBER is an array task, as Slurm's `%A_%a` writes it.
_FILE_JOB = (
    re.compile(r"(?:^|[/_-])slurm-(\d{1,12})(?:_(\d{1,9}))?\.(?:out|err|log)$"),
    re.compile(r"(?:^|[/_.-])([1-9]\d{0,11})(?:_(\d{1,9}))?\.(?:out|err|log)$"),
    re.compile(r"(?:^|/)(?:job|train)[-_.]?(\d{1,12})(?:[-_.][^/]*)?\.(?:out|err|log)$"),
)
MAX_HOSTLIST = 4096


def expand_hostlist(text: str) -> list[str]:
    """``n[1-3,5],gpu07`` -> [n1, n2, n3, n5, gpu07], from log text: bounded, and a malformed
    expression or an invalid host name gives nothing rather than an error."""
    try:
        names = _expand_hostlist(text[:MAX_HOSTLIST])
    except HostlistError:
        return []
    return [n for n in names[:MAX_HOSTLIST] if NODE_RE.match(n)]


def job_from_filename(path: str) -> str | None:
    for pattern in _FILE_JOB:
        m = pattern.search(path)
        if m:
            return m.group(1) if len(m.groups()) < 2 or not m.group(2) else f"{m.group(1)}_{m.group(2)}"
    return None


@dataclass
class FileContext:
    """What is known about the job that writes one log file."""

    path: str
    source: str = "any"
    job: str | None = None
    attempt: int | None = None
    #: the job's allocation: what names the nodes the job runs on (the scheduler, the kernel log's
    #: node, a printed SLURM_JOB_NODELIST); a line that names no node of its own is about the one
    #: node of an allocation of one, and about no node otherwise
    nodes: set[str] = field(default_factory=set)
    #: hosts that printed lines of the job (NCCL's ``host:pid:tid`` prefix, SLURMD_NODENAME): nodes
    #: of the job, but no allocation. The job runs on them; that one host printed a line says
    #: nothing about which node a later line without a host is about (a slurmstepd or srun line
    #: after one host's NCCL INFO lines would otherwise be taken for that host's failure)
    hosts: set[str] = field(default_factory=set)
    last_at: float | None = None
    #: dates the file's lines: the log zone, and the year of stamps without one (linetime.py)
    dates: LineClock = field(default_factory=LineClock)
    # attempts of a log appended across restarts (replay, no scheduler): see HitConverter._edge
    nodes_attempt: int | None = None  # the attempt ``nodes`` were learned in
    started_at: float | None = None  # when the current attempt's start line was printed
    active: bool = False  # the current attempt printed evidence since its start line
    ended: bool = False  # a requeue line ended the current attempt


class ClusterContext:
    """Which job attempt ran on which node, learned from scheduler facts and context lines."""

    def __init__(self) -> None:
        self.node_job: dict[str, tuple[str, int | None, float]] = {}
        self.job_attempt: dict[str, int] = {}
        self.version = 0  # changes with every assign/release (a flood's shortcut is then rebuilt)
        #: jobs' partitions and comments, nodes' partitions: fed by the scheduler's polls only
        self.view = SchedulerView()

    def assign(self, job: str, attempt: int | None, nodes: Iterable[str], at: float) -> None:
        self.version += 1
        if attempt is not None:
            self.job_attempt[job] = max(attempt, self.job_attempt.get(job, 0))
        for n in nodes:
            self.node_job[n] = (job, attempt if attempt is not None else self.job_attempt.get(job), at)

    def release(self, job: str) -> None:
        """The job ended: its nodes no longer belong to it."""
        self.version += 1
        for node in [n for n, (j, _, _) in self.node_job.items() if j == job]:
            del self.node_job[node]

    def nodes_of(self, job: str) -> set[str]:
        return {n for n, (j, _, _) in self.node_job.items() if j == job}

    def job_on(self, node: str) -> tuple[str, int | None] | None:
        entry = self.node_job.get(node)
        return (entry[0], entry[1]) if entry else None
