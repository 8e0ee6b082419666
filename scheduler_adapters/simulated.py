"""A SIMULATED cluster: an in-memory stand-in for Slurm, for the demo and for unit tests.

It is not Slurm. It keeps nodes and jobs in dictionaries, schedules pending jobs onto idle
nodes when ``tick()`` is called, and understands the small subset of Slurm commands that the
default rulebook's action templates render (``scontrol update NodeName=... State=DRAIN|RESUME
Reason=...``, ``scontrol update JobId=... ExcNodeList=...``, ``scontrol requeue|hold|release
ID``, ``scancel ID``, ``logger ...``), so the same rendered argv can be "run" here. Every command
is recorded in ``history``. Tests that claim Slurm behaviour use the real Slurm instead.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import Mapping, Sequence

from engine.clock import SYSTEM, Clock

from .base import JOB_ACTIVE_STATES, CommandResult, JobInfo, NodeInfo

__all__ = ["SimulatedCluster", "SimJob"]


@dataclass
class SimJob:
    job_id: str
    name: str
    nodes_wanted: int
    state: str = "PENDING"
    attempt: int = 0
    nodes: tuple[str, ...] = ()
    excluded: tuple[str, ...] = ()
    reason: str = ""
    exit_code: int | None = None
    held: bool = False
    stdout: str | None = None
    requeue: bool = True  # --no-requeue: False
    required: tuple[str, ...] = ()  # -w
    partition: str = "debug"
    comment: str = ""  # --comment


class SimulatedCluster:
    name = "simulated"
    template_scheduler = "slurm"  # it understands the Slurm command templates

    def __init__(
        self,
        nodes: Sequence[str] = ("n1", "n2", "n3", "n4"),
        clock: Clock = SYSTEM,
        gpus: int | None = None,
        partitions: Mapping[str, Sequence[str]] | None = None,
    ):
        """``gpus``: the GPUs each node has (``node_gpu_count``); None: the simulation does not say.
        ``partitions``: partition -> its nodes (default: one partition, debug, of every node); a
        job runs on nodes of its own partition."""
        self.clock = clock
        self.partitions = {p: tuple(ns) for p, ns in (partitions or {"debug": tuple(nodes)}).items()}
        self.gpus = gpus
        self._nodes: dict[str, dict] = {n: {"state": "idle", "flags": set(), "reason": ""} for n in nodes}
        self._jobs: dict[str, SimJob] = {}
        self._ids = itertools.count(1000)
        self.history: list[list[str]] = []

    # -- driving the simulation -------------------------------------------------------------
    def submit(
        self,
        name: str,
        nodes: int = 1,
        stdout: str | None = None,
        *,
        requeue: bool = True,
        required: Sequence[str] = (),
        excluded: Sequence[str] = (),
        partition: str = "debug",
        comment: str = "",
    ) -> str:
        job_id = str(next(self._ids))
        self._jobs[job_id] = SimJob(
            job_id,
            name,
            nodes,
            stdout=stdout,
            requeue=requeue,
            required=tuple(required),
            excluded=tuple(excluded),
            partition=partition,
            comment=comment,
        )
        self.tick()
        return job_id

    def tick(self) -> None:
        """Start pending jobs on idle, undrained, not-excluded nodes."""
        for job in self._jobs.values():
            if job.state != "PENDING" or job.held:
                continue
            free = [
                n
                for n, s in self._nodes.items()
                if s["state"] == "idle"
                and "DRAIN" not in s["flags"]
                and n not in job.excluded
                and n in self.partitions.get(job.partition, ())
            ]
            if len(free) >= job.nodes_wanted:
                job.nodes = tuple(free[: job.nodes_wanted])
                job.state, job.reason = "RUNNING", ""
                for n in job.nodes:
                    self._nodes[n]["state"] = "allocated"

    def fail(self, job_id: str, exit_code: int = 1, state: str = "FAILED") -> None:
        job = self._jobs[job_id]
        job.state, job.exit_code = state, exit_code
        self._release(job)

    def kill_node(self, node: str) -> None:
        self._nodes[node]["state"] = "down"
        self._nodes[node]["flags"].add("NOT_RESPONDING")
        self._nodes[node]["reason"] = "Not responding"
        for job in self._jobs.values():
            if job.state == "RUNNING" and node in job.nodes:
                job.state, job.reason = "NODE_FAIL", "NodeDown"
                self._release(job)

    def _release(self, job: SimJob) -> None:
        for n in job.nodes:
            if self._nodes[n]["state"] == "allocated":
                self._nodes[n]["state"] = "idle"

    # -- the adapter protocol ---------------------------------------------------------------
    def jobs(self) -> list[JobInfo]:
        return [self._info(j) for j in self._jobs.values()]

    def job(self, job_id: str) -> JobInfo | None:
        j = self._jobs.get(str(job_id))
        return self._info(j) if j else None

    accounting_unavailable = "the simulated cluster keeps no accounting"

    def job_history(self, since: float | None, until: float, job: str | None = None) -> None:
        """No accounting here: None (``accounting_unavailable`` says so)."""
        return None

    def jobs_on(self, nodes: Sequence[str]) -> list[JobInfo]:
        wanted = set(nodes)
        return [self._info(j) for j in self._jobs.values() if j.state in JOB_ACTIVE_STATES and wanted & set(j.nodes)]

    def _info(self, j: SimJob) -> JobInfo:
        return JobInfo(
            job_id=j.job_id,
            attempt=j.attempt,
            state=j.state,
            reason="JobHeldUser" if j.held else j.reason,
            nodes=j.nodes,
            name=j.name,
            exit_code=j.exit_code,
            stdout=j.stdout,
            stderr=j.stdout,
            excluded_nodes=j.excluded,
            requeue=j.requeue,
            required_nodes=j.required,
            partition=j.partition,
            comment=j.comment,
        )

    def nodes(self) -> list[NodeInfo]:
        out = []
        for name, s in self._nodes.items():
            state = s["state"]
            if "DRAIN" in s["flags"]:
                state = "draining" if state == "allocated" else "drained"
            parts = tuple(p for p, members in self.partitions.items() if name in members)
            out.append(NodeInfo(name, state, tuple(sorted(s["flags"])), s["reason"], parts))
        return out

    def node_gpu_count(self, node: str) -> int | None:
        return self.gpus if node in self._nodes else None

    def unreachable(self, output: str) -> bool:
        return False  # the simulation's controller always answers

    def run(self, argv: Sequence[str], timeout: float = 30.0) -> CommandResult:
        argv = list(argv)
        self.history.append(argv)
        try:
            out = self._command(argv)
        except (KeyError, ValueError, IndexError) as exc:
            return CommandResult(1, "", f"simulated {argv[0] if argv else '?'}: {exc}")
        return CommandResult(0, out or "", "")

    def _command(self, argv: list[str]) -> str:
        prog, args = argv[0], argv[1:]
        if prog == "logger":
            return ""
        if prog == "scancel":
            job = self._jobs[args[-1]]
            job.state = "CANCELLED"
            self._release(job)
            return ""
        if prog != "scontrol":
            raise ValueError(f"unknown command {prog!r}")
        verb, rest = args[0], args[1:]
        if verb in ("requeue", "requeuehold", "hold", "release") and rest:
            # scontrol takes the job as `123` or `JobId=123` (seen on Slurm 22.05)
            rest = rest[:-1] + [re.sub(r"(?i)^jobid=", "", rest[-1])]
        if verb in ("requeue", "requeuehold"):
            job = self._jobs[rest[-1]]
            if job.state == "PENDING":
                raise ValueError(f"Job is pending execution for job {job.job_id}")
            self._release(job)
            job.state, job.attempt, job.nodes, job.exit_code = "PENDING", job.attempt + 1, (), None
            job.held = verb == "requeuehold"
            return ""
        if verb in ("hold", "release"):
            self._jobs[rest[-1]].held = verb == "hold"
            return ""
        if verb != "update":
            raise ValueError(f"unsupported scontrol verb {verb!r}")
        kv = dict(a.split("=", 1) for a in rest)
        if "NodeName" in kv:
            node = self._nodes[kv["NodeName"]]
            state = kv.get("State", "").upper()
            if state == "DRAIN":
                node["flags"].add("DRAIN")
                node["reason"] = kv.get("Reason", "")
            elif state == "RESUME":
                node["flags"].discard("DRAIN")
                node["flags"].discard("NOT_RESPONDING")
                if node["state"] == "down":
                    node["state"] = "idle"
                node["reason"] = ""
            elif state == "DOWN":
                node["state"] = "down"
                node["reason"] = kv.get("Reason", "")
            return ""
        if "JobId" in kv:
            job = self._jobs[kv["JobId"]]
            if "ExcNodeList" in kv:
                job.excluded = tuple(n for n in kv["ExcNodeList"].split(",") if n)
            return ""
        raise ValueError("nothing to update")
