"""The compiled policy: typed, frozen, with no defaults of its own.

``build_policy`` turns the layered ``policy:`` document (durations already in seconds) into a
``Policy`` of frozen dataclasses (``Retry``, ``BlastRadius``, ``Autonomy``, ...). Every value comes
from the rulebook: the shipped rules/50-policy.yaml is loaded before a site's files even with
``--no-defaults`` (``rulebook.policy_files``), and it sets every key, so it is the one place the
defaults live. A value still missing after layering (the shipped file edited, or a rulebook built
without it) is a compile error naming the key, never a number written here or in the core.

A ``Policy`` also reads as the mapping it was built from (``policy["plans"]``), for printing the
policy as written (``recover rules show``) and for tests; the engine reads attributes only
(tests/rules/test_policy_typed_readers.py checks that).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Iterator, Mapping

__all__ = [
    "Policy",
    "Retry",
    "BlastRadius",
    "Autonomy",
    "Inhibit",
    "Isolate",
    "Hang",
    "Straggler",
    "Suspects",
    "SharedOutage",
    "Scope",
    "SCOPE_MODES",
    "build_policy",
]

LEVELS = ("observe", "recommend", "act")  # autonomy, lowest first
SCOPE_MODES = ("ignore", "recommend", "act")  # a partition's mode, the least Recover does first


@dataclass(frozen=True)
class Retry:
    max_per_job: int
    max_per_fingerprint: int
    window: float
    no_progress_attempts: int
    per_class: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True)
class BlastRadius:
    max_drains: int
    max_fraction: float
    window: float
    max_requeues: int  # requeues (of different jobs) planned or run within window


@dataclass(frozen=True)
class Autonomy:
    """``grants``: decision kind or action name (cancel) -> mode; ``classes``: fault class -> mode."""

    grants: Mapping[str, str]
    classes: Mapping[str, str]

    def of(self, name: str) -> str | None:
        return self.grants.get(name)


@dataclass(frozen=True)
class Inhibit:
    drained_nodes: bool


@dataclass(frozen=True)
class Isolate:
    at_once: frozenset[str]
    drain_retry_for: float


@dataclass(frozen=True)
class Hang:
    bound: float | None  # None: learned from the attempt's own progress intervals
    factor: float
    min_bound: float
    min_samples: int
    require_running: bool
    any_output: bool
    fact_ttl: float


@dataclass(frozen=True)
class Straggler:
    factor: float
    duration: float
    min_peers: int
    window: int
    warmup: int
    baseline: int
    slow_points: int
    table_factor: float  # a table of peers (one measurement each): this many times the others' median
    table_min_peers: int  # ... with at least this many other units in the table


@dataclass(frozen=True)
class Suspects:
    classes: frozenset[str]  # fault classes whose incidents name suspects (collective timeouts)
    max_silent: float  # the most of a world that may be silent for silence to be a signal
    exclude: bool  # a restart excludes the suspects' nodes
    drain_after: int  # suspect in this many different jobs' failed attempts within window: drain
    window: float


@dataclass(frozen=True)
class SharedOutage:
    classes: frozenset[str]  # fault classes that can be a shared outage
    min_jobs: int  # distinct failing jobs within window ...
    min_users: int  # ... of at least this many distinct users, where the scheduler names them
    window: float
    quiet: float  # it ends when no new failure of its class came for this long
    hold_limit: float  # ... or when it has held the jobs' requeues this long


@dataclass(frozen=True)
class Scope:
    """What Recover may touch (engine.core.scope): a partition's mode (``partitions``, else
    ``default``), and whether job comments are read (``job_comment``)."""

    default: str
    partitions: Mapping[str, str]
    job_comment: bool


@dataclass(frozen=True)
class Policy(Mapping[str, Any]):
    settle: float
    cascade: float
    distinct_lines: int
    decisions: Mapping[str, str]
    priorities: Mapping[str, int]
    plans: Mapping[str, tuple[str, ...]]
    retry: Retry
    blast_radius: BlastRadius
    autonomy: Autonomy
    inhibit: Inhibit
    isolate: Isolate
    hang: Hang
    straggler: Straggler
    suspects: Suspects
    shared_outage: SharedOutage
    scope: Scope
    thresholds: Mapping[str, Any]
    #: the zone of stamps without one (``core.linetime.log_zone`` checks it); None: not set
    log_timezone: str | None = None
    #: the layered document it was built from, as written (durations in seconds)
    document: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}), repr=False, compare=False)

    # the mapping view: the policy as written, for printing and the readers not yet on attributes
    def __getitem__(self, key: str) -> Any:
        return self.document[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.document)

    def __len__(self) -> int:
        return len(self.document)


class _Reader:
    """Reads one section of the document; records what is missing instead of inventing it."""

    def __init__(self, doc: Mapping[str, Any], prefix: str, missing: list[str]):
        self.doc = doc if isinstance(doc, Mapping) else {}
        self.prefix = prefix
        self.missing = missing

    def __call__(self, key: str, cast: Any, nullable: bool = False) -> Any:
        if key not in self.doc or (self.doc[key] is None and not nullable):
            self.missing.append(f"{self.prefix}{key}")
            return None
        value = self.doc[key]
        try:
            return None if value is None else cast(value)
        except (TypeError, ValueError):  # the schema check has reported it; the load fails there
            return None

    def section(self, key: str) -> _Reader:
        return _Reader(self.doc.get(key) or {}, f"{self.prefix}{key}.", self.missing)


def _ints(value: Any) -> dict[str, int]:
    """fault class -> a whole number; entries the schema check refused are left out."""
    items = value.items() if isinstance(value, Mapping) else ()
    return {str(k): v for k, v in items if isinstance(v, int) and not isinstance(v, bool)}


def build_policy(document: Mapping[str, Any]) -> tuple[Policy, list[str]]:
    """The typed policy of a layered, validated policy document, and the keys it lacks (the
    compiler reports each as an error; a policy with missing keys is never handed to the core)."""
    missing: list[str] = []
    top = _Reader(document, "policy.", missing)
    r, b, a = top.section("retry"), top.section("blast_radius"), top.section("autonomy")
    i, h, s, inh = top.section("isolate"), top.section("hang"), top.section("straggler"), top.section("inhibit")
    sus, out, sc = top.section("suspects"), top.section("shared_outage"), top.section("scope")
    parts = sc("partitions", dict) or {}
    autonomy_doc = dict(a.doc)
    classes = autonomy_doc.pop("classes", None)
    classes = classes if isinstance(classes, Mapping) else {}
    values: dict[str, Any] = {
        "settle": top("settle", float),
        "cascade": top("cascade", float),
        "distinct_lines": top("distinct_lines", int),
        "decisions": MappingProxyType(dict(document.get("decisions") or {})),
        "priorities": MappingProxyType(dict(document.get("priorities") or {})),
        "plans": MappingProxyType({k: tuple(v) for k, v in dict(document.get("plans") or {}).items()}),
        "retry": Retry(
            r("max_per_job", int),
            r("max_per_fingerprint", int),
            r("window", float),
            r("no_progress_attempts", int),
            MappingProxyType(_ints(r.doc.get("per_class"))),
        ),
        "blast_radius": BlastRadius(
            b("max_drains", int), b("max_fraction", float), b("window", float), b("max_requeues", int)
        ),
        "autonomy": Autonomy(
            MappingProxyType({str(k): str(v) for k, v in autonomy_doc.items() if v in LEVELS}),
            MappingProxyType({str(k): str(v) for k, v in dict(classes).items() if v in LEVELS}),
        ),
        "inhibit": Inhibit(inh("drained_nodes", bool)),
        "isolate": Isolate(frozenset(str(c) for c in (i("at_once", tuple) or ())), i("drain_retry_for", float)),
        "hang": Hang(
            h("bound", float, nullable=True),
            h("factor", float),
            h("min_bound", float),
            h("min_samples", int),
            h("require_running", bool),
            h("any_output", bool),
            h("fact_ttl", float),
        ),
        "straggler": Straggler(
            s("factor", float),
            s("duration", float),
            s("min_peers", int),
            s("window", int),
            s("warmup", int),
            s("baseline", int),
            s("slow_points", int),
            s("table_factor", float),
            s("table_min_peers", int),
        ),
        "suspects": Suspects(
            frozenset(str(c) for c in (sus("classes", tuple) or ())),
            sus("max_silent", float),
            sus("exclude", bool),
            sus("drain_after", int),
            sus("window", float),
        ),
        "shared_outage": SharedOutage(
            frozenset(str(c) for c in (out("classes", tuple) or ())),
            out("min_jobs", int),
            out("min_users", int),
            out("window", float),
            out("quiet", float),
            out("hold_limit", float),
        ),
        "scope": Scope(
            sc("default", str),
            MappingProxyType({str(k): str(v) for k, v in parts.items() if v in SCOPE_MODES}),
            sc("job_comment", bool),
        ),
        "thresholds": MappingProxyType(dict(document.get("thresholds") or {})),
        "log_timezone": zone if isinstance(zone := document.get("log_timezone"), str) else None,
    }
    return Policy(**values, document=document), missing
