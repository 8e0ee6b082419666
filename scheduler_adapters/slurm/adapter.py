"""Slurm behind the scheduler adapter protocol.

Usage::

    adapter = SlurmAdapter()                       # runs squeue, sinfo, scontrol
    running = [j for j in adapter.jobs() if j.state == "RUNNING"]
    adapter.run(["scontrol", "update", "NodeName=n2", "State=DRAIN", "Reason=xid 79"])
    attempts = adapter.job_history(since, until)       # sacct (history.py); None: no accounting

Job state comes from ``squeue --json`` (openapi v0.0.38 in Slurm 22.05; later shapes are read
too), node state from ``sinfo --json``. Two 22.05 quirks are mended here: ``exit_code`` is a raw
wait status (256 means exit 1), and ``standard_output`` is the unexpanded pattern (``%j.out``),
expanded here as scontrol expands it (%j %u %x %A %a). The GPU indexes a job holds come from its
``gres_detail``. No scontrol text is read while JSON works: in that text, user-set fields can pass
for structure (text.py). Where ``--json`` is not understood, ``scontrol show job -o`` and
``sinfo -N -o`` text are parsed instead, each job record only where it is unambiguous.

Tests pass ``runner=``: a plain function ``(argv, timeout) -> CommandResult``. ``snapshot()``:
the actuator's reads of one step share one squeue and one sinfo (snapshot.py). What Slurm prints holds what users set, in any bytes (runner.py): a job name, reason or node
name that was not UTF-8 reaches JobInfo with U+FFFD in place of each such byte, and an output
path that was not UTF-8 is not followed (None, with a warning) rather than followed under a
name that is not the file's. Nothing a user sets makes a poll fail.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NoReturn

from ..base import (
    JOB_ACTIVE_STATES,
    MAX_COMMENT_KEPT,
    CommandFailed,
    CommandResult,
    JobInfo,
    NodeInfo,
    Runner,
    SchedulerUnavailable,
)
from .history import SacctHistory
from .hostlist import HostlistError, expand_hostlist
from .runner import DEFAULT_MAX_OUTPUT, readable, subprocess_runner, unreadable
from .nodes import NULLS, clean, node_from_json, nodes_from_sinfo_text
from .layout import detail_cpus, json_cpus, tasks_layout
from .snapshot import SnapshotRunner
from .text import detail_pairs, gpu_map, node_gpu_count, parse_gpu_detail, parse_scontrol_line, scontrol_records

__all__ = ["SlurmAdapter", "parse_gpu_detail", "parse_scontrol_line", "split_wait_status", "subprocess_runner"]

logger = logging.getLogger(__name__)

#: states after which a job attempt has an exit status
FINISHED_STATES = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "OUT_OF_MEMORY",
        "BOOT_FAIL",
        "DEADLINE",
        "SPECIAL_EXIT",
    }
)

_JOB_ID = re.compile(r"[0-9]+(?:[_+][0-9]+)?")
# what the commands print when the option itself is unknown (a Slurm older than 21.08)
_NO_JSON = re.compile(r"unrecognized option|invalid option|unknown option", re.IGNORECASE)
#: what a Slurm command prints when slurmctld does not answer: not a verdict on the command
_UNREACHABLE = re.compile(
    r"Unable to contact slurm controller|Socket timed out|Could not establish a configuration|"
    r"Zero Bytes were transmitted or received|Connection refused",
    re.IGNORECASE,
)
# one node name, as the controller asks about it (never a hostlist, never an option)
_NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
# the states in which a job holds its nodes (JOB_ACTIVE_STATES), as squeue --states spells them
_HOLDING_STATES = ",".join(sorted(JOB_ACTIVE_STATES))


def split_wait_status(status: int) -> tuple[int, int | None]:
    """A raw wait status → (exit code, signal or None): 256 → (1, None), 9 → (0, 9)."""
    signal = status & 0x7F
    return (status >> 8) & 0xFF, (signal or None)


class SlurmAdapter(SacctHistory):
    """Jobs, nodes and commands of one Slurm cluster, through its command-line tools."""

    name = "slurm"

    def __init__(
        self,
        runner: Runner | None = None,
        timeout: float = 30.0,
        use_json: bool = True,
        max_output: int = DEFAULT_MAX_OUTPUT,
    ) -> None:
        """``use_json=False`` reads text output only; otherwise ``--json`` is tried first and
        text is read from then on if this Slurm does not know the option. ``max_output``: the
        most bytes one command may print (a query past it fails: SchedulerUnavailable)."""
        self._snap = SnapshotRunner(runner or functools.partial(subprocess_runner, max_output=max_output))
        self._runner: Runner = self._snap
        self._timeout = timeout
        self._max_output = max_output
        # job ids whose output path was not UTF-8, already warned about (bounded)
        self._warned: set[str] = set()
        # None: --json not tried yet; True: it works; False: text output only
        self._json: bool | None = None if use_json else False

    # -- the protocol -------------------------------------------------------------------------

    def run(self, argv: Sequence[str], timeout: float = 30.0) -> CommandResult:
        result = self._run(argv, timeout)
        # what callers log and journal: never a lone surrogate (sqlite and logs refuse them)
        return dataclasses.replace(result, stdout=readable(result.stdout), stderr=readable(result.stderr))

    def snapshot(self) -> contextlib.AbstractContextManager[None]:
        return self._snap.snapshot()  # see the module's docstring

    def unreachable(self, output: str) -> bool:
        """Did the command fail because slurmctld did not answer (its own messages for that)?"""
        return bool(_UNREACHABLE.search(output or ""))

    def _run(self, argv: Sequence[str], timeout: float) -> CommandResult:
        """The runner's result as it is: stdout may hold undecodable bytes (surrogateescape)."""
        if isinstance(argv, (str, bytes)) or not argv:
            raise TypeError("argv must be a non-empty list of strings (no shell is used)")
        if not all(isinstance(a, str) for a in argv):
            raise TypeError(f"every argv element must be a str: {argv!r}")
        result = self._runner(list(argv), timeout)
        logger.debug("ran %s: rc=%s in %.2fs", argv, result.rc, result.duration_s)
        return result

    def jobs(self) -> list[JobInfo]:
        if self._json is not False:
            records = self._squeue_json()
            if records is not None:
                return self._jobs_from_json(records)
        return [_job_from_scontrol(f) for f, _ in self._scontrol_jobs(None)]

    def job(self, job_id: str) -> JobInfo | None:
        job_id = str(job_id)
        if not _JOB_ID.fullmatch(job_id):
            raise ValueError(f"not a Slurm job id: {job_id!r}")
        if self._json is not False:
            records = self._squeue_json()
            if records is not None:
                found = self._jobs_from_json(_mine(records, job_id))
                return found[0] if found else None
        fields = self._scontrol_jobs(job_id)
        return _job_from_scontrol(fields[0][0]) if fields else None

    def job_detail(self, job_id: str) -> JobInfo | None:
        """One job as it is right now, with the nodes it requires (``-w``) and the GPU indexes
        it holds on each node: from ``squeue --json`` (its gres_detail), or where Slurm has no
        JSON from ``scontrol show job -d -o``. What the actuator reads immediately before
        acting; raises SchedulerUnavailable when Slurm does not answer, CommandFailed when its
        answer is ambiguous (text a user-set field could have written)."""
        job_id = str(job_id)
        if not _JOB_ID.fullmatch(job_id):
            raise ValueError(f"not a Slurm job id: {job_id!r}")
        if self._json is not False:
            records = self._squeue_json()
            if records is not None:
                mine = _mine(records, job_id)
                found = self._jobs_from_json(mine[:1], detail=True)
                return found[0] if found else None
        argv = ["scontrol", "show", "job", "-d", "-o", job_id]
        result = self._query(argv)
        if result.rc != 0:
            if "Invalid job id" in result.stderr:
                return None
            _raise_failed(argv, result)
        parsed = scontrol_records(result.stdout)
        if not parsed and any(line.startswith("JobId=") for line in result.stdout.splitlines()):
            raise CommandFailed(argv, _with_stderr(result, "its record is ambiguous (see the warning logged)"))
        return _job_from_scontrol(parsed[0][0], parsed[0][1]) if parsed else None

    def jobs_on(self, nodes: Iterable[str]) -> list[JobInfo]:
        """The job attempts that hold any of ``nodes`` right now (running, completing,
        configuring, suspended): what the controller asks when a node's fault arrives before a
        poll has shown the job there. slurmctld is asked for those nodes and states only (Slurm
        22.05 ignores both filters with ``--json``, so they are applied here too)."""
        wanted = {str(n) for n in nodes}
        bad = sorted(n for n in wanted if not _NODE_NAME.fullmatch(n))
        if bad:
            raise ValueError(f"not a node name: {bad[0][:40]!r}")
        if not wanted:
            return []
        records = None
        if self._json is not False:
            argv = ["squeue", "--json", f"--nodelist={','.join(sorted(wanted))}", f"--states={_HOLDING_STATES}"]
            data = self._query_json(argv)
            records = None if data is None else list(data.get("jobs") or [])
        # read as a poll reads them; without --json, the text of every job (scontrol)
        found = self._jobs_from_json(records) if records is not None else self.jobs()
        return [j for j in found if j.state in JOB_ACTIVE_STATES and wanted & set(j.nodes)]

    def nodes(self) -> list[NodeInfo]:
        if self._json is not False:
            data = self._query_json(["sinfo", "--json"])
            if data is not None:
                return [node_from_json(n) for n in data.get("nodes", [])]
        return self._nodes_from_text()

    def node_gpu_count(self, node: str) -> int | None:
        """How many GPUs the node's configured GRES gives it (0: none); None when Slurm does not
        know the node. From ``sinfo -n NODE -o '%N|%G'``: its name and GRES, which the site's
        configuration sets and no user does (no scontrol record, whose user fields can pass for
        structure). Raises SchedulerUnavailable when Slurm does not answer."""
        node = str(node)
        if not _NODE_NAME.fullmatch(node):
            raise ValueError(f"not a node name: {node[:40]!r}")
        argv = ["sinfo", "-h", "-N", "-n", node, "-o", "%N|%G"]
        result = self._query(argv)
        if result.rc != 0:
            _raise_failed(argv, result)
        return node_gpu_count(result.stdout, node)

    # -- queries ------------------------------------------------------------------------------

    def _query(self, argv: list[str]) -> CommandResult:
        result = self._run(argv, self._timeout)
        if result.rc == 127:
            raise SchedulerUnavailable(f"{argv[0]} not found: is Slurm installed? ({result.stderr.strip()})")
        if result.timed_out:
            raise SchedulerUnavailable(f"{argv[0]} timed out after {self._timeout:g} s")
        if result.truncated or len(result.stdout) > self._max_output:
            raise SchedulerUnavailable(
                f"{argv[0]} printed more than {self._max_output} bytes, the adapter's max_output: not read"
            )
        return result

    def _query_json(self, argv: list[str]) -> dict[str, Any] | None:
        """Parsed JSON, or None when this Slurm has no --json (remembered)."""
        result = self._query(argv)
        if result.rc != 0:
            if _NO_JSON.search(result.stderr):
                logger.info("%s has no --json here; falling back to text output", argv[0])
                self._json = False
                return None
            _raise_failed(argv, result)
        try:
            data = json.loads(result.stdout)
        except ValueError as exc:
            raise CommandFailed(argv, _with_stderr(result, f"output is not JSON: {exc}")) from None
        if not isinstance(data, dict):
            raise CommandFailed(argv, _with_stderr(result, "JSON output is not an object"))
        errors = [e for e in data.get("errors") or [] if e]
        if errors:
            # 22.05 exits 0 with an `errors` entry (and no jobs) while slurmctld is away: that is
            # an outage, never an empty cluster
            raise SchedulerUnavailable(f"{argv[0]} reported: {_error_text(errors[0])}")
        self._json = True
        return data

    def _squeue_json(self) -> list[dict[str, Any]] | None:
        data = self._query_json(["squeue", "--json", "--states=all"])
        return None if data is None else list(data.get("jobs") or [])

    def _scontrol_jobs(self, job_id: str | None) -> list[tuple[dict[str, str], str]]:
        """``scontrol show job -o [ID]`` as (fields, GPU detail) of each unambiguous record; []
        when the job is unknown."""
        argv = ["scontrol", "show", "job", "-o"] + ([job_id] if job_id else [])
        result = self._query(argv)
        if result.rc != 0:
            if "Invalid job id" in result.stderr:
                return []
            _raise_failed(argv, result)
        return scontrol_records(result.stdout)

    def _jobs_from_json(self, records: list[dict[str, Any]], detail: bool = False) -> list[JobInfo]:
        """JobInfo for each record (with its GPU map when ``detail``); a broken record is skipped."""
        jobs = []
        for record in records:
            self._warn_unreadable_paths(record)
            try:
                jobs.append(_job_from_json(record, detail))
            except (HostlistError, TypeError, ValueError) as exc:
                logger.warning("skipping job record %s: %s", readable(str(record.get("job_id"))), readable(str(exc)))
        return jobs

    def _warn_unreadable_paths(self, record: Mapping[str, Any]) -> None:
        paths = [_log_path(record, "standard_output"), _log_path(record, "standard_error")]
        if not any(unreadable(p) for p in paths):
            return
        job = readable(str(_num(record.get("job_id"))))
        if job in self._warned:
            return
        if len(self._warned) >= 10_000:
            self._warned.clear()
        self._warned.add(job)
        logger.warning("job %s: its output path is not UTF-8; its log is not followed", job)

    def _nodes_from_text(self) -> list[NodeInfo]:
        argv = ["sinfo", "-N", "-h", "-o", "%N|%T|%P|%E"]
        result = self._query(argv)
        if result.rc != 0:
            _raise_failed(argv, result)
        return nodes_from_sinfo_text(result.stdout)


# -- parsing (pure functions) -----------------------------------------------------------------


def _raise_failed(argv: list[str], result: CommandResult) -> NoReturn:
    text = result.stderr + result.stdout
    if "Unable to contact slurm controller" in text or "Could not establish a configuration" in text:
        raise SchedulerUnavailable(f"Slurm does not answer: {result.stderr.strip()[:200]}")
    raise CommandFailed(argv, result)


def _error_text(error: Any) -> str:
    if isinstance(error, Mapping):
        return readable(str(error.get("description") or error.get("error") or error))[:200]
    return readable(str(error))[:200]


def _with_stderr(result: CommandResult, message: str) -> CommandResult:
    return CommandResult(result.rc, result.stdout, message, result.timed_out, result.duration_s)


def _num(value: Any) -> Any:
    """Unwrap later openapi numbers ({"set": true, "number": 3}); None when unset."""
    if isinstance(value, Mapping):
        if not value.get("set", True) or value.get("infinite"):
            return None
        return value.get("number")
    return value


def _first_word(value: Any) -> str:
    """A state that is a word (v0.0.38) or a list of words (later versions)."""
    if isinstance(value, (list, tuple)):
        return str(value[0]) if value else ""
    return str(value or "")


def _hosts(value: Any) -> tuple[str, ...]:
    return tuple(expand_hostlist(value if isinstance(value, str) else None))


def _record_ids(record: Mapping[str, Any]) -> set[str]:
    """The names a job answers to: 17, and 12_5 (array task) or 12+1 (het component)."""
    ids = {str(_num(record.get("job_id")))}
    for first, second, sep in (
        ("array_job_id", "array_task_id", "_"),
        ("het_job_id", "het_job_offset", "+"),
    ):
        lead, index = _num(record.get(first)), _num(record.get(second))
        if lead and index is not None:
            ids.add(f"{lead}{sep}{index}")
    return ids


def _mine(records: list[dict[str, Any]], job_id: str) -> list[dict[str, Any]]:
    """The records of one job (22.05 ignores squeue -j with --json, so the filtering is ours)."""
    return [r for r in records if job_id in _record_ids(r)]


# a filename pattern's replacements, as scontrol expands them: %j %u %x %A %a; any other (%N,
# %n, %t, %s, %J, a width as in %5j) is left, so the path stays unknown (slurmd writes the file)
_FILENAME_SPEC = re.compile(r"%([jxuAa])")
_NO_VAL = "4294967294"  # %a of a job that is no array task, as Slurm prints it


def _log_path(record: Mapping[str, Any], key: str) -> str:
    """A job's output path from its JSON record: the filename pattern expanded as scontrol
    does, relative to its working folder, Slurm's default for a batch job given no -o; "" when
    it has none (a job that is no batch job). From JSON, not from scontrol's text, where a
    newline in a user-set field can forge another job's record and so its log's path."""
    pattern = str(record.get(key) or "")
    if not pattern:
        if key == "standard_error" or record.get("batch_flag") is False:
            return ""
        array = _num(record.get("array_task_id")) is not None and _num(record.get("array_job_id"))
        pattern = "slurm-%A_%a.out" if array else "slurm-%j.out"
    if "\\" in pattern:
        return ""  # no expansion at all where there is a backslash: not worth guessing
    job = str(_num(record.get("job_id")))
    lead = _num(record.get("array_job_id"))
    task = _num(record.get("array_task_id"))
    values = {
        "j": job,
        "x": str(record.get("name") or ""),
        "u": str(record.get("user_name") or ""),
        "A": str(lead) if lead else job,
        "a": str(task) if task is not None else _NO_VAL,
    }
    path = _FILENAME_SPEC.sub(lambda m: values[m.group(1)], pattern)
    cwd = str(record.get("current_working_directory") or "")
    if not path.startswith("/") and cwd:
        path = cwd.rstrip("/") + "/" + path
    return path if path.startswith("/") else ""  # never relative to wherever Recover runs


def _json_gpus(record: Mapping[str, Any]) -> tuple[tuple[tuple[str, tuple[int, ...]], ...], bool]:
    """(the GPU indexes the job holds on each node, whether they are known), from its record's
    gres_detail: one entry per allocated node, in the order of job_resources.allocated_nodes."""
    detail = record.get("gres_detail") or []
    resources = record.get("job_resources") or {}
    allocated = resources.get("allocated_nodes") if isinstance(resources, Mapping) else None
    names: list[str] = []
    if isinstance(allocated, list):
        names = [str(n.get("nodename") or n.get("name") or "") for n in allocated if isinstance(n, Mapping)]
    elif record.get("nodes"):
        names = list(_hosts(record.get("nodes")))
    if not detail:
        return (), True  # no GRES held anywhere (or the job holds no nodes)
    if not isinstance(detail, list) or len(detail) != len(names) or not all(names):
        return (), False  # not one entry per node: which GPUs are where is not known
    return gpu_map(zip(names, (str(d) for d in detail), strict=True)), True


def _exit_status(record: Mapping[str, Any]) -> tuple[int | None, int | None]:
    raw = record.get("exit_code")
    if isinstance(raw, Mapping):  # v0.0.39+: {"return_code": ..., "signal": {"id": ...}}
        code = _num(raw.get("return_code"))
        sig = _num((raw.get("signal") or {}).get("id"))
        return code, (sig or None)
    raw = _num(raw)
    return split_wait_status(int(raw)) if raw is not None else (None, None)


def _safe_job(job: JobInfo) -> JobInfo:
    """``job`` with nothing undecodable left in it: text fields with U+FFFD for each byte that
    was not UTF-8, and an output path that was not UTF-8 as unknown (None): a path with U+FFFD
    in it would name another file, and one with surrogates cannot be stored."""
    changes: dict[str, Any] = {}
    for field in dataclasses.fields(job):
        value = getattr(job, field.name)
        if field.name in ("stdout", "stderr"):
            if value is not None and unreadable(value):
                changes[field.name] = None
        elif isinstance(value, str) and unreadable(value):
            changes[field.name] = readable(value)
        elif field.name != "gpus" and isinstance(value, tuple) and any(unreadable(v) for v in value):
            changes[field.name] = tuple(readable(v) for v in value)
        elif field.name == "gpus" and any(unreadable(node) for node, _ in value):
            changes[field.name] = tuple((readable(node), idx) for node, idx in value)
    return dataclasses.replace(job, **changes) if changes else job


def _job_from_json(record: Mapping[str, Any], detail: bool = False) -> JobInfo:
    state = _first_word(record.get("job_state")).upper()
    exit_code, signal = _exit_status(record) if state in FINISHED_STATES else (None, None)
    stdout = _log_path(record, "standard_output")
    stderr = _log_path(record, "standard_error") or stdout  # no -e: stderr goes where stdout goes
    gpus, known = _json_gpus(record) if detail else ((), False)
    nodes = _hosts(record.get("nodes"))
    layout = tasks_layout(
        json_cpus(record, nodes), record.get("tasks"), record.get("cpus_per_task"), record.get("tasks_per_node")
    )
    return _safe_job(
        JobInfo(
            job_id=str(_num(record["job_id"])),
            attempt=int(_num(record.get("restart_cnt")) or 0),
            state=state,
            reason=clean(record.get("state_reason")),
            nodes=nodes,
            name=str(record.get("name") or ""),
            exit_code=exit_code,
            signal=signal,
            stdout=None if "%" in stdout or not stdout else stdout,
            stderr=None if "%" in stderr or not stderr else stderr,
            excluded_nodes=_hosts(record.get("excluded_nodes")),
            requeue=bool(record.get("requeue", True)),
            user=str(record.get("user_name") or ""),
            partition=str(record.get("partition") or ""),
            required_nodes=_hosts(clean(record.get("required_nodes")) or None),
            gpus=gpus,
            detailed=known,
            tasks_per_node=layout,
            comment=_comment(record.get("comment")),
        )
    )


def _job_from_scontrol(fields: Mapping[str, str], detail: str | None = None) -> JobInfo:
    """A job from a record scontrol_records accepted; ``detail``: its GPU detail (``-d``)."""
    state = fields.get("JobState", "").upper()
    exit_code: int | None = None
    signal: int | None = None
    if state in FINISHED_STATES:
        code, _, sig = fields.get("ExitCode", "0:0").partition(":")
        exit_code = int(code) if code.isdigit() else None
        signal = int(sig) if sig.isdigit() and int(sig) else None
    stdout = clean(fields.get("StdOut")) or None
    nodes = _hosts(clean(fields.get("NodeList")))
    num = lambda key: int(v) if (v := fields.get(key, "")).isdigit() else None
    # per-node CPUs: the -d detail's, or a one-node job's all (several nodes without -d: not known)
    one = [num("NumCPUs") or 0] if len(nodes) == 1 else None
    cpus = detail_cpus(detail_pairs(detail), nodes, num("NumCPUs")) if detail else one
    layout = tasks_layout(cpus, num("NumTasks"), num("CPUs/Task"))
    return _safe_job(
        JobInfo(
            job_id=fields["JobId"],
            attempt=int(fields.get("Restarts", "0") or 0),
            state=state,
            reason=clean(fields.get("Reason")),
            nodes=nodes,
            name=clean(fields.get("JobName")),
            exit_code=exit_code,
            signal=signal,
            stdout=stdout,
            stderr=clean(fields.get("StdErr")) or stdout,
            excluded_nodes=_hosts(clean(fields.get("ExcNodeList"))),
            requeue=fields.get("Requeue", "1") != "0",
            user=fields.get("UserId", "").split("(", 1)[0],
            partition=clean(fields.get("Partition")),
            required_nodes=_hosts(clean(fields.get("ReqNodeList")) or None),
            gpus=parse_gpu_detail(detail) if detail else (),
            detailed=detail is not None,
            tasks_per_node=layout,
            comment=_comment(fields.get("Comment")),
        )
    )


def _comment(value: Any) -> str:
    """A job's comment as its owner wrote it (Slurm prints ``(null)`` for none), bounded; a
    comment that is cut still holds more than the engine reads (it is then ignored whole)."""
    text = value if isinstance(value, str) else ""
    return "" if text in NULLS else text[: MAX_COMMENT_KEPT + 1]
