"""The goodput report (engine.ops.goodput) as one self-contained HTML page (``recover goodput
--html FILE``): inline CSS and static inline SVG charts drawn here, no JavaScript, nothing
fetched (sites are air-gapped), so it opens from a file.

Charts: lost GPU-hours by cause of delay and by fault class (horizontal bars), ETTR per job
measured against modelled (paired bars), and failures per node over time (a grid of days by
nodes, each cell's size its count). Every text shown, job ids and fault classes included, is
escaped: they come from logs and from users.

Usage::

    Path("goodput.html").write_text(render_html(report_from_store(store, now=time.time())))
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from engine.ops.goodput import CAUSES
from engine.ops.goodput_text import CAUSE_NAMES
from engine.ops.report_html import _CSS, _e, _no_data, _svg_open, class_color

__all__ = ["CAUSE_COLORS", "ETTR_COLORS", "NODE_COLOR", "render_html", "hbar_svg", "ettr_svg", "nodes_svg"]

#: one color per cause of lost GPU-hours (none of them a fault class's, see report_html.PALETTE)
CAUSE_COLORS = {
    "work_lost": "#6a3d9a",
    "detection": "#b15928",
    "decision": "#33a02c",
    "restart": "#1f4e79",
    "queue": "#a6761d",
}
#: measured, modelled
ETTR_COLORS = ("#08519c", "#9ecae1")
NODE_COLOR = "#cb181d"


def _fmt(x: float) -> str:
    return f"{x:.3g}" if abs(x) < 100 else f"{x:,.0f}"


def hbar_svg(chart_id: str, title: str, rows: Sequence[tuple[str, float, str]], unit: str, empty: str) -> str:
    """Horizontal bars, one per (label, value, color), longest first as given."""
    rows = [r for r in rows if r[1] > 0]
    if not rows:
        return _no_data(chart_id, title, empty)
    width, left, right, bar_h, gap, top_m = 960, 240, 110, 22, 8, 12
    height = top_m * 2 + len(rows) * (bar_h + gap)
    plot_w = width - left - right
    top = max(v for _, v, _ in rows)
    parts = [_svg_open(chart_id, width, height, title)]
    for i, (label, value, color) in enumerate(rows):
        y = top_m + i * (bar_h + gap)
        w = max(1.0, plot_w * value / top)
        parts.append(
            f'<text x="{left - 8}" y="{y + bar_h * 0.7:.1f}" text-anchor="end" font-size="12" fill="#222">'
            f"{_e(label[:40])}</text>"
            f'<rect class="bar" data-label="{_e(label)}" data-value="{value:.6g}" x="{left}" y="{y}" '
            f'width="{w:.1f}" height="{bar_h}" fill="{color}"><title>{_e(label)}: {_fmt(value)} {_e(unit)}</title></rect>'
            f'<text x="{left + w + 6:.1f}" y="{y + bar_h * 0.7:.1f}" font-size="12" fill="#444">'
            f"{_fmt(value)} {_e(unit)}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def ettr_svg(jobs: Sequence[Mapping[str, Any]], limit: int = 30) -> str:
    """ETTR per job: the measured bar beside the modelled one, on a 0-1 axis."""
    title = "ETTR per job, measured against modelled"
    shown = [j for j in jobs if j["ettr"] is not None or j["model"]["ettr"] is not None][:limit]
    if not shown:
        return _no_data("chart-ettr", title, "no job with a wall time in this window")
    width, height, left, right, top_m, bottom = 960, 300, 50, 20, 20, 70
    plot_w, plot_h = width - left - right, height - top_m - bottom
    y0 = top_m + plot_h
    slot = plot_w / len(shown)
    bar_w = max(2.0, min(40.0, slot * 0.38))
    parts = [_svg_open("chart-ettr", width, height, title)]
    for frac in (0, 0.5, 1):
        y = y0 - plot_h * frac
        parts.append(
            f'<line x1="{left}" y1="{y:.1f}" x2="{left + plot_w}" y2="{y:.1f}" stroke="#e5e5e5"/>'
            f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="11" fill="#555">{frac:g}</text>'
        )
    for i, j in enumerate(shown):
        cx = left + i * slot + slot / 2
        for k, (kind, value) in enumerate((("measured", j["ettr"]), ("modelled", j["model"]["ettr"]))):
            if value is None:
                continue
            h = plot_h * max(0.0, min(1.0, value))
            x = cx - bar_w + k * bar_w
            parts.append(
                f'<rect class="bar" data-job="{_e(j["job"])}" data-kind="{kind}" data-value="{value:.4f}" '
                f'x="{x:.1f}" y="{y0 - h:.1f}" width="{bar_w:.1f}" height="{max(h, 0.5):.1f}" fill="{ETTR_COLORS[k]}">'
                f"<title>job {_e(j['job'])} {kind}: {value:.3f}</title></rect>"
            )
        parts.append(
            f'<text x="{cx:.1f}" y="{y0 + 16}" text-anchor="middle" font-size="11" fill="#555">{_e(str(j["job"])[:12])}</text>'
        )
    lx = left
    for k, name in enumerate(("measured", "modelled (Kokolis et al.)")):
        parts.append(
            f'<rect class="legend" x="{lx}" y="{y0 + 36}" width="12" height="12" fill="{ETTR_COLORS[k]}"/>'
            f'<text x="{lx + 16}" y="{y0 + 46}" font-size="12" fill="#222">{name}</text>'
        )
        lx += 200
    parts.append("</svg>")
    return "".join(parts)


def nodes_svg(failures: Sequence[Mapping[str, Any]], limit: int = 20) -> str:
    """Failures per node over time: days across, the costliest nodes down; a cell's size is its
    count (a failure counts once for each node it names)."""
    title = "Failures per node over time (UTC days)"
    counts: dict[tuple[str, str], int] = {}
    cost: dict[str, float] = {}
    for f in failures:
        for n in f["nodes"]:
            counts[(n, f["day"])] = counts.get((n, f["day"]), 0) + 1
            cost[n] = cost.get(n, 0.0) + f["lost_gpu_hours"] / len(f["nodes"])
    if not counts:
        return _no_data("chart-nodes", title, "no failure named a node in this window")
    nodes = sorted(cost, key=lambda n: (-cost[n], n))[:limit]
    days = sorted({d for _, d in counts})
    width, left, right, top_m, bottom, row_h = 960, 140, 20, 16, 40, 24
    height = top_m + bottom + row_h * len(nodes)
    col_w = (width - left - right) / len(days)
    cell = min(row_h, col_w) - 4
    top = max(counts.values())
    parts = [_svg_open("chart-nodes", width, height, title)]
    for r, n in enumerate(nodes):
        y = top_m + r * row_h
        parts.append(
            f'<text x="{left - 8}" y="{y + row_h * 0.65:.1f}" text-anchor="end" font-size="12" fill="#222">{_e(n[:20])}</text>'
            f'<line x1="{left}" y1="{y + row_h / 2:.1f}" x2="{width - right}" y2="{y + row_h / 2:.1f}" stroke="#f0f0f0"/>'
        )
        for c, d in enumerate(days):
            k = counts.get((n, d), 0)
            if not k:
                continue
            side = max(4.0, cell * (k / top) ** 0.5)
            x = left + c * col_w + (col_w - side) / 2
            parts.append(
                f'<rect class="bar" data-node="{_e(n)}" data-day="{_e(d)}" data-count="{k}" x="{x:.1f}" '
                f'y="{y + (row_h - side) / 2:.1f}" width="{side:.1f}" height="{side:.1f}" fill="{NODE_COLOR}">'
                f"<title>{_e(n)} {_e(d)}: {k} failure(s)</title></rect>"
            )
    y0 = top_m + row_h * len(nodes)
    for c in sorted({0, len(days) // 2, len(days) - 1}):
        parts.append(
            f'<text x="{left + c * col_w + col_w / 2:.1f}" y="{y0 + 18}" text-anchor="middle" font-size="11" '
            f'fill="#555">{_e(days[c])}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _table(head: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    th = "".join(f"<th>{_e(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{th}</tr>{body}</table>"


def _r(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def render_html(rep: Mapping[str, Any]) -> str:
    c = rep["cluster"]
    lost = c["lost_gpu_hours"]
    causes = [(CAUSE_NAMES[k], lost[k], CAUSE_COLORS[k]) for k in CAUSES]
    classes = [(g["fault_class"], g["lost_gpu_hours"]["total"], class_color(g["fault_class"])) for g in rep["by_class"]]
    mark = "~" if c["estimated"] else ""
    jobs = [
        [
            j["job"],
            j["state"] or "-",
            len(j["attempts"]),
            j["failures"],
            ("~" if j["estimates"] else "") + _r(j["ettr"]),
            ("~" if j["model"]["estimates"] else "") + _r(j["model"]["ettr"]),
            f"{j['lost_gpu_hours']['total']:.2f}",
        ]
        for j in rep["jobs"]
    ]
    lemons = [[g["node"], g["failures"], f"{g['lost_gpu_hours']:.2f}"] for g in rep["by_node"][:10]]
    rate = rep["failure_rate"]["failure_rate_per_node_day"]
    estimates = "".join(f"<li>job {_e(j['job'])}: {_e(w)}</li>" for j in rep["jobs"] for w in j["estimates"])
    return "".join(
        [
            "<!DOCTYPE html><html lang=en><head><meta charset=utf-8>",
            "<meta http-equiv=Content-Security-Policy content=\"default-src 'none'; style-src 'unsafe-inline'\">",
            f"<title>Recover goodput report</title><style>{_CSS}</style></head><body>",
            "<h1>Recover goodput report</h1>",
            '<p class="summary">',
            f"<span>cluster ETTR <b>{mark}{_r(c['ettr'])}</b></span>",
            f"<span>wall <b>{c['wall_gpu_hours']:.1f}</b> GPU-h</span>",
            f"<span>lost to failures <b>{lost['total']:.1f}</b> GPU-h</span>",
            f"<span>{c['jobs']} job(s), {c['failures']} failure(s)</span></p>",
            f'<p class="muted">GPUs per node {rep["gpus_per_node"]} ({_e(rep["gpus_per_node_from"])}); '
            f"site failure rate {'-' if rate is None else f'{rate:.4g}'} per node-day; "
            "~ marks a figure taken from a missing input (listed at the end). docs/goodput.md defines every figure.</p>",
            "<h2>Lost GPU-hours by cause of delay</h2>",
            hbar_svg("chart-causes", "Lost GPU-hours by cause", causes, "GPU-h", "no GPU-hours lost in this window"),
            "<h2>Lost GPU-hours by fault class</h2>",
            hbar_svg("chart-classes", "Lost GPU-hours by fault class", classes, "GPU-h", "no failure in this window"),
            "<h2>ETTR per job: measured against modelled</h2>",
            ettr_svg(rep["jobs"]),
            _table(["job", "state", "attempts", "failures", "ETTR", "modelled", "lost GPU-h"], jobs),
            "<h2>Failures per node over time</h2>",
            nodes_svg(rep["failures"]),
            "<h2>The lemon list</h2>",
            _table(["node", "failures", "lost GPU-h"], lemons),
            "<h2>Estimates</h2>",
            f"<ul>{estimates}</ul>" if estimates else "<p>none: every figure measured</p>",
            "</body></html>",
        ]
    )
