"""recover review: one verdict from the command line, and bulk imports from ticket systems."""

from __future__ import annotations

import json
import textwrap

import pytest
from typer.testing import CliRunner

from engine.cli import app
from engine.ops.review import ReviewError, parse_import, parse_incident_id, parse_time, parse_verdict
from engine.store import Store

from .conftest import recover

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def reviews(db):
    return Store(db).reviews()


# -- parsing -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "raw, verdict",
    [
        ("agree", "agree"),
        ("Yes", "agree"),
        ("TRUE", "agree"),
        (True, "agree"),
        ("disagree", "disagree"),
        ("no", "disagree"),
        (" n ", "disagree"),
        (False, "disagree"),
    ],
)
def test_verdicts(raw, verdict):
    assert parse_verdict(raw) == verdict


@pytest.mark.parametrize("raw", ["maybe", "", None, "agreeish"])
def test_bad_verdicts(raw):
    with pytest.raises(ReviewError):
        parse_verdict(raw)


@pytest.mark.parametrize("raw, n", [("12", 12), ("INC-12", 12), ("#7", 7), (3, 3)])
def test_incident_ids(raw, n):
    assert parse_incident_id(raw) == n


@pytest.mark.parametrize("raw", ["0", "-3", "twelve", "INC-", True, 1.5])
def test_bad_incident_ids(raw):
    with pytest.raises(ReviewError):
        parse_incident_id(raw)


def test_times():
    assert parse_time("2020-03-01T10:00:00Z") == 1583056800.0
    assert parse_time("2020-03-01 10:00:00") == 1583056800.0  # naive = UTC
    assert parse_time("2020-03-01T12:00:00+02:00") == 1583056800.0
    assert parse_time("1583056800") == 1583056800.0
    assert parse_time("") is None
    with pytest.raises(ReviewError):
        parse_time("yesterday")


# -- one review from the command line ------------------------------------------------------------
def test_agree_and_disagree_are_recorded(populated_db):
    r = invoke("review", "1", "--agree", "--by", "alice", "--db", populated_db)
    assert r.exit_code == 0, r.output
    assert "incident 1 (nccl_timeout → restart): agree" in r.stdout
    r = invoke(
        "review",
        "INC-3",
        "--disagree",
        "--did",
        "raised the batch size limit",
        "--by",
        "bob",
        "--db",
        populated_db,
        "--json",
    )
    assert r.exit_code == 0, r.output
    rec = json.loads(r.stdout)
    got = (rec["incident"], rec["verdict"], rec["did"], rec["by"], rec["decision"])
    assert got == (3, "disagree", "raised the batch size limit", "bob", "stop")
    got = [(x["incident"], x["verdict"], x["by"]) for x in reviews(populated_db)]
    assert got == [(1, "agree", "alice"), (3, "disagree", "bob")]


@pytest.mark.parametrize(
    "args, message",
    [
        (["1"], "exactly one of --agree or --disagree"),
        (["1", "--agree", "--disagree"], "exactly one of --agree or --disagree"),
        (["99", "--agree"], "no incident 99"),
        (["abc", "--agree"], "is not an incident id"),
        ([], "give an INCIDENT"),
        (["1", "--agree", "--import", "x.csv"], "--import takes no INCIDENT"),
    ],
)
def test_usage_errors_exit_2(populated_db, args, message):
    r = invoke("review", *args, "--db", populated_db)
    assert r.exit_code == 2, r.output
    assert message in r.stderr
    assert reviews(populated_db) == []


def test_open_incident_cannot_be_reviewed(populated_db):
    store = Store(populated_db)
    inc = store.open_incident("job:9:0", "9", 0, None, 1.0)
    r = invoke("review", inc, "--agree", "--db", populated_db)
    assert r.exit_code == 2
    assert "still open" in r.stderr


def test_missing_database_is_not_created(tmp_path):
    db = tmp_path / "none.db"
    r = invoke("review", "1", "--agree", "--db", db)
    assert r.exit_code == 2
    assert "no such database" in r.stderr
    assert not db.exists()


# -- imports --------------------------------------------------------------------------------------
def test_import_csv_good_and_bad_rows(populated_db, tmp_path):
    f = tmp_path / "tickets.csv"
    f.write_text(
        textwrap.dedent("""\
        incident,verdict,did,by,at
        1,agree,,alice,2020-03-05T10:00:00Z
        INC-2,disagree,"drained n7, bad IB cable",bob,2020-03-05T11:00:00Z
        3,perhaps,,carol,
        99,agree,,dave,
        4,yes,"multi
        line note",erin,1583402400
        5,agree,,frank,not-a-time
        6,agree
        """)
    )
    r = invoke("review", "--import", f, "--db", populated_db)
    assert r.exit_code == 2, r.output
    assert "imported 3 review(s), 0 already recorded, 4 rejected" in r.stdout
    err = r.stderr
    assert f"{f}:4: verdict 'perhaps' is neither agree nor disagree" in err
    assert f"{f}:5: no incident 99" in err
    assert f"{f}:8: time 'not-a-time'" in err
    assert f"{f}:9: 2 field(s), the header has 5" in err
    got = [(x["incident"], x["verdict"], x["did"], x["by"]) for x in reviews(populated_db)]
    assert got == [
        (1, "agree", None, "alice"),
        (2, "disagree", "drained n7, bad IB cable", "bob"),
        (4, "agree", "multi\nline note", "erin"),
    ]
    assert reviews(populated_db)[0]["at"] == 1583402400.0


def test_import_json_list_reports_each_object_at_its_line(populated_db, tmp_path):
    f = tmp_path / "tickets.json"
    f.write_text(
        textwrap.dedent("""\
        [
          {"incident": 1, "verdict": "agree", "by": "alice"},
          {"incident": 2,
           "verdict": "disagree", "did": "rebooted n3", "by": "bob", "at": "2020-03-05T10:00:00Z"},
          {"incident": 3, "verdict": "agree", "ticket": "OPS-1"},
          "not an object",
          {"verdict": "agree"}
        ]
        """)
    )
    r = invoke("review", "--import", f, "--db", populated_db, "--json")
    assert r.exit_code == 2
    summary = json.loads(r.stdout)
    assert (summary["imported"], summary["rejected"]) == (2, 3)
    assert [(p["line"], p["message"].split(" (")[0]) for p in summary["problems"]] == [
        (5, "unknown field(s) 'ticket'"),
        (6, "not an object with incident, verdict, did, by, at"),
        (7, "incident is missing"),
    ]


def test_import_json_lines_and_duplicates(populated_db, tmp_path):
    f = tmp_path / "tickets.jsonl"
    f.write_text(
        '{"incident": 1, "verdict": "agree", "at": 1583402400}\n'
        "\n"
        '{"incident": 2, "verdict": "no", "did": "nothing", "at": 1583402500}\n'
        '{"incident": 3, "verdict": \n'
    )
    r = invoke("review", "--import", f, "--db", populated_db)
    assert r.exit_code == 2
    assert f"{f}:4: not JSON" in r.stderr
    assert "imported 2 review(s)" in r.stdout
    # the same export imported again adds nothing
    f.write_text(
        '{"incident": 1, "verdict": "agree", "at": 1583402400}\n'
        '{"incident": 2, "verdict": "no", "did": "nothing", "at": 1583402500}\n'
    )
    r = invoke("review", "--import", f, "--db", populated_db)
    assert r.exit_code == 0, r.output
    assert "imported 0 review(s), 2 already recorded, 0 rejected" in r.stdout
    assert len(reviews(populated_db)) == 2


@pytest.mark.parametrize(
    "text, message",
    [
        ("incident,verdict,ticket\n1,agree,OPS-1\n", "unknown column(s) 'ticket'"),
        ("incident,did\n1,x\n", "missing column(s) verdict"),
        ('[{"incident": 1, "verdict": "agree"},\n {"incident": 2,, }]\n', "tickets:2:"),
        ("", "empty file"),
    ],
)
def test_unreadable_files_import_nothing(populated_db, tmp_path, text, message):
    f = tmp_path / "tickets"
    f.write_text(text)
    r = invoke("review", "--import", f, "--db", populated_db)
    assert r.exit_code == 2
    assert message in r.stderr
    assert reviews(populated_db) == []


def test_parse_import_is_pure():
    rows, problems = parse_import("incident,verdict\n1,agree\n2,maybe\n")
    assert [(r.line, r.incident, r.verdict) for r in rows] == [(2, 1, "agree")]
    assert [(p.line, p.message) for p in problems] == [(3, "verdict 'maybe' is neither agree nor disagree")]


def test_cli_import_errors_without_traceback(populated_db, tmp_path):
    f = tmp_path / "binary.csv"
    f.write_bytes(b"\xff\xfe\x00garbage")
    proc = recover("review", "--import", str(f), "--db", str(populated_db))
    assert proc.returncode == 2
    assert "not UTF-8" in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    proc = recover("review", "--import", str(tmp_path / "missing.csv"), "--db", str(populated_db))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
