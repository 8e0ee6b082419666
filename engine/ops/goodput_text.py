"""The measured goodput report (``engine.ops.goodput.measure``) as text for people: the cluster,
lost GPU-hours by cause, by fault class, by node (the lemon list) and by day, then each job and
each failure. A figure marked ``~`` is an estimate; the reasons are listed at the end."""

from __future__ import annotations

import math
from datetime import datetime, timezone
from typing import Any, Mapping

from engine.ops.goodput import CAUSES
from engine.ops.goodput_compare import WRITE_NOT_MEASURED

__all__ = ["CAUSE_NAMES", "render_summary", "render_text", "render_what_if"]

CAUSE_NAMES = {
    "work_lost": "work lost since checkpoint",
    "detection": "detection delay",
    "decision": "decision and action",
    "restart": "restart overhead",
    "queue": "queue after requeue",
}
_SHORT = {"work_lost": "work", "detection": "detect", "decision": "decide", "restart": "restart", "queue": "queue"}


def _when(t: float | None) -> str:
    if t is None or not math.isfinite(t):
        return "-"
    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _ratio(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def _gh(x: float) -> str:
    return f"{x:.2f}"


def _dur(s: float) -> str:
    if s >= 3600:
        return f"{s / 3600:.2f}h"
    if s >= 60:
        return f"{s / 60:.1f}m"
    return f"{s:.0f}s"


def _table(head: list[str], rows: list[list[str]], indent: str = "  ") -> list[str]:
    widths = [max(len(str(c)) for c in col) for col in zip(head, *rows)]
    out = []
    for r in [head, *rows]:
        cells = [str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(r, widths))]
        out.append(indent + "  ".join(cells).rstrip())
    return out


def _causes(lost: Mapping[str, float]) -> list[str]:
    return [_gh(lost[c]) for c in CAUSES]


def _compared(rep: Mapping[str, Any]) -> list[str]:
    """Each job's measured ETTR beside the model's, with the inputs the model was given."""
    fr = rep["failure_rate"]
    rate = fr["failure_rate_per_node_day"]
    lines = [
        "",
        "measured against modelled ETTR (Kokolis et al.; ~ an input the store lacks)",
        f"  site failure rate {'-' if rate is None else f'{rate:.4g}'} per node-day: "
        f"{fr['failures']} failure(s) in {fr['node_days']:.3g} node-days run",
    ]
    rows = []
    for j in rep["jobs"]:
        m = j["model"]
        mark = "~" if m["estimates"] else ""
        rows.append(
            [
                j["job"],
                _ratio(m["measured_ettr"]),
                mark + _ratio(m["ettr"]),
                "-" if m["gap"] is None else f"{m['gap']:+.3f}",
                str(m["nodes"]),
                "-" if m["interval_s"] is None else _dur(m["interval_s"]),
                _dur(m["restart_s"]),
            ]
        )
    lines += _table(["job", "measured", "modelled", "gap", "nodes", "interval", "restart"], rows)
    lines.append(f"  every job: {WRITE_NOT_MEASURED}")
    for j in rep["jobs"]:
        lines += [f"  job {j['job']}: {why}" for why in j["model"]["estimates"] if why != WRITE_NOT_MEASURED]
    return lines


def _history(rep: Mapping[str, Any]) -> str:
    """Where the job states came from: Slurm's accounting (sacct) or the controller's polls."""
    h = rep.get("history") or {}
    sacct, note = h.get("jobs_from_sacct") or [], h.get("note") or ""
    if sacct and len(sacct) == len(rep["jobs"]):
        text = "from sacct (Slurm's accounting)"
    else:
        text = f"from sacct for {len(sacct)} job(s), the rest " if sacct else ""
        text += "as the controller's polls recorded them"
    return text + (f" ({note})" if note else "")


def render_text(rep: Mapping[str, Any], top: int = 10) -> str:
    c = rep["cluster"]
    mark = "~" if c["estimated"] else ""
    window = f"{_when(rep['since']) if rep['since'] is not None else 'the first record'} to "
    window += _when(rep["until"]) if rep["until"] is not None else f"now ({_when(rep['now'])})"
    lines = [
        f"recover goodput: {c['jobs']} job(s), {c['attempts']} attempt(s), {c['failures']} failure(s), "
        f"{window} UTC" + (f", job {rep['job']}" if rep["job"] else ""),
        f"  GPUs per node {rep['gpus_per_node']} ({rep['gpus_per_node_from']})",
        f"  job states {_history(rep)}",
        f"  cluster ETTR {mark}{_ratio(c['ettr'])}   productive / wall GPU-hours, queueing included",
        f"  GPU-hours: {_gh(c['wall_gpu_hours'])} wall, {_gh(c['productive_gpu_hours'])} productive, "
        f"{_gh(c['lost_gpu_hours']['total'])} lost to failures",
    ]
    if not rep["jobs"]:
        lines.append("  nothing recorded in this window: no job states, progress or incidents")
        return "\n".join(lines)
    lines += ["", "lost GPU-hours by cause"]
    lines += _table(
        ["cause", "GPU-h"],
        [[CAUSE_NAMES[k], _gh(c["lost_gpu_hours"][k])] for k in CAUSES]
        + [["total", _gh(c["lost_gpu_hours"]["total"])]],
    )
    heads = [_SHORT[k] for k in CAUSES]
    if rep["by_class"]:
        lines += ["", "by fault class"]
        lines += _table(
            ["fault class", "failures", "lost GPU-h", *heads],
            [
                [g["fault_class"], str(g["failures"]), _gh(g["lost_gpu_hours"]["total"]), *_causes(g["lost_gpu_hours"])]
                for g in rep["by_class"]
            ],
        )
        lines += ["", f"by node: the lemon list (top {top}; a failure's cost shared by the nodes it names)"]
        lines += _table(
            ["node", "failures", "lost GPU-h"],
            [[g["node"], str(g["failures"]), _gh(g["lost_gpu_hours"])] for g in rep["by_node"][:top]],
        )
        lines += ["", "by day (UTC, of the failure)"]
        lines += _table(
            ["day", "failures", "lost GPU-h", *heads],
            [
                [g["day"], str(g["failures"]), _gh(g["lost_gpu_hours"]["total"]), *_causes(g["lost_gpu_hours"])]
                for g in rep["by_day"]
            ],
        )
    lines += ["", "jobs"]
    rows = []
    for j in rep["jobs"]:
        m = "~" if j["estimates"] else ""
        rows.append(
            [
                j["job"],
                j["state"] or "-",
                str(len(j["attempts"])),
                str(j["failures"]),
                m + _ratio(j["ettr"]),
                _dur(j["wall_s"]),
                _gh(j["wall_gpu_hours"]),
                _gh(j["lost_gpu_hours"]["total"]),
            ]
        )
        for a in j["attempts"]:
            am = "~" if a["estimates"] else ""
            rows.append(
                [
                    f"  .{a['attempt']}",
                    a["state"] or "-",
                    f"{a['gpus']} GPUs",
                    "failed" if a["failed"] else "",
                    am + _ratio(a["ettr"]),
                    _dur(a["wall_s"]),
                    "",
                    "",
                ]
            )
    lines += _table(["job", "state", "attempts", "failures", "ETTR", "wall", "wall GPU-h", "lost GPU-h"], rows)
    lines += _compared(rep)
    if rep["failures"]:
        lines += ["", "failures (seconds per cause; ~ an estimate)"]
        frows = []
        for f in rep["failures"]:
            cells = [("~" if f["lost"][k]["estimate"] else "") + _dur(f["lost"][k]["seconds"]) for k in CAUSES]
            frows.append(
                [
                    f"{f['job']}.{f['attempt']}",
                    str(f["incident"] or "-"),
                    f["fault_class"],
                    _when(f["failed_at"]),
                    *cells,
                    _gh(f["lost_gpu_hours"]),
                ]
            )
        lines += _table(["attempt", "incident", "fault class", "failed at", *heads, "GPU-h"], frows)
    if rep["estimates"]:
        lines += ["", "estimates (~): where the store lacks an input, the figure is taken from"]
        for j in rep["jobs"]:
            lines += [f"  job {j['job']}: {why}" for why in j["estimates"]]
    return "\n".join(lines)


def render_what_if(out: Mapping[str, Any]) -> str:
    """``recover goodput --what-if`` for people: each incident that changes, what it would have
    saved (+) or cost (-) in GPU-hours, and the assumptions each estimate rests on."""
    cand = " ".join(out["rules"]) or "the rulebook in force"
    pol = ", ".join(f"{k}={v}" for k, v in out["policy"].items())
    lines = [
        f"recover goodput --what-if: {cand}" + (f" with policy {pol}" if pol else ""),
        f"  {len(out['changed'])} of {out['incidents']} incident(s) would change",
    ]
    for r in out["changed"]:
        old = "; ".join(f"{v['fault_class']} -> {v['decision']}" for v in r["old"]) or "(as stored)"
        new = "; ".join(f"{v['fault_class']} -> {v['decision']}" for v in r["new"]) or "(as stored)"
        lines += [
            "",
            f"incident {r['incident']} (job {r['job']} attempt {r['attempt']}; {', '.join(r['changed'])}): "
            f"{old}  =>  {new}",
            f"  {r['gpu_hours_saved']:+.2f} GPU-hours " + ("saved" if r["gpu_hours_saved"] >= 0 else "(a cost)"),
        ]
        lines += [f"  assumes: {why}" for why in r["assumptions"]]
    lines += ["", f"total: {out['gpu_hours_saved']:+.2f} GPU-hours (+ saved, - cost), each an estimate as stated"]
    return "\n".join(lines)


def render_summary(rep: Mapping[str, Any]) -> str:
    """A few lines: the cluster's ETTR and its lost GPU-hours by cause (the end of ``recover demo``)."""
    c = rep["cluster"]
    lost = c["lost_gpu_hours"]
    mark = "~" if c["estimated"] else ""
    lines = [
        f"Goodput: cluster ETTR {mark}{_ratio(c['ettr'])} over {c['jobs']} job(s) and {c['failures']} failure(s); "
        f"{_gh(c['wall_gpu_hours'])} GPU-hours, {_gh(lost['total'])} lost to failures "
        f"({rep['gpus_per_node']} GPU(s) a node, {rep['gpus_per_node_from']})",
    ]
    lines += _table(["lost to", "GPU-h"], [[CAUSE_NAMES[k], _gh(lost[k])] for k in CAUSES])
    if mark:
        lines.append("  ~ some inputs are missing: `recover goodput` lists them")
    return "\n".join(lines)
