"""Facts: the immutable records that flow from sources through the rule engine.

A fact has a ``kind`` (see ``KINDS``), flat JSON-serialisable ``attrs``, a time ``at`` in
seconds (from the clock that produced it: wall time live, the log's own timestamps in replay)
and an ``origin`` saying where it came from (``path:line``, ``kmsg:node``,
``nvml:node:gpu0:ecc_dbe_volatile``, ``slurm:squeue``...). Origin is what makes
``recover explain`` possible.

Usage::

    f = Fact.make("xid", {"code": 79, "node": "n3"}, at=1700000000.0, origin="kern.log:12")
    line = f.to_json()
    assert Fact.from_json(line) == f
"""

from __future__ import annotations
from engine.errors import FactError

import hashlib
import json
import re
import math
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

__all__ = [
    "Fact",
    "FactError",
    "KINDS",
    "SOURCE_KINDS",
    "SOURCE_KIND_ORDER",
    "DERIVED_KINDS",
    "NODE_RE",
    "JOB_RE",
    "clean_text",
    "MAX_VALUE",
    "JOB_ACTIVE_STATES",
    "DECISIONS",
]

#: what an incident may be decided to: the vocabulary rulebooks, config, reports and the policy share
DECISIONS = ("restart", "isolate_and_restart", "stop", "observe")

#: the one rule for a node name (a DNS label's length; Slurm node names fit it) and a Slurm job id
#: (array tasks as 123_4): anything a log, a spool file or a template offers is checked against these
NODE_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,62})$")
JOB_RE = re.compile(r"^[0-9]{1,12}(?:_[0-9]{1,9})?$")
#: job states in which a job holds its nodes (Slurm's names)
JOB_ACTIVE_STATES = frozenset({"RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED"})
MAX_VALUE = 512
#: C0 and C1 controls (U+009B is a one-character CSI: terminals run what follows it), and the
#: zero-width and bidi characters that make shown text differ from what it is
_CTRL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2066-\u2069]")


def clean_text(value: str, limit: int = MAX_VALUE) -> str:
    """Bounded, with control and bidi characters removed: safe to show and to store."""
    if len(value) > limit * 4:
        value = value[: limit * 4]
    value = _CTRL.sub("", value)
    return value[:limit]


#: kinds that sources produce, in the order the rulebook schema lists them
SOURCE_KIND_ORDER = (
    "log",
    "xid",
    "gpu_counter",
    "gpu_state",
    "job",
    "node",
    "progress",
    "stall",
    "slow_node",
    "log_end",
    # one piece of evidence pointing at one global rank of a job attempt (core.rank_signals)
    "rank_signal",
)
SOURCE_KINDS = frozenset(SOURCE_KIND_ORDER)
#: kinds that rules derive
DERIVED_KINDS = frozenset({"symptom", "fault", "decision", "action"})
KINDS = SOURCE_KINDS | DERIVED_KINDS

_SCALARS = (str, int, float, bool, type(None))
#: the largest integer a fact may carry (what the store can hold)
MAX_INT = (1 << 63) - 1


def _check_attrs(attrs: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in attrs.items():
        t = type(value)
        if (t is str or t is bool or value is None or (t is int and -MAX_INT <= value <= MAX_INT)) and type(key) is str:
            out[key] = value  # the common case, valid as it is
        else:
            out[key] = _checked(key, value)
    return out


def _checked(key: Any, value: Any) -> Any:
    """One attribute, checked: its value as a fact holds it (a list as a tuple)."""
    if not isinstance(key, str):
        raise FactError(f"attribute names must be strings, got {key!r}")
    if isinstance(value, (list, tuple)):
        if not all(isinstance(v, _SCALARS) for v in value):
            raise FactError(f"attribute {key!r}: lists may hold scalars only")
        value = tuple(value)
    elif not isinstance(value, _SCALARS):
        raise FactError(f"attribute {key!r}: {type(value).__name__} is not a flat JSON value")
    if isinstance(value, float) and not math.isfinite(value):
        raise FactError(f"attribute {key!r}: {value} is not a finite number")
    for v in value if isinstance(value, tuple) else (value,):
        if isinstance(v, int) and not -MAX_INT <= v <= MAX_INT:
            raise FactError(f"attribute {key!r}: {v} is out of range")
    return value


#: ``json.dumps(..., sort_keys=True, default=list)`` without building an encoder per call
_ID_JSON = json.JSONEncoder(sort_keys=True, default=list)


@dataclass(frozen=True, slots=True)
class Fact:
    kind: str
    attrs: Mapping[str, Any]
    at: float
    origin: str
    id: str = field(default="")

    @classmethod
    def make(cls, kind: str, attrs: Mapping[str, Any], at: float, origin: str, id: str | None = None) -> "Fact":
        """Validate and freeze. ``id`` defaults to a content hash (kind, attrs, at, origin), so the
        same evidence seen twice (an agent restarted, a spool line re-read) has the same id."""
        if kind not in KINDS:
            raise FactError(f"unknown fact kind {kind!r}; known: {', '.join(sorted(KINDS))}")
        clean = _check_attrs(attrs)
        at = float(at)
        if not math.isfinite(at):
            raise FactError(f"fact time {at} is not finite")
        if id is None:
            payload = _ID_JSON.encode([kind, clean, at, origin])
            id = hashlib.blake2b(payload.encode(), digest_size=10).hexdigest()
        return cls(kind, MappingProxyType(clean), at, str(origin), id)

    def get(self, name: str, default: Any = None) -> Any:
        return self.attrs.get(name, default)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "at": self.at,
            "origin": self.origin,
            "attrs": {k: list(v) if isinstance(v, tuple) else v for k, v in self.attrs.items()},
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Fact":
        try:
            return cls.make(d["kind"], d.get("attrs") or {}, d["at"], d.get("origin", "?"), d.get("id"))
        except (KeyError, TypeError) as exc:
            raise FactError(f"not a fact record: {exc}") from None

    @classmethod
    def from_json(cls, line: str | bytes) -> "Fact":
        try:
            d = json.loads(line)
        except (ValueError, UnicodeDecodeError) as exc:
            raise FactError(f"not JSON: {exc}") from None
        if not isinstance(d, dict):
            raise FactError("not a JSON object")
        return cls.from_dict(d)
