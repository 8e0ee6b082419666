"""`recover rules show` (the effective rulebook with origins) and `recover rules explain-line`
(one line through the real pipeline)."""

from __future__ import annotations

import json
import textwrap

import pytest
from typer.testing import CliRunner

from engine.cli import app
from engine.rulebook import require_rulebook
from engine.ops.rules_inspect import effective_rulebook, explain_line

from .conftest import recover

runner = CliRunner()

SITE = textwrap.dedent("""\
    lists:
      spare_list: {items: [1, 2], override: append}
    matchers:
      - id: nccl_timeout
        override: true
        pattern: 'Watchdog caught collective operation timeout|NCCL timed out'
      - id: site_power
        source: [kernel]
        pattern: '(?P<node>n\\d+) kernel: PSU (?P<psu>\\d) failed'
        types: {psu: int}
    rules:
      - id: site.power_warning
        description: a PSU failed (the node runs on the other one)
        when: [{as: l, kind: log, where: {matcher: site_power}}]
        then: {symptom: {name: psu_failed, severity: warning}}
      - id: fault.oom
        override: true
        description: CUDA OOM is the app's fault, and we say so
    policy:
      settle: 5m
    """)
BASE_EXTRA = textwrap.dedent("""\
    lists:
      spare_list: [0]
    macros:
      nccl: {matcher: nccl_timeout}
    rules:
      - id: uses
        description: d
        when: [{kind: log, where: {macro: nccl, any: [{rank: {in: "@spare_list"}}, {rank: {exists: false}}]}}]
        then: {symptom: {name: x, severity: warning}}
    """)


@pytest.fixture
def site(tmp_path, tiny_rules):
    base = tmp_path / "00-extra.yaml"
    base.write_text(BASE_EXTRA)
    site = tmp_path / "10-site.yaml"
    site.write_text(SITE)
    return [str(tiny_rules), str(base), str(site)]


def test_effective_rulebook_says_where_each_item_came_from(site):
    doc = effective_rulebook(require_rulebook(site, defaults=False, tests=True))
    matchers = {m["id"]: m for m in doc["matchers"]}
    assert matchers["nccl_timeout"]["defined_at"].endswith("tiny.yaml:4:5")
    assert matchers["nccl_timeout"]["overridden_by"] == [f"{site[2]}:4:5"]
    assert matchers["nccl_timeout"]["pattern"] == "Watchdog caught collective operation timeout|NCCL timed out"
    assert matchers["nccl_timeout"]["source"] == ["job"]  # a field the override did not give is kept
    assert matchers["site_power"]["defined_at"] == f"{site[2]}:7:5" and matchers["site_power"]["overridden_by"] == []
    assert matchers["site_power"]["types"] == {"psu": "int"}
    lists = {x["name"]: x for x in doc["lists"]}
    assert lists["spare_list"]["items"] == [0, 1, 2] and lists["spare_list"]["overridden_by"] == [f"{site[2]}:2:15"]
    rules = {r["id"]: r for r in doc["rules"]}
    assert rules["fault.oom"]["description"] == "CUDA OOM is the app's fault, and we say so"
    assert rules["fault.oom"]["then"] == {"fault": {"fault_class": "cuda_oom"}}
    assert rules["fault.oom"]["overridden_by"] == [f"{site[2]}:16:5"]
    assert rules["uses"]["when"][0]["where"] == {
        "macro": "nccl",
        "any": [{"rank": {"in": "@spare_list"}}, {"rank": {"exists": False}}],
    }
    assert {m["name"]: m["where"] for m in doc["macros"]} == {"nccl": {"matcher": "nccl_timeout"}}
    policy = {p["key"]: p for p in doc["policy"]}
    # the policy's defaults are the shipped policy file, loaded under --no-defaults too
    assert policy["settle"]["value"] == 300.0 and policy["settle"]["defined_at"].startswith("rules/50-policy.yaml:")
    assert policy["settle"]["overridden_by"] == [f"{site[2]}:20:11"]
    assert policy["plans"]["defined_at"].startswith("rules/50-policy.yaml:")
    assert policy["blast_radius"]["value"]["max_drains"] == 4  # guard defaults are shown, not hidden
    assert sorted(a["name"] for a in doc["actions"]) == ["drain", "exclude", "notify", "requeue"]


def test_rules_show_cli(site):
    args = ["rules", "show", "--no-defaults", *(arg for p in site for arg in ("--rules", p))]
    r = runner.invoke(app, args + ["--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert set(doc) == {"files", "fault_classes", "lists", "macros", "matchers", "rules", "actions", "policy", "tests"}
    r = runner.invoke(app, args + ["--json", "--section", "matchers", "--name", "nccl"])
    doc = json.loads(r.stdout)
    assert set(doc) == {"files", "matchers"} and [m["id"] for m in doc["matchers"]] == ["nccl_timeout"]
    r = runner.invoke(app, args + ["--section", "matchers"], env={"COLUMNS": "250"})
    assert r.exit_code == 0
    assert "nccl_timeout" in r.stdout and f"{site[2]}:4:5" in r.stdout and "matchers (4)" in r.stdout
    r = runner.invoke(app, args + ["--section", "nonsense"])
    assert r.exit_code == 2 and "unknown section" in r.stderr


def test_rules_show_with_the_defaults():
    r = runner.invoke(app, ["rules", "show", "--json", "--section", "actions"])
    assert r.exit_code == 0
    actions = {a["name"]: a for a in json.loads(r.stdout)["actions"]}
    assert actions["drain"]["per"] == "node" and actions["drain"]["defined_at"].startswith("rules/40-actions.yaml:")


def test_rules_show_prints_regexes_and_descriptions_as_written(tmp_path, tiny_rules):
    # the rulebook's own text is no Rich markup: `[a-z]` was a style tag that vanished from the
    # regex shown, and `[/-]` (a character class) crashed the command with a MarkupError traceback
    site = tmp_path / "10-site.yaml"
    site.write_text(
        textwrap.dedent("""\
            lists:
              odd_names: ['[red]', 'a[/b]']
            matchers:
              - {id: dashed, source: [job], pattern: 'rank[/-][a-z]+ failed'}
            rules:
              - id: site.dashed
                description: d
                when: [{as: l, kind: log, where: {matcher: dashed}}]
                then: {symptom: {name: dashed, severity: warning}}
            """)
    )
    args = ["rules", "show", "--no-defaults", "--rules", str(tiny_rules), "--rules", str(site)]
    r = runner.invoke(app, args, env={"COLUMNS": "400"})
    assert r.exit_code == 0, r.output
    assert "rank[/-][a-z]+ failed" in r.stdout and "[[red], a[/b]]" in r.stdout
    proc = recover("rules", "show")  # the shipped rulebook
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]


def test_errors_point_at_file_line_col_with_a_hint(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("matchers:\n  - id: m\n    patern: 'x'\n")
    for cmd in (["rules", "show"], ["rules", "explain-line", "some line"]):
        proc = recover(*cmd, "--no-defaults", "--rules", str(bad))
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert (
            f"{bad}:3:13: E-UNKNOWN-KEY unknown key 'patern' in matcher (hint: did you mean 'pattern'?)" in proc.stderr
        )
        assert "Traceback" not in proc.stderr


# -- explain-line ---------------------------------------------------------------------------------
def test_explain_line_hits_groups_and_firings(tiny_rules):
    compiled = require_rulebook([tiny_rules], defaults=False)
    out = explain_line(
        compiled,
        "2020-03-03T09:00:00+00:00 n3 kernel: NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.",
        source="kernel",
    )
    assert [h["matcher"] for h in out["hits"]] == ["xid"]
    assert out["hits"][0]["groups"] == {"node": "n3", "pci": "0000:3b:00", "code": "79"}
    assert out["hits"][0]["fact"]["kind"] == "xid" and out["hits"][0]["fact"]["attrs"]["code"] == 79
    assert [(f["rule"], f["status"]) for f in out["firings"]] == [
        ("sym.xid_off_bus", "fired → incident 1"),
        ("fault.off_bus", "fired → incident 1"),
    ]
    got = [(i["fault_class"], i["decision"], i["nodes"]) for i in out["incidents"]]
    assert got == [("gpu_fell_off_bus", "isolate_and_restart", ["n3"])]
    assert ["scontrol", "update", "NodeName=n3", "State=DRAIN"] in out["incidents"][0]["commands"]


def test_explain_line_source_selects_matchers(tiny_rules):
    compiled = require_rulebook([tiny_rules], defaults=False)
    line = "n3 kernel: NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus."
    assert explain_line(compiled, line, source="job")["hits"] == []
    assert [h["matcher"] for h in explain_line(compiled, line, source="any")["hits"]] == ["xid"]


def test_explain_line_shows_warnings_that_open_no_incident(site):
    compiled = require_rulebook(site, defaults=False)
    out = explain_line(compiled, "n4 kernel: PSU 2 failed", source="kernel")
    assert out["hits"][0]["groups"] == {"node": "n4", "psu": "2"} and out["hits"][0]["fact"]["attrs"]["psu"] == 2
    assert [(f["rule"], f["produces"]["severity"]) for f in out["firings"]] == [("site.power_warning", "warning")]
    assert "opens none" in out["firings"][0]["status"]
    assert out["incidents"] == []


def test_explain_line_cli_with_the_default_rulebook():
    line = (
        "[rank5]:[E1129 17:21:30.118830911 ProcessGroupNCCL.cpp:616] [Rank 5] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=88021, OpType=ALLREDUCE, NumelIn=262144, NumelOut=262144, Timeout(ms)=120000) ran "
        "for 120077 milliseconds before timing out."
    )
    r = runner.invoke(app, ["rules", "explain-line", line, "--source", "job", "--job", "4301"])
    assert r.exit_code == 0, r.output
    assert "nccl_watchdog_timeout  [log]" in r.stdout
    assert "groups: op='ALLREDUCE', rank='5', seq='88021'" in r.stdout
    assert "incident: nccl_timeout → restart" in r.stdout and "would run: scontrol requeue 4301" in r.stdout
    r = runner.invoke(app, ["rules", "explain-line", line, "--source", "job", "--job", "4301", "--json"])
    out = json.loads(r.stdout)
    assert out["hits"][0]["fact"]["attrs"]["job"] == "4301"
    assert any(f["produces"].get("fault_class") == "nccl_timeout" for f in out["firings"])


def test_explain_line_nothing_matches():
    r = runner.invoke(app, ["rules", "explain-line", "all is well", "--source", "job"])
    assert r.exit_code == 0 and "no matcher for source 'job' hits this line" in r.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["--source", "journal"], "--source 'journal'"),
        (["--job", "12; rm -rf /"], "is not a job id"),
        (["--node", "bad node"], "is not a node name"),
    ],
)
def test_explain_line_bad_input_exits_2(args, message):
    r = runner.invoke(app, ["rules", "explain-line", "x", *args])
    assert r.exit_code == 2 and message in r.stderr


def test_explain_line_rejects_two_lines():
    r = runner.invoke(app, ["rules", "explain-line", "a\nb"])
    assert r.exit_code == 2 and "one line" in r.stderr
