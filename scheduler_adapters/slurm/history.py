"""Slurm's own history of job attempts: ``sacct``, where the site has accounting (slurmdbd).

``SlurmAdapter.job_history(since, until, job=None)`` asks::

    sacct -a -X -P -n --duplicates --noconvert -S SINCE -E UNTIL -o JobIDRaw,State,Submit,Eligible,Start,End,NodeList [-j JOB]

``--duplicates`` lists each attempt of a requeued job as its own record (the old ones end
``REQUEUED``); ``-X`` keeps the allocation, not its steps. Every field asked for is Slurm's, never
a user's (no job name, comment or path), so no field can hold the delimiter or a newline; a line
that is not exactly those seven fields in their own forms is dropped and counted, never guessed
at. ``sacct --json`` (Slurm 22.05 has it) is not used: it prints each job's whole record, user
fields included, and takes no ``-o``, so it is larger and carries what a user wrote.

Times are printed in the local time of the machine, which is ours (sacct inherits our
environment), and read back with it. What sacct prints is bounded as squeue's is (the adapter's
``max_output``).

A job's attempts are its records oldest first: attempt N is the N-th (Slurm's restart count, as
squeue gives it, counts the same requeues). A job id that a wiped controller handed out again
(its records an earlier job's) is told apart by time: a requeued attempt's record is submitted
when the one before it ended, so the job's records are cut where one is submitted more than
``CHAIN_GAP_S`` after the one before it ended, and the last run of them is the job.

No accounting (``Slurm accounting storage is disabled``, or no sacct at all) is an answer: None,
with the reason in ``accounting_unavailable``. slurmdbd not answering is an outage
(SchedulerUnavailable), as slurmctld not answering is.
"""

from __future__ import annotations

import logging
import re
import time
from typing import TYPE_CHECKING

from ..base import CommandFailed, CommandResult, JobRecord, SchedulerUnavailable
from .hostlist import HostlistError, expand_hostlist
from .runner import readable, unreadable

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["CHAIN_GAP_S", "SACCT_FIELDS", "SacctHistory", "parse_sacct"]

logger = logging.getLogger(__name__)

SACCT_FIELDS = ("JobIDRaw", "State", "Submit", "Eligible", "Start", "End", "NodeList")
#: a requeued attempt's record is submitted when the one before it ends; past this gap, a job id
#: that repeats is another job's
CHAIN_GAP_S = 60.0
_ID = re.compile(r"[0-9]{1,12}")
_STATE = re.compile(r"([A-Z][A-Z_]{1,31})(?: by [0-9]{1,10})?")
_TIME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}")
_NO_TIME = frozenset({"Unknown", "None", ""})
_NO_NODES = frozenset({"None assigned", "(null)", ""})
_HOSTLIST = re.compile(r"[A-Za-z0-9][A-Za-z0-9._,\[\]-]{0,4095}")
_DISABLED = re.compile(r"accounting storage is disabled", re.IGNORECASE)
#: slurmdbd (or its database) not answering
_DBD_DOWN = re.compile(
    r"Problem talking to the database|Connection refused|Socket timed out|slurmdbd.*(?:not|n't) respond|"
    r"Unable to contact slurm controller|Zero Bytes were transmitted",
    re.IGNORECASE,
)


def _stamp(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t))


def _time(text: str) -> float | None:
    if text in _NO_TIME:
        return None
    if not _TIME.fullmatch(text):
        raise ValueError(f"not a sacct time: {text[:40]!r}")
    return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))


def _line(line: str) -> tuple[str, str, float | None, float | None, float | None, float | None, tuple[str, ...]]:
    fields = line.split("|")
    if len(fields) != len(SACCT_FIELDS):
        raise ValueError(f"{len(fields)} fields, not {len(SACCT_FIELDS)}")
    job, state, submit, eligible, start, end, nodes = fields
    if not _ID.fullmatch(job):
        raise ValueError(f"not a job id: {job[:40]!r}")
    m = _STATE.fullmatch(state)
    if m is None:
        raise ValueError(f"not a job state: {state[:40]!r}")
    if nodes not in _NO_NODES and not _HOSTLIST.fullmatch(nodes):
        raise ValueError(f"not a node list: {nodes[:40]!r}")
    hosts = () if nodes in _NO_NODES else tuple(expand_hostlist(nodes))
    return job, m.group(1), _time(submit), _time(eligible), _time(start), _time(end), hosts


def _chain(rows: list[tuple]) -> list[tuple]:
    """The job's last run of records (see the module's text), oldest first."""
    rows = sorted(rows, key=lambda r: (r[2] is None, r[2] or 0.0, r[4] or 0.0))
    cut = 0
    for i in range(1, len(rows)):
        ended, submitted = rows[i - 1][5], rows[i][2]
        if ended is not None and submitted is not None and submitted > ended + CHAIN_GAP_S:
            cut = i
    return rows[cut:]


def parse_sacct(stdout: str) -> tuple[list[JobRecord], int]:
    """``sacct -P -n`` text of SACCT_FIELDS → the records (each job's attempts numbered oldest
    first), and how many lines were dropped as not in their form."""
    by_job: dict[str, list[tuple]] = {}
    dropped = 0
    for line in stdout.split("\n"):
        if not line.strip():
            continue
        try:
            if unreadable(line):
                raise ValueError("bytes that are not UTF-8")
            row = _line(line)
        except (ValueError, HostlistError) as exc:
            dropped += 1
            if dropped <= 3:
                logger.warning("sacct: dropped a line not in its form (%s): %.80s", readable(str(exc)), readable(line))
            continue
        by_job.setdefault(row[0], []).append(row)
    records = []
    for job, rows in by_job.items():
        for n, (_, state, submit, eligible, start, end, nodes) in enumerate(_chain(rows)):
            records.append(JobRecord(job, n, state, submit, eligible, start, end, nodes))
    return records, dropped


class SacctHistory:
    """``job_history()`` for SlurmAdapter (a mixin: it runs sacct through the adapter's runner)."""

    #: why the last ``job_history()`` was None (no accounting); "" when it answered
    accounting_unavailable: str = ""

    def _run(self, argv: Sequence[str], timeout: float) -> CommandResult:  # SlurmAdapter's
        raise NotImplementedError

    def job_history(self, since: float | None, until: float, job: str | None = None) -> list[JobRecord] | None:
        """Every job attempt sacct knows in [since, until] (since None: from the epoch), or one
        job's; None where this Slurm has no accounting (``accounting_unavailable`` says why).
        Raises SchedulerUnavailable when slurmdbd does not answer or prints too much, CommandFailed
        when sacct fails otherwise."""
        if job is not None and not _ID.fullmatch(str(job)):
            raise ValueError(f"not a Slurm job id: {str(job)[:40]!r}")
        argv = ["sacct", "-a", "-X", "-P", "-n", "--duplicates", "--noconvert"]
        argv += ["-S", _stamp(since if since is not None else 0.0), "-E", _stamp(until)]
        argv += ["-o", ",".join(SACCT_FIELDS)] + (["-j", str(job)] if job is not None else [])
        timeout = float(getattr(self, "_timeout", 30.0))
        result = self._run(argv, timeout)
        self.accounting_unavailable = ""
        if result.rc in (126, 127):
            self.accounting_unavailable = f"no sacct here: {readable(result.stderr.strip())[:200]}"
            return None
        if result.timed_out:
            raise SchedulerUnavailable(f"sacct timed out after {timeout:g} s")
        limit = int(getattr(self, "_max_output", 0)) or None
        if result.truncated or (limit is not None and len(result.stdout) > limit):
            raise SchedulerUnavailable(f"sacct printed more than {limit} bytes, the adapter's max_output: not read")
        if result.rc != 0:
            said = readable(result.stderr.strip() or result.stdout.strip())
            if _DISABLED.search(said):
                self.accounting_unavailable = f"sacct: {said[:200]}"
                return None
            if _DBD_DOWN.search(said):
                raise SchedulerUnavailable(f"sacct: {said[:200]}")
            raise CommandFailed(argv, result)
        records, dropped = parse_sacct(result.stdout)
        if dropped:
            logger.warning("sacct: %d line(s) not in their form were dropped", dropped)
        return [r for r in records if job is None or r.job_id == str(job)]
