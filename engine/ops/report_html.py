"""The review report as one self-contained HTML page: inline CSS and inline SVG charts drawn
here (no JavaScript, no CDN, no fonts to fetch), so it opens from a file or an e-mail attachment.

Charts: incidents over time by fault class (stacked bars), agreement per rule (horizontal bars
against the autonomy threshold), detection latency histogram. Every value shown comes from the
report dict of ``engine.ops.report.build_report``; every text is escaped.

Usage::

    Path("report.html").write_text(render_html(build_report(store)))
"""

from __future__ import annotations

import logging
from html import escape
from typing import Any, Mapping, Sequence

from engine.ops.report import autonomy_snippet, fmt_rate, fmt_seconds

logger = logging.getLogger(__name__)

__all__ = ["render_html", "class_color", "PALETTE", "AGREE_COLORS", "LATENCY_COLOR"]

#: one color per fault class, in the order of the shipped declarations (hardware reds/oranges first)
PALETTE = (
    "#d62728",
    "#ff7f0e",
    "#8c564b",
    "#e377c2",
    "#9467bd",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
    "#1f77b4",
    "#2ca02c",
    "#98df8a",
    "#ffbb78",
    "#aec7e8",
    "#c5b0d5",
    "#c49c94",
    "#f7b6d2",
)
_OTHER = "#444444"
#: agreement bars (at/above the threshold, within 15 points below, further below) and latency bars:
#: colors outside PALETTE, so no chart can be mistaken for another
AGREE_COLORS = ("#1b7f3b", "#e6a000", "#b2182b")
LATENCY_COLOR = "#4c72b0"
_FONT = "font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif"


_ORDER: list[str] | None = None


def _class_order() -> list[str]:
    from engine.ops.schema_json import _shipped_fault_classes

    global _ORDER
    if _ORDER is None:
        _ORDER = _shipped_fault_classes()
    return _ORDER


def class_color(fault_class: str) -> str:
    names = _class_order()
    return PALETTE[names.index(fault_class) % len(PALETTE)] if fault_class in names else _OTHER


def _e(value: Any) -> str:
    return escape(str(value), quote=True)


def _nice_max(value: float) -> int:
    """A round axis maximum at or above value."""
    if value <= 5:
        return max(1, int(value))
    for step in (1, 2, 2.5, 5, 10):
        magnitude = 10 ** (len(str(int(value))) - 1)
        top = step * magnitude
        if top >= value:
            return int(top)
    return int(value)


def _svg_open(chart_id: str, width: int, height: int, title: str) -> str:
    return (
        f'<svg id="{chart_id}" class="chart" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{_e(title)}" style="{_FONT}">'
        f'<title>{_e(title)}</title><rect class="background" x="0" y="0" width="{width}" height="{height}" fill="#ffffff"/>'
    )


def _no_data(chart_id: str, title: str, why: str, width: int = 960, height: int = 80) -> str:
    return (
        _svg_open(chart_id, width, height, title)
        + f'<text class="no-data" x="{width / 2}" y="{height / 2}" text-anchor="middle" font-size="14" fill="#666">'
        f"{_e(why)}</text></svg>"
    )


def _y_axis(x0: float, y0: float, plot_h: float, top: int, plot_w: float) -> list[str]:
    out = []
    for frac in (0, 0.5, 1):
        y = y0 - plot_h * frac
        label = top * frac
        out.append(f'<line x1="{x0}" y1="{y:.1f}" x2="{x0 + plot_w}" y2="{y:.1f}" stroke="#e5e5e5"/>')
        out.append(f'<text x="{x0 - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="11" fill="#555">{label:g}</text>')
    return out


def timeline_svg(timeline: Mapping[str, Any]) -> str:
    title = f"Incidents per {timeline['bucket']} by fault class"
    buckets: Sequence[str] = timeline["buckets"]
    if not buckets:
        return _no_data("chart-timeline", title, "no closed incidents in this period")
    counts = timeline["counts"]
    classes = timeline["classes"]
    width, height, left, right, top_m, bottom = 960, 320, 50, 20, 20, 80
    plot_w, plot_h = width - left - right, height - top_m - bottom
    top = _nice_max(max(sum(counts.get(b, {}).values()) for b in buckets))
    slot = plot_w / len(buckets)
    bar_w = max(1.0, slot * 0.8)
    y0 = top_m + plot_h
    parts = [_svg_open("chart-timeline", width, height, title), *_y_axis(left, y0, plot_h, top, plot_w)]
    for i, b in enumerate(buckets):
        x = left + i * slot + (slot - bar_w) / 2
        y = y0
        for fc in classes:
            n = counts.get(b, {}).get(fc, 0)
            if not n:
                continue
            h = plot_h * n / top
            y -= h
            parts.append(
                f'<rect class="bar" data-class="{_e(fc)}" data-count="{n}" x="{x:.1f}" y="{y:.1f}" '
                f'width="{bar_w:.1f}" height="{h:.1f}" fill="{class_color(fc)}"><title>{_e(b)} {_e(fc)}: {n}</title></rect>'
            )
    ticks = sorted({0, len(buckets) // 2, len(buckets) - 1})
    for i in ticks:
        x = left + i * slot + slot / 2
        parts.append(
            f'<text x="{x:.1f}" y="{y0 + 16}" text-anchor="middle" font-size="11" fill="#555">{_e(buckets[i])}</text>'
        )
    lx, ly = left, y0 + 36
    for fc in classes:
        parts.append(
            f'<rect class="legend" x="{lx}" y="{ly - 10}" width="12" height="12" fill="{class_color(fc)}"/>'
            f'<text x="{lx + 16}" y="{ly}" font-size="12" fill="#222">{_e(fc)}</text>'
        )
        lx += 24 + 7 * len(fc)
        if lx > width - 160:
            lx, ly = left, ly + 18
    parts.append("</svg>")
    return "".join(parts)


def agreement_svg(by_rule: Sequence[Mapping[str, Any]], min_agreement: float, limit: int = 40) -> str:
    title = "Operator agreement per rule"
    rows = list(by_rule)[:limit]
    if not rows:
        return _no_data("chart-agreement", title, "no rules fired in this period")
    label_w, bar_area, row_h, top_m = 340, 460, 22, 28
    width = label_w + bar_area + 150
    height = top_m + row_h * len(rows) + 24
    parts = [_svg_open("chart-agreement", width, height, title)]
    x_thr = label_w + bar_area * min_agreement
    for frac in (0, 0.5, 1):
        x = label_w + bar_area * frac
        parts.append(f'<text x="{x:.1f}" y="16" text-anchor="middle" font-size="11" fill="#555">{frac:.0%}</text>')
    for i, g in enumerate(rows):
        y = top_m + i * row_h
        key = g["key"] if len(g["key"]) <= 48 else g["key"][:47] + "…"
        parts.append(
            f'<text x="{label_w - 8}" y="{y + 15}" text-anchor="end" font-size="12" fill="#222">{_e(key)}</text>'
        )
        parts.append(f'<rect x="{label_w}" y="{y + 3}" width="{bar_area}" height="{row_h - 6}" fill="#f0f0f0"/>')
        if g["agreement"] is None:
            note = f"no reviews ({g['incidents']} incidents)"
        else:
            w = bar_area * g["agreement"]
            good, near, bad = AGREE_COLORS
            color = (
                good if g["agreement"] >= min_agreement else (near if g["agreement"] >= min_agreement - 0.15 else bad)
            )
            parts.append(
                f'<rect class="bar" data-rule="{_e(g["key"])}" x="{label_w}" y="{y + 3}" width="{w:.1f}" '
                f'height="{row_h - 6}" fill="{color}"><title>{_e(g["key"])}: {fmt_rate(g["agreement"])} of '
                f"{g['reviewed']} reviewed</title></rect>"
            )
            note = f"{fmt_rate(g['agreement'])} of {g['reviewed']}"
        parts.append(f'<text x="{label_w + bar_area + 8}" y="{y + 15}" font-size="12" fill="#333">{_e(note)}</text>')
    parts.append(
        f'<line class="threshold" x1="{x_thr:.1f}" y1="{top_m - 4}" x2="{x_thr:.1f}" y2="{height - 18}" '
        f'stroke="#333" stroke-dasharray="4 3"/>'
    )
    parts.append(
        f'<text x="{x_thr:.1f}" y="{height - 4}" text-anchor="middle" font-size="11" fill="#333">'
        f"autonomy threshold {min_agreement:.0%}</text></svg>"
    )
    return "".join(parts)


def latency_svg(latency: Mapping[str, Any]) -> str:
    title = "Detection latency of live incidents"
    if not latency.get("count"):
        return _no_data("chart-latency", title, "no live incidents: replayed incidents have no meaningful latency")
    hist = latency["histogram"]
    width, height, left, right, top_m, bottom = 720, 260, 50, 20, 20, 40
    plot_w, plot_h = width - left - right, height - top_m - bottom
    top = _nice_max(max(b["count"] for b in hist))
    slot = plot_w / len(hist)
    y0 = top_m + plot_h
    parts = [_svg_open("chart-latency", width, height, title), *_y_axis(left, y0, plot_h, top, plot_w)]
    for i, b in enumerate(hist):
        x = left + i * slot + slot * 0.1
        if b["count"]:
            h = plot_h * b["count"] / top
            parts.append(
                f'<rect class="bar" data-bucket="{_e(b["label"])}" data-count="{b["count"]}" x="{x:.1f}" '
                f'y="{y0 - h:.1f}" width="{slot * 0.8:.1f}" height="{h:.1f}" fill="{LATENCY_COLOR}">'
                f"<title>{_e(b['label'])}: {b['count']}</title></rect>"
            )
        parts.append(
            f'<text x="{x + slot * 0.4:.1f}" y="{y0 + 16}" text-anchor="middle" font-size="11" fill="#555">'
            f"{_e(b['label'])}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]], cls: str = "") -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _group_rows(groups: Sequence[Mapping[str, Any]]) -> list[list[Any]]:
    out = []
    for g in groups:
        lat = g["latency"]
        out.append(
            [
                g["key"],
                g["incidents"],
                g["reviewed"],
                g["agreed"],
                g["disagreed"],
                fmt_rate(g["agreement"]),
                f"{fmt_seconds(lat['p50'])} / {fmt_seconds(lat['p90'])}" if lat.get("count") else "-",
            ]
        )
    return out


_CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:2rem auto;max-width:1100px;color:#222;padding:0 1rem}
h1{font-size:1.6rem}h2{font-size:1.2rem;margin-top:2rem;border-bottom:1px solid #ddd;padding-bottom:.2rem}
table{border-collapse:collapse;margin:.5rem 0;font-size:.9rem}th,td{border:1px solid #ddd;padding:.25rem .6rem;text-align:left}
th{background:#f6f6f6}td:not(:first-child){font-variant-numeric:tabular-nums}
.eligible{color:#1a7f1a;font-weight:600}.muted{color:#666;font-size:.85rem}pre{background:#f6f6f6;padding:.6rem;border-radius:4px}
.summary span{display:inline-block;margin-right:1.5rem}.summary b{font-size:1.3rem}
svg.chart{display:block;margin:.5rem 0;max-width:100%;height:auto}
"""


def render_html(rep: Mapping[str, Any]) -> str:
    t = rep["totals"]
    th = rep["thresholds"]
    lat = rep["latency"]
    since = f" since {rep['since']}" if rep["since"] else ""
    autonomy_rows = [
        [
            a["decision"],
            a["incidents"],
            a["reviewed"],
            fmt_rate(a["agreement"]),
            "eligible" if a["eligible"] else "not yet",
            a["why_not"] or "-",
        ]
        for a in rep["autonomy"]
    ]
    disagreements = [
        [
            d["incident"],
            d["fault_class"],
            d["decision"],
            ", ".join(d["nodes"]) or "-",
            ", ".join(d["rules"]) or "-",
            d["did"] or "-",
            d["by"] or "-",
            d["at"],
        ]
        for d in rep["disagreements"]
    ]
    lat_line = (
        f"{lat['count']} live incident(s): min {fmt_seconds(lat['min'])}, p50 {fmt_seconds(lat['p50'])}, "
        f"p90 {fmt_seconds(lat['p90'])}, p99 {fmt_seconds(lat['p99'])}, max {fmt_seconds(lat['max'])}"
        if lat.get("count")
        else "No live incidents in this period."
    )
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>Recover review report{_e(since)}</title><style>{_CSS}</style></head><body>",
        f'<h1>Recover review report</h1><p class="muted">{_e(rep["db"])}{_e(since)} — generated {_e(rep["generated_at"])}</p>',
        '<p class="summary">'
        f"<span><b>{t['incidents']}</b> closed incidents</span><span><b>{t['reviewed']}</b> reviewed</span>"
        f"<span><b>{_e(fmt_rate(t['agreement']))}</b> agreement</span><span><b>{t['live']}</b> live</span>"
        + (
            f'<span class="muted">{t["open_not_counted"]} open incident(s) not counted</span>'
            if t["open_not_counted"]
            else ""
        )
        + "</p>",
        "<h2>Incidents over time</h2>",
        timeline_svg(rep["timeline"]),
        "<h2>Agreement per rule</h2>",
        '<p class="muted">The rules that fired in each incident; the bar is the share of reviewed incidents whose '
        "decision the operator agreed with. The dashed line is the autonomy threshold.</p>",
        agreement_svg(rep["by_rule"], float(th["min_agreement"])),
        "<h2>Detection latency</h2>",
        latency_svg(lat),
        f"<p>{_e(lat_line)}</p>",
        f'<p class="muted">{_e(lat["definition"])}</p>',
        "<h2>Autonomy</h2>",
        f"<p>A decision kind is eligible with at least {th['min_reviewed']} reviewed incidents and at least "
        f"{float(th['min_agreement']):.0%} agreement.</p>",
        _table(["decision", "incidents", "reviewed", "agreement", "autonomy", "why not"], autonomy_rows, "autonomy"),
        "<p>To grant what the evidence supports, layer this over the rulebook and run without <code>--dry-run</code>:</p>",
        f"<pre>{_e(rep.get('autonomy_policy') or autonomy_snippet(rep['autonomy']))}</pre>",
        "<h2>By fault class</h2>",
        _table(
            ["fault_class", "incidents", "reviewed", "agree", "disagree", "agreement", "latency p50 / p90"],
            _group_rows(rep["by_fault_class"]),
        ),
        "<h2>By rule</h2>",
        _table(
            ["rule", "incidents", "reviewed", "agree", "disagree", "agreement", "latency p50 / p90"],
            _group_rows(rep["by_rule"]),
        ),
        "<h2>By decision kind</h2>",
        _table(
            ["decision", "incidents", "reviewed", "agree", "disagree", "agreement", "latency p50 / p90"],
            _group_rows(rep["by_decision"]),
        ),
        "<h2>Disagreements</h2>",
        _table(
            ["incident", "fault_class", "decision", "nodes", "rules", "operator did", "by", "reviewed at"],
            disagreements,
        )
        if disagreements
        else "<p>None.</p>",
        "</body></html>",
    ]
    return "\n".join(parts)
