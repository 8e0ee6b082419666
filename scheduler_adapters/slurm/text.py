"""``scontrol show job -o`` text, read so that what users set cannot pass for structure.

A one-line record is ``Key=value`` pairs, and values users set (JobName, Comment, WorkDir,
Command, StdOut, ...) may hold `` Key=value`` and even newlines: ``sbatch -J 'x Nodes=n3 CPU_IDs=0
Mem=0 GRES=gpu:8(IDX:0-7)'`` is accepted, and a naive split reads GPU indexes, output paths or
whole records out of it. So a record is used only when what this adapter reads is unambiguous:

- the keys read (``_ORDER``) appear at most once each, in the order scontrol prints them, with
  scontrol's anchors among them (UserId after JobName, MinCPUsNode after the GPU detail,
  Command and WorkDir before Comment and the output paths); a key copied into a user field
  either repeats one scontrol prints or lands out of that order;
- the GPU detail (``Nodes= CPU_IDs= Mem= GRES=`` groups of ``-d``) is one run of whole groups
  right after JOB_GRES, and is the only text the GPU indexes are read from;
- a line that does not start a record (a newline inside a user field) makes the record before it
  ambiguous, and two records of one job id are both refused;
- output paths are read only for batch jobs (BatchFlag=1), which always print them: a path
  copied into a field of a job that prints none would otherwise be taken for its log.

A refused record is logged (its job id and why) and left out. One thing text cannot settle: a
newline in the last user field of a record followed by a complete forged record. That is why the
adapter reads JSON wherever Slurm has it (21.08 and later) and this text only where it has not.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable

from .hostlist import HostlistError, expand_hostlist
from .runner import readable

__all__ = ["gres_gpu_count", "node_gpu_count", "parse_gpu_detail", "parse_scontrol_line", "scontrol_records"]

logger = logging.getLogger(__name__)

# "Key=value Key=value": a key starts after white space and ends at "="; values may hold spaces
_SCONTROL_FIELD = re.compile(r"(?:^|\s)([A-Za-z][\w/:.-]*)=")
_DETAIL = ("Nodes", "CPU_IDs", "Mem", "GRES")
# the keys read, and scontrol's anchors among them, in the order scontrol prints them
_ORDER = (
    "JobId",
    "JobName",
    "UserId",
    "JobState",
    "Reason",
    "Requeue",
    "Restarts",
    "BatchFlag",
    "ExitCode",
    "Partition",
    "ReqNodeList",
    "ExcNodeList",
    "NodeList",
    "NumCPUs",
    "NumTasks",
    "CPUs/Task",
    "JOB_GRES",
    *_DETAIL,
    "MinCPUsNode",
    "Command",
    "WorkDir",
    "Comment",
    "StdErr",
    "StdIn",
    "StdOut",
)
_RANK = {k: i for i, k in enumerate(_ORDER)}
_REQUIRED = ("JobId", "JobName", "UserId", "JobState")
_GRES_IDX = re.compile(r"gpu(?::[\w.-]+)*:\d+\(IDX:([0-9,\-]+|N/A)\)")
# one GPU entry of a node's configured GRES: gpu[:type...]:COUNT, then its socket list or the next entry
_GRES_GPUS = re.compile(r"(?:^|,)gpu(?::[A-Za-z0-9_.-]+)*?:(\d{1,6})(?=\(|,|$)")


# (job id, why) already warned about: a refused job is listed at every poll (bounded)
_warned: set[tuple[str, str]] = set()


def _warn(job: str, why: str) -> None:
    if (job, why) in _warned:
        logger.debug("scontrol record of job %s not used: %s", job, why)
        return
    if len(_warned) >= 10_000:
        _warned.clear()
    _warned.add((job, why))
    logger.warning("scontrol record of job %s not used: %s", job, why)


def _fields(line: str) -> list[tuple[str, str]]:
    """(key, value) in the order they appear; a value runs to the next key."""
    matches = list(_SCONTROL_FIELD.finditer(line))
    out = []
    for here, after in zip(matches, [*matches[1:], None], strict=False):
        end = after.start() if after is not None else len(line)
        out.append((here.group(1), line[here.end() : end].strip()))
    return out


def parse_scontrol_line(line: str) -> dict[str, str]:
    """One line of ``scontrol show job -o`` (or ``show node -o``) → its fields, as split, with no
    check (scontrol_records checks a job record)."""
    return dict(_fields(line))


def _check(pairs: list[tuple[str, str]]) -> str | None:
    """Why this record's structure is ambiguous; None when it is not."""
    keys = [k for k, _ in pairs]
    missing = [k for k in _REQUIRED if k not in keys]
    if missing:
        return f"no {', '.join(missing)}"
    seen: set[str] = set()
    last = -1
    in_detail = False
    detail_done = False
    for i, key in enumerate(keys):
        if key in _DETAIL:
            if key == "Nodes":
                if detail_done or keys[i : i + 4] != list(_DETAIL):
                    return "GPU detail outside its one run of Nodes= CPU_IDs= Mem= GRES= groups"
                if not in_detail and (i == 0 or keys[i - 1] != "JOB_GRES"):
                    return "GPU detail that does not follow JOB_GRES"
                in_detail = True
            continue
        if in_detail:
            in_detail, detail_done = False, True
        rank = _RANK.get(key)
        if rank is None:
            continue  # a key not read: whatever it holds is not used
        if key in seen:
            return f"{key}= twice"
        if rank < last:
            return f"{key}= out of scontrol's order"
        seen.add(key)
        last = rank
    return None


def scontrol_records(text: str) -> list[tuple[dict[str, str], str]]:
    """The unambiguous records of ``scontrol show job -o [-d]`` text: (fields, GPU detail
    text), each refused record logged and left out."""
    records: list[list] = []  # [pairs, ambiguous why, line]
    for line in text.splitlines():
        if line.startswith("JobId="):
            pairs = _fields(line)
            records.append([pairs, _check(pairs), line])
        elif line.strip() and records:
            records[-1][1] = records[-1][1] or "a newline inside a field"
    counts: dict[str, int] = {}
    for pairs, _, _ in records:
        counts[pairs[0][1]] = counts.get(pairs[0][1], 0) + 1
    out = []
    for pairs, why, line in records:
        job = pairs[0][1]
        if why is None and counts[job] > 1:
            why = "more than one record of this job id"
        if why is not None:
            _warn(readable(job)[:40], why)
            continue
        fields = dict(pairs)
        if "Comment" in fields:
            fields["Comment"] = _comment(line)
        if fields.get("BatchFlag", "1") != "1":  # a job that prints no output paths has none to read
            fields.pop("StdOut", None)
            fields.pop("StdErr", None)
        detail = " ".join(f"{k}={v}" for k, v in pairs if k in _DETAIL)
        out.append((fields, detail))
    return out


def _comment(line: str) -> str:
    """The Comment of a checked record, whole: from ``Comment=`` to the next key this adapter
    reads (a comment such as ``recover:max_restarts=2`` holds ``word=`` text that splitting at
    every key would cut it at). _check has made sure ``Comment=`` is there once, in its place."""
    matches = list(_SCONTROL_FIELD.finditer(line))
    for i, m in enumerate(matches):
        if m.group(1) == "Comment":
            ends = (x.start() for x in matches[i + 1 :] if x.group(1) in _RANK or x.group(1) in _DETAIL)
            return line[m.end() : next(ends, len(line))].strip()
    return ""


def _indexes(text: str) -> tuple[int, ...]:
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        if lo.isdigit():
            out.extend(range(int(lo), int(hi) + 1) if hi.isdigit() else [int(lo)])
    return tuple(sorted(set(out)))


def gres_indexes(gres: str) -> tuple[int, ...]:
    """GPU indexes of one node's GRES text: ``gpu:2(IDX:0-1)``, ``gpu:a100:2(IDX:1,3)``."""
    idx: list[int] = []
    for g in _GRES_IDX.finditer(gres):
        idx.extend(_indexes(g.group(1)))
    return tuple(sorted(set(idx)))


def gpu_map(pairs: Iterable[tuple[str, str]]) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """(node list, GRES text) pairs → the GPU indexes held on each node."""
    found: dict[str, tuple[int, ...]] = {}
    for nodes, gres in pairs:
        try:
            hosts = expand_hostlist(nodes)
        except HostlistError:
            continue
        for host in hosts:
            found[host] = tuple(sorted(set(found.get(host, ()) + gres_indexes(gres))))
    return tuple(sorted(found.items()))


def detail_pairs(detail: str) -> list[tuple[str, str]]:
    """The (key, value) pairs of a record's detail text (``Nodes=``, ``CPU_IDs=``...), in order."""
    return _fields(detail)


def parse_gpu_detail(detail: str) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """The per-node GPU indexes of the GPU detail of ``scontrol show job -d`` (the text
    scontrol_records returns for a record): ``Nodes=n1 CPU_IDs=0-1 Mem=0 GRES=gpu:2(IDX:0-1)``."""
    pairs = _fields(detail)
    nodes = [v for k, v in pairs if k == "Nodes"]
    gres = [v for k, v in pairs if k == "GRES"]
    return gpu_map(zip(nodes, gres, strict=False))


def gres_gpu_count(gres: str) -> int:
    """GPUs in one node's configured GRES: ``gpu:8`` is 8, ``gpu:h100:4(S:0),gpu:a100:4(S:1)``
    is 8; ``(null)``, or GRES without GPUs (``mps:100``), is 0."""
    return sum(int(n) for n in _GRES_GPUS.findall(gres.strip()))


def node_gpu_count(text: str, node: str) -> int | None:
    """The GPUs that ``sinfo -h -N -o '%N|%G'`` rows give ``node`` (a node in two partitions has
    two rows); None when no row names it, or its rows disagree."""
    counts = set()
    for line in text.splitlines():
        name, sep, gres = line.partition("|")
        if sep and name.strip() == node:
            counts.add(gres_gpu_count(gres))
    return counts.pop() if len(counts) == 1 else None
