"""From one scanner hit to a fact or a context update: typed, validated, trusted as far as its source.

Everything here treats log text as hostile data: group values are bounded, control characters
are removed, node names and job ids must match strict patterns or are dropped (and counted).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, cast

from engine.core.context import ClusterContext, FileContext, expand_hostlist
from engine.core.floods import SLOW
from engine.core.groups import MAX_TEXT, group_type, number
from engine.core.linetime import LineClock
from engine.core.xid import decode_xid
from engine.facts import JOB_RE, NODE_RE, Fact, clean_text
from engine.rulebook.model import Matcher

if TYPE_CHECKING:
    from engine.core.floods import Collapser, Flood


#: a start line printed again this long after the previous one, with evidence in between, is a
#: new attempt (the tasks of one start print their banners within seconds of each other)
START_GAP = 60.0


class HitConverter:
    """Turns (matcher, groups, line) into a Fact or a context update, with counters."""

    def __init__(
        self,
        matchers: Iterable[Matcher],
        cluster: ClusterContext | None = None,
        clock: "Callable[[], float] | None" = None,
    ):
        # (a rulebook's own tuple is kept as it is: what readers derive from it is keyed on it)
        self.matchers = matchers if isinstance(matchers, tuple) else tuple(matchers)
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
            kind = group_type(m, name)
            value: Any = clean_text(raw)
            if kind in ("int", "float"):
                value = number(raw.strip(), kind)
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

    collapse: "Collapser | None" = None  # set per stream by StreamFacts
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
        digits apart: repeats of a shape already seen then take a shortcut (``Collapser.fast``)
        that gives the same answer."""
        m = self.matchers[index]
        if m.unless and any(u in line for u in m.unless):
            return None  # a weak keyword on a line that is no error line (an INFO line)
        collapse, blank = self.collapse, self.blank
        if blank is not None and collapse is not None:
            out = collapse.fast(self, index, m, groups, line, line_no, ctx, before, blank)
            if out is not SLOW:
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
