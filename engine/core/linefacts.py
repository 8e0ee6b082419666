"""From scanner hits to facts: line timestamps, per-file job context, typed and validated groups.

Everything here treats log text as hostile data: group values are bounded, control characters
are removed, node names and job ids must match strict patterns or are dropped (and counted).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence, cast

from engine.core.linetime import LineClock, has_stamp, parse_line_time
from engine.facts import JOB_RE, NODE_RE, Fact, clean_text
from engine.hostlist import HostlistError, expand_hostlist as _expand_hostlist
from engine.rulebook.model import Matcher

logger = logging.getLogger(__name__)

__all__ = [
    "NODE_RE",
    "JOB_RE",
    "clean_text",
    "parse_line_time",
    "FileContext",
    "ClusterContext",
    "HitConverter",
    "expand_hostlist",
    "job_from_filename",
    "Flood",
    "StreamFacts",
    "shape_key",
    "FLOOD_WINDOW",
    "normalize_pci",
    "decode_xid",
]

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
MAX_TEXT = 400
MAX_HOSTLIST = 4096


def normalize_pci(text: str | None) -> str | None:
    """``00000000:3B:00.0``, ``PCI:0000:3b:00``, ``3b:00.0`` → ``0000:3b:00`` (``None`` if not PCI).

    The form both the kernel's Xid lines and NVML's bus ids are reduced to, so they compare."""
    if not isinstance(text, str):
        return None
    t = text.strip()
    if t[:4].upper() == "PCI:":
        t = t[4:]
    t = t.split(".", 1)[0]
    parts = t.split(":")
    if len(parts) == 2:
        parts = ["0", *parts]
    if len(parts) != 3:
        return None
    dom, bus, dev = parts
    try:
        if not (1 <= len(dom) <= 8 and 1 <= len(bus) <= 2 and 1 <= len(dev) <= 2):
            return None
        d, b, v = int(dom, 16), int(bus, 16), int(dev, 16)
    except ValueError:
        return None
    return f"{d & 0xFFFF:04x}:{b:02x}:{v:02x}"


def decode_xid(attrs: dict[str, Any]) -> dict[str, Any]:
    """The one Xid decoder, after the rulebook's Xid matchers took the line apart: the PCI
    address in the form NVML devices carry, the words of a decode (fatality, recovery action)
    with their blanks collapsed. Replay and the node agent both reach Xids through here."""
    pci = normalize_pci(attrs.get("pci")) if "pci" in attrs else None
    if pci is not None:
        attrs["pci"] = pci
    else:
        attrs.pop("pci", None)
    for name in ("fatality", "recovery_action", "nvlink_unit", "process"):
        value = attrs.get(name)
        if isinstance(value, str):
            value = " ".join(value.split()).strip("'\"")
            if value and value != "<unknown>":
                attrs[name] = value
            else:
                attrs.pop(name)
    return attrs


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


#: numbers from logs are bounded: exact in a double (what the Rete compares) and far inside
#: SQLite's integers, so that SLURM_RESTART_COUNT=99999999999999999999 is dropped, not stored
MAX_NUMBER = 1 << 53


def _number(raw: str, kind: str) -> int | float | None:
    if len(raw) > 32:
        return None
    try:
        if kind == "float":
            v = float(raw)
            return v if v == v and abs(v) <= MAX_NUMBER else None
        v = int(raw, 16) if raw.lower().startswith("0x") else int(raw)
        return v if -MAX_NUMBER <= v <= MAX_NUMBER else None
    except ValueError:
        return None


#: a start line printed again this long after the previous one, with evidence in between, is a
#: new attempt (the tasks of one start print their banners within seconds of each other)
START_GAP = 60.0

_INT_GROUPS = {"attempt", "code", "step", "checkpoint", "rank", "exit_code", "pid", "gpu", "local_rank"}


class HitConverter:
    """Turns (matcher, groups, line) into a Fact or a context update, with counters."""

    def __init__(
        self,
        matchers: Iterable[Matcher],
        cluster: ClusterContext | None = None,
        clock: "Callable[[], float] | None" = None,
    ):
        self.matchers = list(matchers)
        self.cluster = cluster or ClusterContext()
        self.clock = clock  # live: facts are stamped on arrival; the line's own time is kept as logged_at
        self.on_context: Callable[[float, str, int | None, frozenset], None] | None = None
        self.dropped_values = 0
        self._last_line: tuple[str, float | None, LineClock] | None = None
        #: a scheduler is present: it alone says which job a job log belongs to and on which
        #: nodes that job runs; the log's own words about jobs and nodes are refused (see convert)
        self.scheduler = False
        self.refused: dict[str, int] = {}
        self.progress_skipped = 0  # progress lines left out by StreamFacts' sampling

    def _refuse(self, why: str) -> None:
        self.refused[why] = self.refused.get(why, 0) + 1

    def _typed(self, m: Matcher, groups: Mapping[str, str]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, raw in groups.items():
            if raw is None or raw == "":
                continue
            kind = m.types.get(name) or ("int" if name in _INT_GROUPS else "str")
            value: Any = clean_text(raw)
            if kind in ("int", "float"):
                value = _number(raw.strip(), kind)
                if value is None:
                    self.dropped_values += 1
                    continue
            out[name] = value
        node = out.get("node")
        if node is not None and not NODE_RE.match(str(node)):
            out.pop("node")
            self.dropped_values += 1
        job = out.get("job")
        if job is not None and not JOB_RE.match(str(job)):
            out.pop("job")
            self.dropped_values += 1
        return out

    collapse: "_Collapser | None" = None  # set per stream by StreamFacts
    blank: bytes | None = None  # set per hit by StreamFacts (see convert)

    @staticmethod
    def _start(ctx: FileContext, at: float | None) -> None:
        """A start line (the job script's banner): a new attempt when the previous one was ended
        by a requeue line, or printed evidence and started a while ago (``sbatch --open-mode=append``
        logs carry every attempt); the banners of one start's tasks are one attempt."""
        if ctx.ended or (ctx.active and (at is None or ctx.started_at is None or at - ctx.started_at >= START_GAP)):
            ctx.attempt = (ctx.attempt or 0) + 1
        ctx.active = ctx.ended = False
        ctx.started_at = at

    def _when(
        self, line: str, ctx: FileContext, before: bytes | None, timeless: bool = False
    ) -> tuple[float | None, float]:
        """(the line's own time or None, the time of its fact). ``timeless``: the line is known to
        carry no timestamp."""
        last = self._last_line
        dates = ctx.dates
        if self.clock is not None and dates.ref is None:
            dates.not_after = self.clock()  # live: a yearless first stamp is not after its reading
        if last is not None and last[0] == line and last[2] is dates:
            logged = last[1]
        else:
            logged = None if timeless else dates.time(line)
            self._last_line = (line, logged, dates)
        if logged is None and before:
            for prev in reversed(before.split(b"\n")[-64:]):
                # read out of order (backwards from this line): the stream's state is left alone
                t = dates.peek(prev[:128].decode("utf-8", "replace"))
                if t is not None:
                    if ctx.last_at is None or t > ctx.last_at:
                        ctx.last_at = t
                    break
        if logged is not None:
            ctx.last_at = logged
        if self.clock is not None:
            at = self.clock()
        else:
            at = logged if logged is not None else (ctx.last_at if ctx.last_at is not None else 0.0)
        return logged, at

    def convert(
        self,
        index: int,
        groups: Mapping[str, str],
        line: str,
        line_no: int,
        ctx: FileContext,
        before: bytes | None = None,
    ) -> "Fact | Flood | None":
        """``before``: some bytes that precede the line in the file (to date an untimestamped line
        by the last timestamp before it, as a person reading the log would). ``self.blank`` (set
        per hit by StreamFacts): the line with its digits blanked, when the matcher cannot tell
        digits apart: repeats of a shape already seen then take a shortcut (``_Collapser.fast``)
        that gives the same answer."""
        m = self.matchers[index]
        collapse, blank = self.collapse, self.blank
        if blank is not None and collapse is not None:
            out = collapse.fast(self, index, m, groups, line, line_no, ctx, before, blank)
            if out is not _SLOW:
                return cast("Fact | Flood | None", out)
        logged, at = self._when(line, ctx, before)
        dropped, refused = self.dropped_values, dict(self.refused) if self.refused else None
        attrs = self._typed(m, groups)
        if self.clock is not None and logged is not None:
            attrs["logged_at"] = logged
        # Trust: with a scheduler, a job's log is evidence about that job (the one the scheduler
        # or the file's name says) and the nodes the scheduler lists for it, never about other
        # jobs or nodes. Without one (replay), the log's context lines are all there is.
        guarded = self.scheduler and ctx.source == "job"
        if m.emit == "context":
            if guarded:
                self._refuse("context")  # SLURM_JOB_ID=, SLURM_JOB_NODELIST= ... printed by the job
                return None
            if "job" in attrs and str(attrs["job"]) != ctx.job:
                ctx.job = str(attrs["job"])
                ctx.active, ctx.ended, ctx.started_at = False, False, None
            edge = m.attrs.get("attempt_edge")
            if edge == "start":
                # an undated banner takes the time of the line dated before it, which says how far
                # it is from the previous start only if that line came after the previous start
                inherited = ctx.last_at if ctx.last_at != ctx.started_at else None
                self._start(ctx, logged if logged is not None else inherited)
            elif edge == "end":
                ctx.ended = True
            if "attempt" in attrs and isinstance(attrs["attempt"], int):
                if not ctx.active and ctx.nodes_attempt == ctx.attempt:
                    # the banner printed its node list before its restart count: that list is
                    # this attempt's, not one a later host line of the attempt should reset
                    ctx.nodes_attempt = attrs["attempt"]
                ctx.attempt = attrs["attempt"]  # SLURM_RESTART_COUNT: what Slurm says wins
                ctx.active = ctx.ended = False
            # ``nodes`` (a hostlist) is the allocation; ``node`` only the host that printed it
            alloc = set(expand_hostlist(str(attrs["nodes"]))) if "nodes" in attrs else set()
            host = {str(attrs["node"])} if "node" in attrs else set()
            if (alloc or host) and ctx.nodes_attempt != ctx.attempt:
                ctx.nodes, ctx.hosts = set(), set()  # a new attempt runs where Slurm put it this time
            if alloc or host:
                ctx.nodes_attempt = ctx.attempt
            ctx.nodes |= alloc
            ctx.hosts |= host - ctx.nodes
            if ctx.job:
                nodes = frozenset(ctx.nodes | ctx.hosts)  # the job runs on its hosts, too
                if self.on_context is not None:  # replay: applied in time order with the facts
                    self.on_context(at, ctx.job, ctx.attempt, nodes)
                else:
                    self.cluster.assign(ctx.job, ctx.attempt, nodes, at)
            return None
        if guarded and m.emit == "xid":
            self._refuse("xid_in_job_log")  # a node-level claim: the kernel's and the agents' to make
            return None
        fact_attrs = self._fact_attrs(m, attrs, ctx, guarded)
        if not guarded and fact_attrs.get("job") == ctx.job and ctx.job is not None:
            ctx.active = True
            if fact_attrs.pop("attempt_edge", None) == "end":
                ctx.ended = True  # the requeue line itself is the end of the attempt it ends
        else:
            fact_attrs.pop("attempt_edge", None)
        kind = _KINDS[m.emit]
        shape: tuple | None = None
        if collapse is not None and kind != "progress":
            shape = collapse._key(kind, fact_attrs, m)  # once: learn, repeat and first share it
            if blank is not None:
                collapse.learn(
                    index,
                    m,
                    blank,
                    groups,
                    fact_attrs,
                    ctx,
                    self,
                    guarded,
                    self.dropped_values - dropped,
                    _grown(refused, self.refused),
                    line,
                    shape,
                )
            flood = collapse.repeat(shape, fact_attrs, at, f"{ctx.path}:{line_no}", line)
            if flood is not False and flood is not True:
                return flood
        if m.emit != "progress":
            fact_attrs["text"] = clean_text(line, MAX_TEXT)
        fact = Fact.make(kind, fact_attrs, at, f"{ctx.path}:{line_no}")
        if collapse is not None and shape is not None:
            collapse.first(fact, shape)  # the text it gained is no part of its shape
        return fact

    def _fact_attrs(self, m: Matcher, attrs: Mapping[str, Any], ctx: FileContext, guarded: bool) -> dict[str, Any]:
        """The attributes of a fact: the matcher's own, the line's (as far as they are trusted),
        then what the file and the cluster know (job, attempt, the file's one node)."""
        fact_attrs: dict[str, Any] = dict(m.attrs)
        fact_attrs.update(attrs)
        fact_attrs.pop("nodes", None)
        if guarded:
            for name in ("job", "attempt"):
                if name in attrs and str(attrs[name]) != str(ctx.job if name == "job" else ctx.attempt):
                    self._refuse("other_job")
                fact_attrs.pop(name, None)
            if ctx.job is not None:
                fact_attrs["job"] = ctx.job
                if ctx.attempt is not None:
                    fact_attrs["attempt"] = ctx.attempt
            node = fact_attrs.get("node")
            if node is not None:
                allowed = ctx.nodes or (self.cluster.nodes_of(ctx.job) if ctx.job is not None else set())
                if str(node) not in allowed:
                    self._refuse("other_node")  # not in the job's allocation: dropped, the evidence stays
                    fact_attrs.pop("node")
        failed = fact_attrs.pop("failed_nodes", None)
        if failed is not None:
            self._failed_nodes(str(failed), fact_attrs, ctx, guarded)
        fact_attrs["matcher"] = m.id
        fact_attrs["source"] = ctx.source
        if "job" not in fact_attrs and ctx.job is not None:
            fact_attrs["job"] = ctx.job
        if "attempt" not in fact_attrs:
            if ctx.attempt is not None and fact_attrs.get("job") == ctx.job:
                fact_attrs["attempt"] = ctx.attempt
        if m.emit == "xid":
            decode_xid(fact_attrs)
        node = fact_attrs.get("node")
        # a line that names no node is about the one node of an allocation of one (ctx.nodes, never
        # a host seen printing: ctx.hosts). An Xid printed in a job's log is not a node-level
        # claim; one in a node's kernel log is
        if node is None and len(ctx.nodes) == 1 and (m.emit != "xid" or ctx.source == "kernel"):
            fact_attrs["node"] = next(iter(ctx.nodes))
        # a node's fact without a job gets the job that ran there from the engine, in time order
        if "job" in fact_attrs and "attempt" not in fact_attrs:
            fact_attrs["attempt"] = self.cluster.job_attempt.get(str(fact_attrs["job"]), 0)
        return fact_attrs

    #: the most nodes one line may name as failed (a Slurm hostlist, ``gpu[03-04]``): a fault's
    #: nodes are a list of templates, one node each (``fault.node_failure_hostlist`` has this many);
    #: a longer list is a shared outage for the blast-radius guard and a person, not a drain list
    MAX_FAILED_NODES = 16

    def _failed_nodes(self, text: str, fact_attrs: dict[str, Any], ctx: FileContext, guarded: bool) -> None:
        """A hostlist of failed nodes (``failed_nodes``) -> the nodes the fact may name: one becomes
        ``node`` (the line then reads as the single-node form), several ``failed_nodes`` (a tuple).

        Who may say which nodes failed (DESIGN.md, "who may say what"): slurmctld's own log is the
        scheduler speaking, so its nodes stand. A job's output is the user's text: srun's line
        there only confirms nodes that the job's allocation holds (the nodes the scheduler lists
        for it, or in replay the allocation known from the logs), like the single-node form's
        ``node``; others are dropped and counted. A line naming more than MAX_FAILED_NODES, or a
        malformed one, names none: the fault is then a node failure without nodes (restart, no
        drain)."""
        if self._hostlist_bound(text) > self.MAX_FAILED_NODES:
            self._refuse("hostlist_too_large")
            return
        names = list(dict.fromkeys(expand_hostlist(text)))
        if not names:
            self._refuse("hostlist_malformed")
            return
        if ctx.source != "slurm":
            allowed = (ctx.nodes | ctx.hosts) or (self.cluster.nodes_of(ctx.job) if ctx.job is not None else set())
            if allowed or guarded:  # replay with no allocation known: the log is all there is
                kept = [n for n in names if n in allowed]
                if len(kept) < len(names):
                    self._refuse("other_node")
                names = kept
        if len(names) == 1 and "node" not in fact_attrs:
            fact_attrs["node"] = names[0]
        elif names:
            fact_attrs["failed_nodes"] = tuple(names)
            if fact_attrs.get("job") is None and ctx.source == "slurm":
                # slurmctld's line names no job: the one job running on these nodes, if there is one
                jobs = {j for j in map(self.cluster.job_on, names) if j is not None}
                if len(jobs) == 1:
                    fact_attrs["job"], attempt = jobs.pop()
                    if attempt is not None:
                        fact_attrs["attempt"] = attempt

    @staticmethod
    def _hostlist_bound(text: str) -> int:
        """An upper bound on how many names a hostlist stands for, without expanding it (a
        hostile ``n[1-99999]`` would otherwise cost an expansion of 100,000 names per line)."""
        total = text.count(",") + 1
        for body in _BRACKETS.findall(text):
            count = 0
            for part in body.split(","):
                lo, _, hi = part.partition("-")
                if len(lo) > 9 or len(hi) > 9:
                    return 1 << 62
                count += max(int(hi) - int(lo) + 1, 0) if lo.isdigit() and hi.isdigit() else 1
            total *= max(count, 1)
            if total > 1 << 32:
                break
        return total


_BRACKETS = re.compile(r"\[([^\[\]]*)\]")


def _grown(before: dict[str, int] | None, after: dict[str, int]) -> tuple[str, ...]:
    """The refusals counted between two snapshots of ``HitConverter.refused``."""
    if not after:
        return ()
    before = before or {}
    return tuple(k for k, v in after.items() for _ in range(v - before.get(k, 0)))


_KINDS = {"log": "log", "xid": "xid", "progress": "progress"}
_SLOW = object()  # the shortcut does not apply: convert the hit in full


# --------------------------------------------------------------------------------------------
# floods: one fact with a count instead of a fact per line

FLOOD_WINDOW = 60.0  # seconds (of the facts' clock) during which lines of one shape are one fact
FLOOD_SEEN_MAX = 64  # nodes and ranks remembered per flood
_FLOOD_SHAPES_MAX = 4096
#: attributes that differ from rank to rank of one job: set aside when comparing shapes
VARYING = frozenset(
    {
        "rank",
        "local_rank",
        "pid",
        "tid",
        "peer",
        "addr",
        "address",
        "port",
        "count",
        "seq",
        "process",
        "text",
        "logged_at",
    }
)
#: also set aside in a job's own log: every node of the job prints the same error
VARYING_IN_JOB_LOGS = frozenset({"node", "gpu", "device", "pci"})


# digit-blind on purpose (no literal digit, every class holds all digits or none), so that text
# equal but for its digits has one shape: ``_Collapser.fast`` relies on it
_NUMBERS = re.compile(r"[0-9][xX][0-9a-fA-F]+|[0-9a-fA-F]*[0-9][0-9a-fA-F]*")


def _shape(value: Any) -> Any:
    # free text (a captured message) is compared with its numbers, addresses and ids blanked
    if isinstance(value, str) and " " in value:
        return _NUMBERS.sub("#", value)
    return value


def shape_key(kind: str, attrs: Mapping[str, Any], job_log: bool) -> tuple:
    """What makes two hits the same evidence: the kind and every attribute but those that vary
    per rank, pid, address or count (and, in a job's log, per node); in free text, numbers and
    addresses do not count."""
    skip = VARYING | VARYING_IN_JOB_LOGS if job_log else VARYING
    return (kind,) + tuple(sorted((k, _shape(v)) for k, v in attrs.items() if k not in skip))


@dataclass(eq=False)
class Flood:
    """Repeats of a fact already emitted: how many, the last one's origin and line, who said it.

    Emitted (again) whenever it has grown since it was last handed on; ``applied`` is how many of
    ``count`` the engine has already taken, so handing it on twice never counts twice."""

    fact_id: str
    first_at: float
    last_at: float
    last_origin: str = ""
    last_line: str = ""
    count: int = 0  # repeats after the first line
    applied: int = 0
    nodes: set[str] = field(default_factory=set)
    ranks: set[int] = field(default_factory=set)
    raw_seen: set = field(default_factory=set, repr=False)  # (node, rank) as written, already seen

    @property
    def at(self) -> float:
        return self.last_at

    def seen(self, attrs: Mapping[str, Any]) -> None:
        node, rank = attrs.get("node"), attrs.get("rank", attrs.get("local_rank"))
        if node is not None and len(self.nodes) < FLOOD_SEEN_MAX:
            self.nodes.add(str(node))
        if isinstance(rank, int) and len(self.ranks) < FLOOD_SEEN_MAX and "rank" in attrs:
            self.ranks.add(rank)

    def evidence(self) -> dict[str, Any]:
        """What the store keeps next to the first line: the last one, and who repeated it."""
        return {
            "last_origin": self.last_origin,
            "last_at": self.last_at,
            "last_text": clean_text(self.last_line, MAX_TEXT),
            "nodes": sorted(self.nodes),
            "ranks": sorted(self.ranks),
        }


_TEMPLATES_MAX = 4096  # shortcuts per stream
_RAW_SEEN_MAX = 4096


@dataclass(eq=False)
class _Template:
    """What the full conversion of one line learned for the lines equal to it but for digits
    (of a digit-blind matcher): they have the same group spans, so the same timestamp presence,
    and the same shape, values dropped and refusals, except as the groups in ``keyed`` decide
    (attributes of the shape that are not free text; with a scheduler, also the node, which the
    allocation check reads): ``shapes`` maps their values to (shape, values dropped, refusals)."""

    sig: tuple
    timeless: bool
    keyed: tuple[str, ...]
    shapes: dict[tuple, list] = field(default_factory=dict)


class _Collapser:
    """Per stream: shape -> the flood of the fact that first had it, within FLOOD_WINDOW.

    The shortcut: a full conversion of a line of a digit-blind matcher leaves a ``_Template``
    under (matcher, line with digits blanked). A later line with the same key, while the file's
    and the cluster's context are unchanged, is a repeat of a known shape: ``fast`` counts it
    without timestamp search (when the first had none), typing, validation or shape building.
    Anything unusual (no template, a changed context, no live flood of that shape, a time
    outside the window) falls back to the full conversion, which gives the same answer."""

    def __init__(self, job_log: bool, window: float = FLOOD_WINDOW):
        self.job_log = job_log
        self.window = window
        self.shapes: dict[tuple, Flood] = {}
        self.touched: set[Flood] = set()  # floods already handed on in this batch
        self.templates: dict[tuple[int, bytes], _Template] = {}
        self.fast_hits = 0
        self.version = 0  # changes whenever ``shapes`` does (``fast`` remembers its lookups)

    @staticmethod
    def _sig(conv: "HitConverter", ctx: FileContext) -> tuple:
        nodes = ctx.nodes
        return (
            ctx.job,
            ctx.attempt,
            ctx.active,
            ctx.ended,
            id(nodes),
            len(nodes),
            next(iter(nodes)) if len(nodes) == 1 else None,
            id(ctx.hosts),
            len(ctx.hosts),
            conv.cluster.version,
            conv.scheduler,
        )

    def learn(
        self,
        index: int,
        m: Matcher,
        blank: bytes,
        groups: Mapping[str, str],
        fact_attrs: Mapping[str, Any],
        ctx: FileContext,
        conv: "HitConverter",
        guarded: bool,
        dropped: int,
        refusals: tuple[str, ...],
        line: str,
        shape: tuple,
    ) -> None:
        """Leave a template after the full conversion of a line (see the class); ``shape``: the
        line's (``_key``)."""
        if m.emit != "log":
            return  # Xids are decoded from their words; progress is not collapsed
        skip = VARYING | VARYING_IN_JOB_LOGS if (self.job_log or tuple(m.sources) == ("job",)) else VARYING
        keyed = []
        for name, raw in groups.items():
            if raw is None or raw == "":
                continue
            typ = m.types.get(name) or ("int" if name in _INT_GROUPS else "str")
            if typ in ("int", "float"):
                raw = raw.strip()
                if len(raw) > 15 or any(ch.isalpha() for ch in raw):
                    return  # 0x1f, 1e999, 2**53 and more: whether they are kept depends on the digits
            elif " " in clean_text(raw):
                continue  # free text: its shape has its numbers blanked (digit-blind)
            if (name not in skip or (guarded and name == "node")) and name != "nodes":
                keyed.append(name)
        sig = self._sig(conv, ctx)
        key = (index, blank)
        t = self.templates.get(key)
        if t is None or t.sig != sig:
            if len(self.templates) >= _TEMPLATES_MAX:
                self.templates.clear()
            timeless = not has_stamp(line)
            t = self.templates[key] = _Template(sig, timeless, tuple(keyed))
        if len(t.shapes) >= 256:
            t.shapes.clear()
        # [shape, values dropped, refusals, the flood of that shape, self.version when it was looked up]
        t.shapes[tuple(map(groups.get, t.keyed))] = [shape, dropped, refusals, None, -1]

    def fast(
        self,
        conv: "HitConverter",
        index: int,
        m: Matcher,
        groups: Mapping[str, str],
        line: str,
        line_no: int,
        ctx: FileContext,
        before: bytes | None,
        blank: bytes,
    ) -> "Flood | None | object":
        """The outcome of ``repeat`` for a line with a template, or _SLOW."""
        t = self.templates.get((index, blank))
        if t is None:
            return _SLOW
        entry = t.shapes.get(tuple(map(groups.get, t.keyed)))
        if entry is None or t.sig != self._sig(conv, ctx):
            return _SLOW
        shape, dropped, refusals, cached, version = entry
        if version == self.version:
            flood = cached  # self.shapes has not changed since the lookup below
        else:
            flood = self.shapes.get(shape)
            entry[3], entry[4] = flood, self.version
        if flood is None:
            return _SLOW
        _, at = conv._when(line, ctx, before, t.timeless)  # the full conversion would do the same again
        if at - flood.first_at > self.window or at < flood.first_at:
            return _SLOW
        self.fast_hits += 1
        conv.dropped_values += dropped
        for why in refusals:
            conv._refuse(why)
        flood.count += 1
        if at > flood.last_at:
            flood.last_at = at
        flood.last_origin, flood.last_line = f"{ctx.path}:{line_no}", line
        if len(flood.nodes) < FLOOD_SEEN_MAX or len(flood.ranks) < FLOOD_SEEN_MAX:
            raw = (groups.get("node"), groups.get("rank"))
            if raw not in flood.raw_seen:
                if len(flood.raw_seen) < _RAW_SEEN_MAX:
                    flood.raw_seen.add(raw)
                dropped_before, refused_before = conv.dropped_values, dict(conv.refused)
                flood.seen(conv._fact_attrs(m, conv._typed(m, groups), ctx, conv.scheduler and ctx.source == "job"))
                conv.dropped_values = dropped_before  # counted once above, as the full conversion would
                conv.refused.clear()
                conv.refused.update(refused_before)
        if flood in self.touched:
            return None
        self.touched.add(flood)
        return flood

    def _key(self, kind: str, attrs: Mapping[str, Any], m: Matcher) -> tuple:
        job_log = self.job_log or (kind == "log" and tuple(m.sources) == ("job",))
        return shape_key(kind, attrs, job_log)

    def repeat(self, shape: tuple, attrs: dict, at: float, origin: str, line: str) -> "Flood | None | bool":
        """False: not a repeat (make the fact). A Flood: a repeat, hand this on. None: a repeat
        already on its way in this batch. ``shape``: the line's (``_key``)."""
        flood = self.shapes.get(shape)
        if flood is None or at - flood.first_at > self.window or at < flood.first_at:
            return False
        flood.count += 1
        flood.last_at, flood.last_origin, flood.last_line = max(flood.last_at, at), origin, line
        flood.seen(attrs)
        if flood in self.touched:
            return None
        self.touched.add(flood)
        return flood

    def first(self, fact: Fact, shape: tuple) -> None:
        self.version += 1
        if len(self.shapes) >= _FLOOD_SHAPES_MAX:
            self.shapes = {k: f for k, f in self.shapes.items() if fact.at - f.first_at <= self.window}
            if len(self.shapes) >= _FLOOD_SHAPES_MAX:
                self.shapes.clear()
        flood = Flood(fact.id, fact.at, fact.at, fact.origin)
        flood.seen(fact.attrs)
        self.shapes[shape] = flood


#: progress lines of one matcher in one file: after a burst of PROGRESS_BURST, one per
#: PROGRESS_EVERY_S of the facts' clock, and never fewer than every PROGRESS_NTH-th line
PROGRESS_BURST = 32
PROGRESS_EVERY_S = 5.0
PROGRESS_NTH = 64


class _ProgressSampler:
    """A bounded rate of progress points per file and matcher (a token bucket on the facts'
    clock), so that a log printing an iteration line every few milliseconds does not cost a
    fact per line. Always kept: the first line, a line that names a checkpoint (the retry
    policy's no-progress guard compares them across attempts), every line after the file's context changed
    (job, attempt, whether the attempt printed evidence yet, nodes, the cluster's assignment),
    every PROGRESS_NTH-th line, and the last line of each matcher in a scanned chunk (so the
    last progress a job printed is never lost: hang detection and a log's tail see it). A
    slowdown that stays is still a run of slow points among the kept ones; the hang bound
    (``factor`` x the longest gap, never below ``min_bound``) grows by at most PROGRESS_EVERY_S."""

    __slots__ = ("tokens", "at", "since", "sig")

    def __init__(self) -> None:
        self.tokens = float(PROGRESS_BURST)
        self.at: float | None = None
        self.since = 0
        self.sig: tuple | None = None

    def skip(self, at: float) -> bool:
        if self.at is not None and at > self.at:
            self.tokens = min(float(PROGRESS_BURST), self.tokens + (at - self.at) / PROGRESS_EVERY_S)
        if self.at is None or at > self.at:
            self.at = at
        if self.tokens >= 1.0 or self.since + 1 >= PROGRESS_NTH:
            return False
        self.since += 1
        return True

    def kept(self, sig: tuple) -> None:
        self.tokens = max(0.0, self.tokens - 1.0)
        self.since = 0
        self.sig = sig


#: one item of a stream: (line number, byte offset of the line, what it gave)
Item = tuple[int, int, "Fact | Flood | None"]


class StreamFacts:
    """The one scan -> fact loop, shared by replay and the live controller.

    ``feed(data)`` scans a chunk and returns one item per hit, in line order: a Fact, a Flood
    (repeats of an earlier fact, collapsed), or None (a context line, or a repeat already
    counted in this batch). An untimestamped hit is dated by the last timestamp before it: the
    time is carried forward from hit to hit, and the only look back is into the lines since
    the previous hit (at most ``BEFORE_BYTES``), so a flood of adjacent lines never looks back.
    """

    BEFORE_BYTES = 8192

    def __init__(
        self,
        scanner: Any,
        converter: HitConverter,
        ctx: FileContext,
        index_map: Sequence[int],
        collapse: bool = True,
        sample: bool = True,
    ):
        self.scanner = scanner
        self.converter = converter
        self.ctx = ctx
        self.index_map = index_map
        self._collapse = _Collapser(ctx.source == "job") if collapse else None
        self._looked = scanner.position[0]  # stream offset up to which earlier bytes were looked at
        self._data, self._base = b"", 0
        # progress matchers (scanner numbering) whose lines are sampled, see _ProgressSampler
        self._progress = (
            frozenset(i for i, j in enumerate(index_map) if converter.matchers[j].emit == "progress")
            if sample
            else frozenset()
        )
        # progress matchers with a checkpoint group (scanner numbering): their lines that name one are kept
        names = getattr(scanner, "group_names", None)
        self._checkpoints = frozenset(i for i in self._progress if names is None or "checkpoint" in names(i))
        self._sampler: dict[int, _ProgressSampler] = {}
        self._last_of: dict[int, int] = {}  # progress matcher -> offset of its last hit in this batch

    def scan(self, data: bytes) -> list[Any]:
        """Scan a chunk; its hits are then converted one by one with ``item`` (the controller
        converts lazily, so that it can stop between lines of a burst)."""
        self._begin(data, self.scanner.position[0] + self.scanner.pending)
        return self._last_hits(self.scanner.feed(data))

    def scan_end(self) -> list[Any]:
        """End of stream: the hits of the pending partial line."""
        self._begin(b"", 0)
        return self._last_hits(self.scanner.flush())

    def _last_hits(self, hits: list[Any]) -> list[Any]:
        if self._progress:
            progress = self._progress
            self._last_of = {h.matcher: h.offset for h in hits if h.matcher in progress}
        return hits

    def _before(self, hit: Any) -> bytes | None:
        """The bytes since the last hit looked at, up to BEFORE_BYTES: where an untimestamped
        line's time is looked for."""
        data, base = self._data, self._base
        local = hit.offset - base
        if 0 < local <= len(data) and hit.offset > self._looked:
            lo = max(0, local - self.BEFORE_BYTES, self._looked - base)
            return data[lo:local] if lo < local - 2 else None  # not just the newline of the last hit
        return None

    def item(self, hit: Any) -> "Fact | Flood | None":
        """The fact, flood or nothing that one hit of the last scanned chunk gives."""
        if hit.matcher in self._progress and self._skip_progress(hit):
            end = hit.offset + len(hit.line)
            if end > self._looked:
                self._looked = end
            return None
        conv = self.converter
        before = self._before(hit)
        conv.collapse, conv.blank = self._collapse, hit.blank
        try:  # through convert: the controller's tests put a seam there
            out = conv.convert(
                self.index_map[hit.matcher],
                hit.groups,
                hit.line.decode("utf-8", "replace"),
                hit.line_no,
                self.ctx,
                before,
            )
        finally:
            conv.collapse = conv.blank = None
        end = hit.offset + len(hit.line)
        if end > self._looked:
            self._looked = end
        if hit.matcher in self._progress:
            st = self._sampler.get(hit.matcher)
            if st is None:
                st = self._sampler[hit.matcher] = _ProgressSampler()
            st.kept(_Collapser._sig(conv, self.ctx))
        return out

    def _skip_progress(self, hit: Any) -> bool:
        """Whether a progress line is left out (see _ProgressSampler). A line left out is still
        dated, so that the file's clock (``ctx.last_at``) moves exactly as if it were converted."""
        matcher = hit.matcher
        if self._last_of.get(matcher) == hit.offset:
            return False  # the last of its matcher in the chunk
        if matcher in self._checkpoints and hit.group("checkpoint"):
            return False  # a checkpoint is never left out (retry guards read it)
        st = self._sampler.get(matcher)
        conv = self.converter
        if st is None or st.sig != _Collapser._sig(conv, self.ctx):
            return False  # the first line, or the file's context changed since the last one kept
        _, at = conv._when(hit.line.decode("utf-8", "replace"), self.ctx, self._before(hit))
        if not st.skip(at):
            return False
        conv.progress_skipped += 1
        return True

    def grown(self) -> list[Flood]:
        """The floods of this batch that grew since they were handed on. ``item`` hands a flood
        on at its first repeat in a batch; whoever applies floods as they come (the controller)
        applies these after the hits it converted, or the batch's later repeats would wait for
        the next batch to be counted (and the last batch's, for ever)."""
        if self._collapse is None:
            return []
        return [f for f in self._collapse.touched if f.count > f.applied]

    def feed(self, data: bytes) -> list[Item]:
        return [(h.line_no, h.offset, self.item(h)) for h in self.scan(data)]

    def flush(self) -> list[Item]:
        return [(h.line_no, h.offset, self.item(h)) for h in self.scan_end()]

    def _begin(self, data: bytes, base: int) -> None:
        self._data, self._base = data, base
        if self._collapse is not None:
            self._collapse.touched.clear()  # a new batch: each grown flood is handed on once more
