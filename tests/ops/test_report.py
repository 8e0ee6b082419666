"""recover report: agreement per fault class, rule and decision, detection latency, autonomy; the
numbers are checked on a store filled through the real replay plus live incidents (conftest)."""

from __future__ import annotations

import json
import re
import time

import pytest
from typer.testing import CliRunner

from engine.cli import app
from engine.ops.report import LATENCY_DEFINITION, Thresholds, build_report, parse_since
from engine.ops.report_html import render_html
from engine.ops.review import ReviewError
from engine.store import Store

runner = CliRunner()

# incident -> (verdict, did); see conftest for the incidents (1-4 replayed, 5-8 live)
REVIEWS = {
    1: ("agree", None),
    2: ("disagree", "drained n7: bad IB cable"),
    3: ("agree", None),
    4: ("agree", None),
    5: ("agree", None),
    6: ("agree", None),
    7: ("agree", None),
}


@pytest.fixture
def reviewed_db(populated_db):
    store = Store(populated_db)
    store.add_review(2, "agree", None, "early", at=1000.0)  # superseded by the later review below
    for inc, (verdict, did) in REVIEWS.items():
        store.add_review(inc, verdict, did, "ops", at=2000.0 + inc)
    store.close()
    return populated_db


def report_json(db, *args):
    r = runner.invoke(app, ["report", "--db", str(db), "--json", *map(str, args)])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def by_key(groups):
    return {g["key"]: g for g in groups}


def test_numbers_per_class_rule_and_decision(reviewed_db):
    rep = report_json(reviewed_db, "--min-reviewed", 1, "--min-agreement", 0.95)
    assert rep["totals"] == {
        "incidents": 8,
        "open_not_counted": 0,
        "live": 4,
        "reviewed": 7,
        "agreed": 6,
        "disagreed": 1,
        "agreement": pytest.approx(6 / 7),
    }
    fc = by_key(rep["by_fault_class"])
    assert (fc["nccl_timeout"]["incidents"], fc["nccl_timeout"]["reviewed"], fc["nccl_timeout"]["agreed"]) == (5, 5, 4)
    assert fc["nccl_timeout"]["agreement"] == pytest.approx(0.8)
    assert (fc["cuda_oom"]["incidents"], fc["cuda_oom"]["reviewed"], fc["cuda_oom"]["agreement"]) == (2, 1, 1.0)
    assert (fc["gpu_fell_off_bus"]["incidents"], fc["gpu_fell_off_bus"]["agreement"]) == (1, 1.0)

    rules = by_key(rep["by_rule"])
    # replayed incidents: the real firings of the tiny rulebook; live ones: the firing the fixture wrote
    assert rules["sym.nccl"]["incidents"] == 2 and rules["fault.nccl"]["incidents"] == 5
    assert rules["sym.nccl"]["agreement"] == pytest.approx(0.5)
    assert rules["fault.oom"]["incidents"] == 2 and rules["fault.oom"]["reviewed"] == 1
    assert set(rules) == {"sym.nccl", "fault.nccl", "fault.oom", "sym.xid_off_bus", "fault.off_bus"}

    dec = by_key(rep["by_decision"])
    assert (dec["restart"]["incidents"], dec["restart"]["reviewed"], dec["restart"]["agreement"]) == (
        5,
        5,
        pytest.approx(0.8),
    )
    assert (dec["stop"]["incidents"], dec["stop"]["reviewed"]) == (2, 1)
    assert dec["isolate_and_restart"]["incidents"] == 1


def test_disagreements_say_what_the_operator_did(reviewed_db):
    rep = report_json(reviewed_db)
    assert len(rep["disagreements"]) == 1
    d = rep["disagreements"][0]
    assert (d["incident"], d["fault_class"], d["decision"], d["did"], d["job"]) == (
        2,
        "nccl_timeout",
        "restart",
        "drained n7: bad IB cable",
        "102",
    )
    assert d["rules"] == ["sym.nccl", "fault.nccl"]
    assert by_key(rep["by_rule"])["sym.nccl"]["disagreements"] == [d]


def test_latest_review_of_an_incident_counts(reviewed_db):
    store = Store(reviewed_db)
    store.add_review(2, "agree", "on second thought", "ops", at=9999.0)
    rep = build_report(store)
    assert rep["totals"]["agreed"] == 7 and rep["disagreements"] == []


def test_latency_only_for_live_incidents(reviewed_db):
    rep = report_json(reviewed_db)
    lat = rep["latency"]
    assert lat["count"] == 4  # the four live incidents; replayed ones have virtual times
    assert lat["min"] == pytest.approx(0.5, abs=0.05)
    assert lat["p50"] == pytest.approx(3.0, abs=0.05)
    assert lat["max"] == pytest.approx(40.0, abs=0.05)
    hist = {b["label"]: b["count"] for b in lat["histogram"]}
    assert hist == {
        "<1s": 1,
        "1-2s": 0,
        "2-5s": 1,
        "5-10s": 0,
        "10-30s": 1,
        "30-60s": 1,
        "1-2m": 0,
        "2-5m": 0,
        "5-10m": 0,
        ">10m": 0,
    }
    assert lat["definition"] == LATENCY_DEFINITION and "detected_wall" in lat["definition"]
    fc = by_key(rep["by_fault_class"])
    assert fc["cuda_oom"]["latency"]["count"] == 1 and fc["gpu_fell_off_bus"]["latency"] == {"count": 0}


def test_autonomy_follows_the_thresholds(reviewed_db):
    rep = report_json(reviewed_db, "--min-reviewed", 1, "--min-agreement", 0.95)
    auto = {a["decision"]: a for a in rep["autonomy"]}
    assert [d for d, a in auto.items() if a["eligible"]] == ["isolate_and_restart", "stop"]
    assert "agreement 80.0%, needs 95%" in auto["restart"]["why_not"]
    assert "no reviews" in auto["observe"]["why_not"]
    assert "    restart: recommend" in rep["autonomy_policy"] and "    stop: act" in rep["autonomy_policy"]
    rep = report_json(reviewed_db, "--min-reviewed", 2, "--min-agreement", 0.8)
    auto = {a["decision"]: a for a in rep["autonomy"]}
    assert [d for d, a in auto.items() if a["eligible"]] == ["restart"]
    assert auto["stop"]["why_not"] == "1 reviewed, needs 2"
    rep = report_json(reviewed_db)  # the defaults: 50 reviewed, 95 %
    assert not any(a["eligible"] for a in rep["autonomy"])


def test_since_filters_by_incident_time(reviewed_db):
    assert (
        report_json(reviewed_db, "--since", "2020-03-02")["totals"]["incidents"] == 7
    )  # replayed 101 was on March 1st
    assert report_json(reviewed_db, "--since", "2020-03-02T11:30:00Z")["totals"]["incidents"] == 6
    assert report_json(reviewed_db, "--since", "1h")["totals"]["incidents"] == 4  # only the live ones are recent
    assert parse_since("7d", now=10 * 86400.0) == 3 * 86400.0
    with pytest.raises(ReviewError):
        parse_since("last tuesday")


def test_open_incidents_are_counted_apart(reviewed_db):
    Store(reviewed_db).open_incident("job:9:0", "9", 0, None, time.time())
    rep = report_json(reviewed_db)
    assert rep["totals"]["incidents"] == 8 and rep["totals"]["open_not_counted"] == 1


def test_text_report_for_people(reviewed_db):
    r = runner.invoke(app, ["report", "--db", str(reviewed_db), "--min-reviewed", "1"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    out = r.stdout
    for text in (
        "By fault class",
        "By rule",
        "By decision kind",
        "drained n7: bad IB cable",
        "Detection latency",
        "4 live incident(s)",
        "detected_wall",
        "stop: act",
    ):
        assert text in out, text
    assert re.search(r"nccl_timeout\s*│\s*5\s*│\s*5\s*│\s*4\s*│\s*1\s*│\s*80\.0%", out)


def test_html_report_is_self_contained(reviewed_db, tmp_path):
    out = tmp_path / "report.html"
    r = runner.invoke(app, ["report", "--db", str(reviewed_db), "--html", str(out)])
    assert r.exit_code == 0, r.output
    html = out.read_text()
    assert html.startswith("<!DOCTYPE html>")
    for chart in ("chart-timeline", "chart-agreement", "chart-latency"):
        assert f'<svg id="{chart}"' in html
    assert html.count('class="bar"') >= 4 + 5 + 4  # timeline stacks, one bar per reviewed rule, latency buckets
    assert "drained n7: bad IB cable" in html
    # nothing to fetch: no scripts, no external stylesheets, images or fonts
    assert "<script" not in html
    assert not re.search(r'(?:src|href)\s*=\s*"(?:https?:)?//', html)
    assert "@import" not in html and "url(" not in html


def test_html_escapes_what_operators_wrote(populated_db):
    store = Store(populated_db)
    store.add_review(2, "disagree", '<script>alert("x")</script>', "<b>mallory</b>")
    html = render_html(build_report(store))
    assert "<script" not in html and "&lt;script&gt;" in html and "&lt;b&gt;mallory" in html


def test_text_report_shows_what_operators_wrote_as_written(populated_db):
    # review text is no Rich markup: `[/oops]` crashed the report with a MarkupError, `[red]` vanished
    store = Store(populated_db)
    store.add_review(2, "disagree", "[/oops] drained [red]n7[/red]", "[bold]mallory")
    store.close()
    r = runner.invoke(app, ["report", "--db", str(populated_db)], env={"COLUMNS": "300"})
    assert r.exit_code == 0, r.output
    assert "[/oops] drained [red]n7[/red]" in r.stdout and "[bold]mallory" in r.stdout


def test_empty_store_renders_placeholders(tmp_path):
    store = Store(tmp_path / "empty.db")
    rep = build_report(store, thresholds=Thresholds())
    assert rep["totals"]["incidents"] == 0 and rep["latency"]["count"] == 0
    html = render_html(rep)
    assert html.count('class="no-data"') == 3


@pytest.mark.parametrize(
    "args, message",
    [
        (["--since", "sometime"], "--since 'sometime'"),
        (["--min-agreement", "1.5"], "--min-agreement"),
        (["--min-reviewed", "0"], "--min-reviewed"),
    ],
)
def test_bad_arguments_exit_2(reviewed_db, args, message):
    r = runner.invoke(app, ["report", "--db", str(reviewed_db), *args])
    assert r.exit_code == 2 and message in r.stderr


def test_missing_database_and_unwritable_html_exit_2(reviewed_db, tmp_path):
    r = runner.invoke(app, ["report", "--db", str(tmp_path / "nope.db")])
    assert r.exit_code == 2 and "no such database" in r.stderr
    r = runner.invoke(app, ["report", "--db", str(reviewed_db), "--html", str(tmp_path / "no" / "dir" / "r.html")])
    assert r.exit_code == 2
