"""The analytical goodput model (issue 23, part 3): `recover goodput --model` must reproduce the
worked figures of Kokolis et al. (HPCA 2025), give Young/Daly's interval and the MTTF, refuse to
print a ratio where its approximation breaks down, and turn bad input into exit 2, not a
traceback."""

from __future__ import annotations

import json
import math
import re

import pytest
from typer.testing import CliRunner

from engine.cli import app
from engine.ops.goodput_model import ModelError, expected_ettr, model, mttf_seconds, young_daly_interval

runner = CliRunner()

# the paper's job: 16,000 GPUs, i.e. 2,000 nodes of 8, at 6.5 failures per 1,000 node-days
NODES = 2000
RATE = 6.5 / 1000
LAM = NODES * RATE / 86400  # failures per second


def _by_hand(interval_s: float, restart_s: float, write_s: float = 0.0) -> float:
    # the formula written out again here, not taken from the module under test
    return (1 - LAM * (restart_s + interval_s / 2)) / (1 + write_s / interval_s)


def test_paper_worked_figure_60_minute_interval():
    r = model(NODES, RATE, 3600, 300)
    assert r.ettr == pytest.approx(_by_hand(3600, 300), rel=1e-12)
    assert r.ettr == pytest.approx(1 - 13 * 2100 / 86400, rel=1e-12)  # 0.684
    assert abs(r.ettr - 0.7) <= 0.02  # the paper's rounded figure
    assert r.valid and not r.write_given and r.write_s == 0


def test_paper_worked_figure_5_minute_interval():
    r = model(NODES, RATE, 300, 300)
    assert r.ettr == pytest.approx(_by_hand(300, 300), rel=1e-12)
    assert abs(r.ettr - 0.93) <= 0.02
    assert r.ettr > model(NODES, RATE, 3600, 300).ettr  # checkpointing more often pays here


def test_write_time_enters_the_denominator():
    r = model(NODES, RATE, 300, 300, 30)
    assert r.ettr == pytest.approx(_by_hand(300, 300, 30), rel=1e-12)
    assert r.checkpoint_overhead == pytest.approx(0.1)
    assert r.failure_loss == pytest.approx(LAM * 450)


def test_mttf_is_one_over_n_rf_in_hours():
    r = model(NODES, RATE, 3600, 300)
    assert r.mttf_hours == pytest.approx(24 / 13, rel=1e-12)  # 13 failures a day
    assert mttf_seconds(NODES, RATE) == pytest.approx(86400 / 13, rel=1e-12)
    assert r.failures_per_day == pytest.approx(13)
    # one node alone: 1,000/6.5 days
    assert model(1, RATE, 3600, 300).mttf_hours == pytest.approx(1000 / 6.5 * 24)


def test_young_daly_interval():
    w = 30.0
    expected = math.sqrt(2 * w / LAM)  # ≈ 631 s
    assert young_daly_interval(LAM, w) == pytest.approx(expected, rel=1e-12)
    r = model(NODES, RATE, 300, 300, w)
    assert r.best_interval_s == pytest.approx(expected, rel=1e-12)
    assert 600 < r.best_interval_s < 660
    assert r.ettr_at_best_interval == pytest.approx(_by_hand(expected, 300, w), rel=1e-12)
    # it is (to first order) the best: a little shorter or longer is no better
    for other in (expected * 0.8, expected * 1.25):
        assert _by_hand(other, 300, w) < r.ettr_at_best_interval


def test_young_daly_needs_a_write_time():
    r = model(NODES, RATE, 300, 300)
    assert r.best_interval_s is None and r.ettr_at_best_interval is None
    assert any("--write" in n for n in r.notes)
    assert any("taken as 0" in n for n in r.notes)
    with pytest.raises(ModelError):
        young_daly_interval(LAM, 0)


def test_breakdown_gives_no_negative_ettr():
    # 20,000 nodes checkpointing hourly: failures cost more than the run itself
    assert expected_ettr(20000 * RATE / 86400, 3600, 300) < 0  # what the bare formula says
    r = model(20000, RATE, 3600, 300, 30)
    assert r.ettr is None and not r.valid
    assert r.failure_loss > 1
    assert any("breaks down" in n for n in r.notes)
    # the figures that still hold are given
    assert r.mttf_hours == pytest.approx(24 / 130)
    assert r.best_interval_s == pytest.approx(math.sqrt(2 * 30 / (20000 * RATE / 86400)))


@pytest.mark.parametrize(
    "args",
    [
        {"nodes": 0, "failure_rate_per_node_day": RATE, "interval_s": 300, "restart_s": 300},
        {"nodes": NODES, "failure_rate_per_node_day": -1, "interval_s": 300, "restart_s": 300},
        {"nodes": NODES, "failure_rate_per_node_day": RATE, "interval_s": 0, "restart_s": 300},
        {"nodes": NODES, "failure_rate_per_node_day": RATE, "interval_s": 300, "restart_s": -1},
        {"nodes": NODES, "failure_rate_per_node_day": float("nan"), "interval_s": 300, "restart_s": 300},
        {"nodes": NODES, "failure_rate_per_node_day": RATE, "interval_s": float("inf"), "restart_s": 300},
        {"nodes": True, "failure_rate_per_node_day": RATE, "interval_s": 300, "restart_s": 300},
    ],
)
def test_library_refuses_bad_numbers(args):
    with pytest.raises(ModelError):
        model(**args)


# -- the command -----------------------------------------------------------------------------
PAPER = ["goodput", "--model", "--failure-rate", "6.5/1000", "--restart", "5m"]


def test_cli_json_fields_for_the_paper_job():
    r = runner.invoke(app, PAPER + ["--nodes", "2000", "--interval", "60m", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert {"ettr", "mttf_hours", "best_interval_s", "valid", "notes"} <= set(out)
    assert abs(out["ettr"] - 0.7) <= 0.02
    assert out["ettr"] == pytest.approx(_by_hand(3600, 300))
    assert out["mttf_hours"] == pytest.approx(24 / 13)
    assert out["best_interval_s"] is None  # no --write
    r = runner.invoke(app, PAPER + ["--nodes", "2000", "--interval", "5m", "--write", "30s", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["ettr"] == pytest.approx(_by_hand(300, 300, 30))
    assert out["best_interval_s"] == pytest.approx(math.sqrt(2 * 30 / LAM))


def test_cli_gpus_are_turned_into_nodes():
    r = runner.invoke(app, PAPER + ["--gpus", "16000", "--interval", "5m", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["nodes"] == 2000 and isinstance(out["nodes"], int)
    assert abs(out["ettr"] - 0.93) <= 0.02
    # 12 GPUs at 8 a node take 2 nodes
    r = runner.invoke(app, PAPER + ["--gpus", "12", "--interval", "5m", "--json"])
    assert json.loads(r.stdout)["nodes"] == 2


def test_cli_text_states_the_assumptions():
    r = runner.invoke(app, PAPER + ["--nodes", "2000", "--interval", "60m"])
    assert r.exit_code == 0, r.output
    assert "0.684" in r.stdout
    assert "assumed 0" in r.stdout
    assert "Young/Daly needs --write" in r.stdout


def test_cli_breakdown_says_so():
    r = runner.invoke(app, PAPER + ["--nodes", "20000", "--interval", "60m", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["ettr"] is None and out["valid"] is False
    r = runner.invoke(app, PAPER + ["--nodes", "20000", "--interval", "60m"])
    assert "breaks down" in r.stdout
    row = next(line for line in r.stdout.splitlines() if line.strip().startswith("expected ETTR"))
    assert "none" in row and not re.search(r"-\d", row)  # no negative ratio


@pytest.mark.parametrize(
    "extra, why",
    [
        (["--nodes", "0", "--interval", "5m"], "--nodes"),
        (["--nodes", "-3", "--interval", "5m"], "--nodes"),
        (["--gpus", "0", "--interval", "5m"], "--gpus"),
        (["--nodes", "2", "--gpus", "16", "--interval", "5m"], "not both"),
        (["--nodes", "2", "--interval", "0"], "--interval"),
        (["--nodes", "2", "--interval", "soon"], "--interval"),
        (["--nodes", "2", "--interval", "inf"], "--interval"),
        (["--nodes", "2", "--interval", "5m", "--write", "-30s"], "--write"),
        (["--nodes", "2"], "--interval"),
    ],
)
def test_cli_bad_input_is_exit_2_without_traceback(extra, why):
    r = runner.invoke(app, PAPER + extra)
    assert r.exit_code == 2, r.output
    assert why in r.stderr
    assert r.exception is None or isinstance(r.exception, SystemExit)
    assert "Traceback" not in r.output


@pytest.mark.parametrize("rate", ["-1", "0", "nan", "inf", "many", "6.5/0"])
def test_cli_bad_failure_rate(rate):
    r = runner.invoke(
        app, ["goodput", "--model", "--nodes", "2", "--failure-rate", rate, "--interval", "5m", "--restart", "5m"]
    )
    assert r.exit_code == 2, r.output
    assert "--failure-rate" in r.stderr


def test_cli_missing_inputs_are_named():
    r = runner.invoke(app, ["goodput", "--model"])
    assert r.exit_code == 2
    for flag in ("--nodes", "--failure-rate", "--interval", "--restart"):
        assert flag in r.stderr


def test_without_model_it_is_the_measured_report(tmp_path):
    # the measured report reads the store (tests/ops/test_goodput_report.py); it never creates one
    r = runner.invoke(app, ["goodput", "--db", str(tmp_path / "none.db")])
    assert r.exit_code == 2
    assert "no such database" in r.stderr
    assert r.stdout == ""
