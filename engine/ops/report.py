"""The review report: how often Recover's decisions matched what operators did, per fault class,
per rule and per decision kind, how fast it detected failures, and which decision kinds have
earned autonomy.

Numbers come from the store only: closed incidents, the rules that fired in each (the firings
table), the latest review of each incident, and the facts for detection latency.

Usage::

    rep = build_report(store, since=parse_since("30d"), thresholds=Thresholds(50, 0.95))
    print_report(rep)                  # rich tables for people
    json.dumps(rep)                    # for tools
    html = render_html(rep)            # engine.ops.report_html
"""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Iterable, Mapping, Sequence

from engine.clock import SYSTEM
from engine.facts import SOURCE_KINDS
from engine.ops.review import ReviewError, latest_reviews, parse_time
from engine.rulebook.model import DECISIONS
from engine.rulebook.spec_types import parse_duration
from engine.store import IncidentRow, Store

logger = logging.getLogger(__name__)

__all__ = [
    "Thresholds",
    "build_report",
    "print_report",
    "parse_since",
    "incident_time",
    "LATENCY_DEFINITION",
    "LATENCY_BUCKETS",
    "LIVE_SKEW_S",
    "latency_summary",
    "autonomy_snippet",
    "fmt_rate",
    "fmt_seconds",
]

#: an incident is live when its engine clock was the wall clock: it opened within this of detected_wall
LIVE_SKEW_S = 60.0
#: engine times before this are not calendar times (logs without timestamps replay at t=0)
_PLAUSIBLE = 946684800.0  # 2000-01-01
LATENCY_BUCKETS: tuple[tuple[float, float, str], ...] = (
    (0, 1, "<1s"),
    (1, 2, "1-2s"),
    (2, 5, "2-5s"),
    (5, 10, "5-10s"),
    (10, 30, "10-30s"),
    (30, 60, "30-60s"),
    (60, 120, "1-2m"),
    (120, 300, "2-5m"),
    (300, 600, "5-10m"),
    (600, math.inf, ">10m"),
)
LATENCY_DEFINITION = (
    "Detection latency = detected_wall (wall time the incident opened) minus the time of its first evidence "
    "(the earliest non-derived fact's `at`). Only live incidents count: those whose engine clock was the wall "
    f"clock, i.e. opened_at is within {int(LIVE_SKEW_S)} s of detected_wall. The live controller stamps each fact "
    "with the wall time it arrived; replayed incidents run on the logs' own (virtual) times, so no latency is "
    "reported for them. A line's own timestamp (logged_at) is not used: log times may be in another time zone."
)
_REL = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(m|h|d|w)\s*$")


@dataclass(frozen=True)
class Thresholds:
    min_reviewed: int = 50
    min_agreement: float = 0.95


def parse_since(text: str | None, now: float | None = None, what: str = "--since") -> float | None:
    """An operator's instant, the one reading every command uses: ``2026-11-01``,
    ``2026-11-01T08:00`` (UTC unless an offset or ``Z`` is given), epoch seconds, or a span back
    from now: ``30m``, ``12h``, ``7d``, ``2w``, ``1h30m``. ReviewError if it is none of them."""
    if text is None or not str(text).strip():
        return None
    m = _REL.match(text)
    span = None
    if m:
        span = float(m.group(1)) * {"m": 60, "h": 3600, "d": 86400, "w": 604800}[m.group(2)]
    elif not text.strip().replace(".", "", 1).isdigit():
        span = parse_duration(text)  # the rulebook's durations too (1h30m, 90s)
    if span is not None:
        return (now if now is not None else SYSTEM.wall()) - span
    try:
        return parse_time(text)
    except ReviewError:
        raise ReviewError(
            f"{what} {text!r}: give a date (2026-11-01), a date and time (2026-11-01T08:00Z), "
            "epoch seconds, or a span back from now (12h, 7d, 2w)"
        ) from None


def incident_time(row: IncidentRow) -> float:
    """When the incident happened: its engine time when that is a calendar time, else when it was detected."""
    return row.opened_at if row.opened_at >= _PLAUSIBLE else row.detected_wall


def _is_live(row: IncidentRow) -> bool:
    return abs(row.detected_wall - row.opened_at) <= LIVE_SKEW_S


def _latency(store: Store, row: IncidentRow) -> float | None:
    if not _is_live(row):
        return None
    times = [f.at for f, _, _ in store.facts(row.id) if f.kind in SOURCE_KINDS]
    if not times:
        return None
    value = row.detected_wall - min(times)
    if value < -1.0:  # evidence stamped after detection: a skewed agent clock, not a latency
        return None
    return max(0.0, value)


def _percentile(sorted_xs: list[float], p: float) -> float:
    return sorted_xs[max(0, math.ceil(p / 100 * len(sorted_xs)) - 1)]


def latency_summary(values: Iterable[float]) -> dict[str, Any]:
    xs = sorted(values)
    if not xs:
        return {"count": 0}
    return {
        "count": len(xs),
        "min": xs[0],
        "p50": _percentile(xs, 50),
        "p90": _percentile(xs, 90),
        "p99": _percentile(xs, 99),
        "max": xs[-1],
        "mean": sum(xs) / len(xs),
    }


def _histogram(values: Iterable[float]) -> list[dict[str, Any]]:
    counts = [0] * len(LATENCY_BUCKETS)
    for v in values:
        for i, (lo, hi, _) in enumerate(LATENCY_BUCKETS):
            if lo <= v < hi:
                counts[i] += 1
                break
    return [
        {"label": label, "lo": lo, "hi": None if math.isinf(hi) else hi, "count": c}
        for (lo, hi, label), c in zip(LATENCY_BUCKETS, counts)
    ]


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class _Group:
    def __init__(self, key: str):
        self.key = key
        self.incidents = 0
        self.agreed = 0
        self.disagreed = 0
        self.latencies: list[float] = []
        self.disagreements: list[dict[str, Any]] = []

    def add(self, item: Mapping[str, Any]) -> None:
        self.incidents += 1
        if item["verdict"] == "agree":
            self.agreed += 1
        elif item["verdict"] == "disagree":
            self.disagreed += 1
            self.disagreements.append(item["disagreement"])
        if item["latency_s"] is not None:
            self.latencies.append(item["latency_s"])

    def to_dict(self) -> dict[str, Any]:
        reviewed = self.agreed + self.disagreed
        return {
            "key": self.key,
            "incidents": self.incidents,
            "reviewed": reviewed,
            "agreed": self.agreed,
            "disagreed": self.disagreed,
            "agreement": (self.agreed / reviewed) if reviewed else None,
            "latency": latency_summary(self.latencies),
            "disagreements": self.disagreements,
        }


def _grouped(items: list[dict[str, Any]], keys_of) -> list[dict[str, Any]]:
    groups: dict[str, _Group] = {}
    for item in items:
        for key in keys_of(item):
            groups.setdefault(key, _Group(key)).add(item)
    return sorted((g.to_dict() for g in groups.values()), key=lambda d: (-d["incidents"], d["key"]))


def _timeline(items: list[dict[str, Any]]) -> dict[str, Any]:
    if not items:
        return {"bucket": "day", "buckets": [], "classes": [], "counts": {}}
    times = [it["time"] for it in items]
    weekly = max(times) - min(times) > 90 * 86400

    def bucket(t: float) -> str:
        d = datetime.fromtimestamp(t, timezone.utc).date()
        if weekly:
            d = d - timedelta(days=d.weekday())
        return d.isoformat()

    first = datetime.fromisoformat(bucket(min(times))).date()
    last = datetime.fromisoformat(bucket(max(times))).date()
    step = timedelta(days=7 if weekly else 1)
    buckets: list[str] = []
    d = first
    while d <= last and len(buckets) < 2000:
        buckets.append(d.isoformat())
        d += step
    counts: dict[str, dict[str, int]] = {}
    for it in items:
        counts.setdefault(bucket(it["time"]), {}).setdefault(it["fault_class"], 0)
        counts[bucket(it["time"])][it["fault_class"]] += 1
    classes = sorted({it["fault_class"] for it in items})
    return {"bucket": "week" if weekly else "day", "buckets": buckets, "classes": classes, "counts": counts}


def _autonomy(by_decision: list[dict[str, Any]], th: Thresholds) -> list[dict[str, Any]]:
    known = {g["key"]: g for g in by_decision}
    out = []
    for decision in list(DECISIONS) + sorted(k for k in known if k not in DECISIONS):
        g = known.get(decision, {"reviewed": 0, "agreement": None, "incidents": 0})
        why = []
        if g["reviewed"] < th.min_reviewed:
            why.append(f"{g['reviewed']} reviewed, needs {th.min_reviewed}")
        if g["agreement"] is None or g["agreement"] < th.min_agreement:
            rate = "no reviews" if g["agreement"] is None else f"agreement {g['agreement']:.1%}"
            why.append(f"{rate}, needs {th.min_agreement:.0%}")
        out.append(
            {
                "decision": decision,
                "eligible": not why,
                "incidents": g["incidents"],
                "reviewed": g["reviewed"],
                "agreement": g["agreement"],
                "why_not": "; ".join(why),
            }
        )
    return out


def autonomy_snippet(autonomy: list[dict[str, Any]]) -> str:
    """The policy a site would set to grant what the evidence supports (the rest keeps recommending)."""
    lines = ["policy:", "  autonomy:"]
    for a in autonomy:
        if a["decision"] in DECISIONS:
            lines.append(f"    {a['decision']}: {'act' if a['eligible'] else 'recommend'}")
    return "\n".join(lines)


def build_report(
    store: Store, since: float | None = None, thresholds: Thresholds = Thresholds(), now: float | None = None
) -> dict[str, Any]:
    now = now if now is not None else store.clock.wall()
    reviews = latest_reviews(store)
    rows = store.incidents()
    open_n = sum(1 for r in rows if r.status != "closed")
    items: list[dict[str, Any]] = []
    live = 0
    for row in rows:
        if row.status != "closed" or (since is not None and incident_time(row) < since):
            continue
        review = reviews.get(row.id)
        verdict = review["verdict"] if review else None
        rules = store.rules_fired(row.id)
        latency = _latency(store, row)
        live += _is_live(row)
        fc = row.fault_class or "unknown"
        decision = row.decision or "unknown"
        items.append(
            {
                "id": row.id,
                "time": incident_time(row),
                "fault_class": fc,
                "decision": decision,
                "rules": rules,
                "verdict": verdict,
                "latency_s": latency,
                "disagreement": None
                if review is None or verdict != "disagree"
                else {
                    "incident": row.id,
                    "job": row.job,
                    "attempt": row.attempt,
                    "fault_class": fc,
                    "decision": decision,
                    "nodes": list(row.nodes),
                    "rules": rules,
                    "did": review.get("did"),
                    "by": review.get("by"),
                    "at": _iso(float(review["at"])),
                },
            }
        )
    latencies = [it["latency_s"] for it in items if it["latency_s"] is not None]
    reviewed = sum(1 for it in items if it["verdict"] is not None)
    agreed = sum(1 for it in items if it["verdict"] == "agree")
    by_decision = _grouped(items, lambda it: [it["decision"]])
    autonomy = _autonomy(by_decision, thresholds)
    return {
        "generated_at": _iso(now),
        "db": store.path,
        "since": _iso(since) if since is not None else None,
        "thresholds": {"min_reviewed": thresholds.min_reviewed, "min_agreement": thresholds.min_agreement},
        "totals": {
            "incidents": len(items),
            "open_not_counted": open_n,
            "live": live,
            "reviewed": reviewed,
            "agreed": agreed,
            "disagreed": reviewed - agreed,
            "agreement": agreed / reviewed if reviewed else None,
        },
        "by_fault_class": _grouped(items, lambda it: [it["fault_class"]]),
        "by_rule": _grouped(items, lambda it: it["rules"] or ["(no rule)"]),
        "by_decision": by_decision,
        "disagreements": [it["disagreement"] for it in items if it["disagreement"]],
        "latency": {"definition": LATENCY_DEFINITION, **latency_summary(latencies), "histogram": _histogram(latencies)},
        "timeline": _timeline(items),
        "autonomy": autonomy,
        "autonomy_policy": autonomy_snippet(autonomy),
    }


# -- text ------------------------------------------------------------------------------------------
def fmt_rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def fmt_seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if value < 10:
        return f"{value:.2f}s"
    if value < 120:
        return f"{value:.0f}s"
    return f"{value / 60:.1f}m"


def _lat(summary: Mapping[str, Any]) -> str:
    if not summary.get("count"):
        return "-"
    return f"{fmt_seconds(summary['p50'])} / {fmt_seconds(summary['p90'])} (n={summary['count']})"


def print_report(rep: Mapping[str, Any], width: int = 120) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    console = Console(width=width)
    t = rep["totals"]
    since = f" since {rep['since']}" if rep["since"] else ""
    console.print(f"[bold]Recover review report[/bold] — {escape(rep['db'])}{escape(since)}")
    console.print(
        f"{t['incidents']} closed incident(s), {t['reviewed']} reviewed, agreement {fmt_rate(t['agreement'])}"
        + (f"; {t['open_not_counted']} open incident(s) not counted" if t["open_not_counted"] else "")
    )

    def table(title: str, groups: Sequence[Mapping[str, Any]], first: str, extra: str | None = None) -> None:
        tab = Table(title=title, title_justify="left")
        for col in (first, "incidents", "reviewed", "agree", "disagree", "agreement", "latency p50 / p90"):
            tab.add_column(col, justify="left" if col == first else "right")
        if extra:
            tab.add_column(extra)
        for g in groups:
            cells: list[Text | str] = [
                Text(str(g["key"])),
                str(g["incidents"]),
                str(g["reviewed"]),
                str(g["agreed"]),
                str(g["disagreed"]),
                fmt_rate(g["agreement"]),
                _lat(g["latency"]),
            ]
            if extra:
                cells.append(g.get("_extra", ""))
            tab.add_row(*cells)
        console.print(tab)

    table("By fault class", rep["by_fault_class"], "fault_class")
    table("By rule (the rules that fired in each incident)", rep["by_rule"], "rule")
    auto = {a["decision"]: a for a in rep["autonomy"]}
    decisions = [
        dict(g, _extra="eligible" if auto.get(g["key"], {}).get("eligible") else "not yet") for g in rep["by_decision"]
    ]
    table("By decision kind", decisions, "decision", "autonomy")

    if rep["disagreements"]:
        tab = Table(title="Disagreements: what the operator did instead", title_justify="left")
        for col in ("incident", "fault_class", "decision", "rules", "operator did", "by"):
            tab.add_column(col)
        for d in rep["disagreements"]:
            # what an operator wrote (and the rulebook's names) is text, never Rich markup: `[/x]`
            # would crash the report and `[red]` would vanish from it
            tab.add_row(
                str(d["incident"]),
                Text(d["fault_class"] or "-"),
                Text(d["decision"] or "-"),
                Text(", ".join(d["rules"]) or "-"),
                Text(d["did"] or "-"),
                Text(d["by"] or "-"),
            )
        console.print(tab)

    lat = rep["latency"]
    console.print(
        "[bold]Detection latency[/bold]: "
        + (
            f"{lat['count']} live incident(s): min {fmt_seconds(lat['min'])}, p50 {fmt_seconds(lat['p50'])}, "
            f"p90 {fmt_seconds(lat['p90'])}, p99 {fmt_seconds(lat['p99'])}, max {fmt_seconds(lat['max'])}"
            if lat["count"]
            else "no live incidents (replayed incidents have no meaningful latency)"
        )
    )
    if lat["count"]:
        top = max(b["count"] for b in lat["histogram"]) or 1
        for b in lat["histogram"]:
            console.print(f"  {b['label']:>7} {'#' * round(30 * b['count'] / top):<30} {b['count']}", highlight=False)
    console.print(f"[dim]{lat['definition']}[/dim]")

    th = rep["thresholds"]
    console.print(
        f"[bold]Autonomy[/bold] (needs ≥ {th['min_reviewed']} reviewed and ≥ {th['min_agreement']:.0%} agreement):"
    )
    for a in rep["autonomy"]:
        mark = "[green]eligible[/green]" if a["eligible"] else f"not yet — {escape(a['why_not'])}"
        console.print(
            f"  {escape(a['decision']):<20} {a['reviewed']:>5} reviewed, agreement {fmt_rate(a['agreement']):>6}: {mark}"
        )
    console.print("To grant what the evidence supports, layer this over the rulebook and run without --dry-run:")
    console.print(rep["autonomy_policy"], highlight=False, markup=False)
