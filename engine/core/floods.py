"""Floods: one fact with a count instead of a fact per line, and the shortcut for their repeats.

A line of the same shape as a fact emitted within FLOOD_WINDOW is a repeat of it: counted on a
``Flood`` (with who repeated it), never a fact of its own. ``Collapser`` keeps the floods of one
stream, and templates that let a repeat skip the full conversion.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

from engine.core.context import FileContext
from engine.core.groups import MAX_TEXT, group_type
from engine.core.linetime import has_stamp
from engine.facts import Fact, clean_text
from engine.rulebook.model import Matcher

if TYPE_CHECKING:
    from engine.core.converter import HitConverter

SLOW = object()  # the shortcut does not apply: convert the hit in full

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
#: kept apart after all where a fact is evidence about one rank (its matcher's attrs say
#: ``rank_evidence``): attribution compares the ranks' lines, so one rank's is no repeat of another's
PER_RANK = frozenset({"rank", "local_rank", "seq", "node"})


def _varying(job_log: bool, per_rank: bool) -> frozenset[str]:
    skip = VARYING | VARYING_IN_JOB_LOGS if job_log else VARYING
    return skip - PER_RANK if per_rank else skip


# digit-blind on purpose (no literal digit, every class holds all digits or none), so that text
# equal but for its digits has one shape: ``Collapser.fast`` relies on it
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
    skip = _varying(job_log, "rank_evidence" in attrs)
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
    #: (host, peer, origin) of repeats that name a transport peer (attribution: core.suspects)
    peers: set[tuple[str, str, str]] = field(default_factory=set, repr=False)

    @property
    def at(self) -> float:
        return self.last_at

    def seen(self, attrs: Mapping[str, Any]) -> None:
        node, rank = attrs.get("node"), attrs.get("rank", attrs.get("local_rank"))
        if node is not None and len(self.nodes) < FLOOD_SEEN_MAX:
            self.nodes.add(str(node))
        if isinstance(rank, int) and len(self.ranks) < FLOOD_SEEN_MAX and "rank" in attrs:
            self.ranks.add(rank)
        peer = attrs.get("peer")
        if node is not None and isinstance(peer, str) and len(self.peers) < FLOOD_SEEN_MAX:
            self.peers.add((str(node), peer[:80], self.last_origin))

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


class Collapser:
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
        skip = _varying(self.job_log or tuple(m.sources) == ("job",), "rank_evidence" in m.attrs)
        keyed = []
        for name, raw in groups.items():
            if raw is None or raw == "":
                continue
            typ = group_type(m, name)
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
        """The outcome of ``repeat`` for a line with a template, or SLOW."""
        t = self.templates.get((index, blank))
        if t is None:
            return SLOW
        entry = t.shapes.get(tuple(map(groups.get, t.keyed)))
        if entry is None or t.sig != self._sig(conv, ctx):
            return SLOW
        shape, dropped, refusals, cached, version = entry
        if version == self.version:
            flood = cached  # self.shapes has not changed since the lookup below
        else:
            flood = self.shapes.get(shape)
            entry[3], entry[4] = flood, self.version
        if flood is None:
            return SLOW
        _, at = conv._when(line, ctx, before, t.timeless)  # the full conversion would do the same again
        if at - flood.first_at > self.window or at < flood.first_at:
            return SLOW
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
