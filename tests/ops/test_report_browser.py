"""The HTML report in a real headless browser (Debian's `chromium` package): the page opens from a
file, its three SVG charts are in the rendered DOM, and a screenshot shows them painted.

Without chromium the test skips, except under CI (env CI set), where it fails: the CI image must
install the package `chromium`.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import time
import zlib
from pathlib import Path

import pytest

from engine.ops.report import Thresholds, build_report
from engine.ops.report_html import AGREE_COLORS, LATENCY_COLOR, PALETTE, class_color, render_html
from engine.store import Store

from .conftest import add_live_incident

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def _browser() -> str:
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    if os.environ.get("CI"):
        pytest.fail(
            "no headless browser: the CI image must install Debian's `chromium` package (apt-get install -y chromium)"
        )
    pytest.skip("chromium is not installed (apt-get install -y chromium)")


def _run(browser: str, profile: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def decode_png(data: bytes) -> tuple[int, int, list[bytes]]:
    """(width, height, rows of RGB(A) bytes) of a non-interlaced 8-bit RGB or RGBA PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        chunk = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", chunk)
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    width, height, depth, color, _, _, interlace = header
    assert depth == 8 and color in (2, 6) and interlace == 0, f"unsupported PNG: depth {depth} color {color}"
    bpp = 3 if color == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows, prev, i = [], bytearray(stride), 0
    for _ in range(height):
        ftype, line = raw[i], bytearray(raw[i + 1 : i + 1 + stride])
        i += 1 + stride
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b = prev[x]
            c = prev[x - bpp] if x >= bpp else 0
            if ftype == 1:
                line[x] = (line[x] + a) & 255
            elif ftype == 2:
                line[x] = (line[x] + b) & 255
            elif ftype == 3:
                line[x] = (line[x] + (a + b) // 2) & 255
            elif ftype == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line) if bpp == 3 else bytes(v for k, v in enumerate(line) if k % 4 != 3))
        prev = line
    return width, height, rows


def _rgb(hex_color: str) -> bytes:
    return bytes.fromhex(hex_color.lstrip("#"))


def _count(rows: list[bytes], rgb: bytes, tolerance: int = 6) -> int:
    n = 0
    for row in rows:
        for x in range(0, len(row), 3):
            if all(abs(row[x + k] - rgb[k]) <= tolerance for k in range(3)):
                n += 1
    return n


@pytest.fixture
def report_file(tmp_path) -> Path:
    """A week of incidents (so the timeline has a few wide bars) and four live ones (latency)."""
    store = Store(tmp_path / "recover.db")
    now = time.time()
    classes = [
        ("nccl_timeout", "restart", "fault.nccl"),
        ("gpu_fell_off_bus", "isolate_and_restart", "fault.off_bus"),
        ("cuda_oom", "stop", "fault.oom"),
    ]
    n = 0
    for day in range(1, 6):
        for fc, decision, rule in classes[: 1 + day % 3]:
            n += 1
            at = now - day * 86400
            inc = store.open_incident(f"job:{n}:0", str(n), 0, None, at)
            store.add_firing(inc, rule, "tiny.yaml:1:1", "test", {}, None, at)
            store.close_incident(inc, at + 120, fc, decision, (), None, "test")
            store.add_review(inc, "agree" if n % 4 else "disagree", None if n % 4 else "drained n7", "ops")
    for i, latency in enumerate((0.5, 3.0, 12.0, 40.0)):
        inc = add_live_incident(store, str(100 + i), "nccl_timeout", "restart", latency, "fault.nccl")
        store.add_review(inc, "agree", None, "ops")
    path = tmp_path / "report.html"
    path.write_text(render_html(build_report(store, thresholds=Thresholds(1, 0.8))))
    return path


def test_charts_render_in_a_headless_browser(report_file, tmp_path):
    browser = _browser()
    dom = _run(browser, tmp_path / "profile-dom", "--dump-dom", report_file.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    assert "<title>Recover review report" in html
    charts = dict(re.findall(r'<svg id="(chart-[a-z]+)"(.*?)</svg>', html, flags=re.S))
    assert set(charts) == {"chart-timeline", "chart-agreement", "chart-latency"}, sorted(charts)
    for name, body in charts.items():
        assert "no-data" not in body, f"{name} has no data"
        assert len(re.findall(r'<rect class="bar"', body)) >= 3, name
    assert len(re.findall(r'<rect class="bar"', charts["chart-latency"])) == 4  # four live latencies, four buckets

    shot = tmp_path / "report.png"
    r = _run(
        browser,
        tmp_path / "profile-shot",
        "--window-size=1280,2400",
        "--force-device-scale-factor=0.5",
        f"--screenshot={shot}",
        report_file.as_uri(),
    )
    assert r.returncode == 0 and shot.is_file(), r.stderr[-2000:]
    width, height, rows = decode_png(shot.read_bytes())
    assert (width, height) == (640, 1200)
    colors = {row[x : x + 3] for row in rows[::8] for x in range(0, len(row), 24)}
    assert len(colors) > 20, "the screenshot is (nearly) blank"
    # painted chart bars, in the colors the page draws them with
    assert not {*AGREE_COLORS, LATENCY_COLOR} & set(PALETTE)  # each chart paints in its own colors
    assert _count(rows, _rgb(class_color("nccl_timeout"))) > 2000, "timeline bars of nccl_timeout not painted"
    assert _count(rows, _rgb(class_color("gpu_fell_off_bus"))) > 1000, "timeline bars of gpu_fell_off_bus not painted"
    assert _count(rows, _rgb(AGREE_COLORS[0])) > 800, "agreement bars (at the threshold) not painted"
    assert _count(rows, _rgb(AGREE_COLORS[2])) > 300, "agreement bar (below the threshold) not painted"
    assert _count(rows, _rgb(LATENCY_COLOR)) > 2000, "latency histogram not painted"


def test_png_decoder_reads_what_it_should():
    # a 2x1 RGB image: one red, one blue pixel (filter 0 = none)
    raw = b"\x00" + bytes([255, 0, 0, 0, 0, 255])
    ihdr = struct.pack(">IIBBBBB", 2, 1, 8, 2, 0, 0, 0)

    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")
    assert decode_png(png) == (2, 1, [bytes([255, 0, 0, 0, 0, 255])])
    assert _count(decode_png(png)[2], _rgb("#ff0000")) == 1


# -- the goodput page (recover goodput --html) ------------------------------------------------
HOSTILE_JOB = '9<img src=x onerror="document.title=1">'
HOSTILE_CLASS = "</svg><script>document.body.remove()</script>"


@pytest.fixture
def goodput_file(tmp_path, monkeypatch) -> Path:
    """The measured report's known history (tests/ops/test_goodput_report.py), plus a job whose
    id and fault class are markup: what a log or a user may put there."""
    from engine.ops.goodput import report_from_store
    from engine.ops.goodput_html import render_html as render_goodput

    from .test_goodput_report import NOW, T0, Clock, _event, _incident, _progress, build

    db = build(tmp_path / "goodput.db", monkeypatch)
    store = Store(db)
    for state, t, nodes in (("PENDING", 0, ()), ("RUNNING", 50, ("n<b>9</b>",)), ("FAILED", 5000, ("n<b>9</b>",))):
        _event(store, HOSTILE_JOB, 0, state, t, nodes)
    _progress(store, HOSTILE_JOB, 0, first=100, first_step=1, last=4000, step=400, step_time=10.0)
    _incident(
        store,
        Clock(),
        HOSTILE_JOB,
        0,
        evidence=4100,
        opened=4100,
        closed=4200,
        fault=HOSTILE_CLASS,
        nodes=["n<b>9</b>"],
    )
    rep = report_from_store(store, now=NOW, gpus_per_node=8)
    store.close()
    assert T0 < NOW and any(j["job"] == HOSTILE_JOB for j in rep["jobs"])
    path = tmp_path / "goodput.html"
    path.write_text(render_goodput(rep))
    return path


def test_goodput_charts_render_and_log_text_stays_text(goodput_file, tmp_path):
    from engine.ops.goodput_html import CAUSE_COLORS, ETTR_COLORS, NODE_COLOR

    browser = _browser()
    dom = _run(browser, tmp_path / "profile-dom", "--dump-dom", goodput_file.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    # escaped: the page's title and body are the report's, no element came from a job id or class
    assert "<title>Recover goodput report</title>" in html and "<h1>Recover goodput report</h1>" in html
    assert "<script" not in html and "<img" not in html and "<b>9</b>" not in html
    assert ">&lt;/svg&gt;&lt;script&gt;document.body.remove()&lt;/script&gt;: " in html  # a bar's tooltip
    assert 'data-node="n&lt;b&gt;9&lt;/b&gt;"' in html and "<td>9&lt;img src=x" in html
    charts = dict(re.findall(r'<svg id="(chart-[a-z]+)"(.*?)</svg>', html, flags=re.S))
    assert set(charts) == {"chart-causes", "chart-classes", "chart-ettr", "chart-nodes"}, sorted(charts)
    for name, body in charts.items():
        assert "no-data" not in body, f"{name} has no data"
    assert len(re.findall(r'<rect class="bar"', charts["chart-causes"])) == 5  # every cause lost something
    assert len(re.findall(r'<rect class="bar"', charts["chart-classes"])) == 5  # four classes and the hostile one
    # four jobs, each measured and modelled (job 300's measured ETTR is 0: a hairline bar)
    assert len(re.findall(r'<rect class="bar"[^>]*data-kind="modelled"', charts["chart-ettr"])) == 4
    assert len(re.findall(r'<rect class="bar"[^>]*data-kind="measured"', charts["chart-ettr"])) == 4
    # one day, four nodes named: n2, n3 (a suspect), n5 and the hostile one; job 300's names none
    assert len(re.findall(r'<rect class="bar"', charts["chart-nodes"])) == 4

    shot = tmp_path / "goodput.png"
    r = _run(
        browser,
        tmp_path / "profile-shot",
        "--window-size=1280,2400",
        "--force-device-scale-factor=0.5",
        f"--screenshot={shot}",
        goodput_file.as_uri(),
    )
    assert r.returncode == 0 and shot.is_file(), r.stderr[-2000:]
    width, height, rows = decode_png(shot.read_bytes())
    colors = {row[x : x + 3] for row in rows[::8] for x in range(0, len(row), 24)}
    assert len(colors) > 20, "the screenshot is (nearly) blank"
    assert _count(rows, _rgb(CAUSE_COLORS["work_lost"])) > 500, "cause bars not painted"
    assert _count(rows, _rgb(class_color("nccl_timeout"))) > 100, "fault class bars not painted"
    assert _count(rows, _rgb(ETTR_COLORS[0])) > 300, "measured ETTR bars not painted"
    assert _count(rows, _rgb(ETTR_COLORS[1])) > 300, "modelled ETTR bars not painted"
    assert _count(rows, _rgb(NODE_COLOR)) > 30, "node cells not painted"
