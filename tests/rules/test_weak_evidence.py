"""The weak-evidence layer (issue 20, item 2): a fault class's keywords become one ordinary
matcher, weak.<class>; a keyword decides only how a job ended when nothing specific did, it is
recommended and never acted on for a node-scoped class, `explain` names it, and `rules eval`
reports the share of right answers it gave."""

from __future__ import annotations

import json
import re
import textwrap

from engine.core.policy import decide
from engine.core.replay import Input, replay_inputs
from engine.core.rete import ReteNetwork
from engine.ops.corpus_eval import Case, evaluate, evaluate_case
from engine.ops.explain import build, render_text
from engine.rulebook import load_rulebook, require_rulebook
from engine.rulebook.weak import keyword_pattern
from engine.store import Store

GRANT_ACT = textwrap.dedent("""\
    policy:
      autonomy:
        isolate_and_restart: act
        restart: act
        classes: {gpu_unavailable: act, nccl_network_error: act}
    """)


# https://github.com/equinor/ert/issues/7797: a kernel line no specific matcher knows in a job's log
OOM_KILLER = (
    "2024-04-29T14:55:41,678628+02:00 pool invoked oom-killer: gfp_mask=0x6200ca(GFP_HIGHUSER_MOVABLE), "
    "order=0, oom_score_adj=0\n"
)


def _replay(compiled, text: str, name: str = "slurm-4242.out"):
    store = Store(":memory:")
    facts: list = []
    result = replay_inputs([Input(name, lambda: [text.encode()], "job")], compiled, store, on_fact=facts.append)
    return store, result, facts


def test_the_keywords_of_a_class_are_the_matcher_weak_class():
    compiled = require_rulebook()
    weak = {m.id: m for m in compiled.matchers if m.id.startswith("weak.")}
    assert "weak.cuda_oom" in weak and "weak.nccl_timeout" in weak
    m = weak["weak.cuda_oom"]
    assert m.ignore_case and m.attrs["weak"] is True and m.attrs["weak_class"] == "cuda_oom"
    assert " INFO " in m.unless  # lists.weak_quiet


def test_a_token_is_matched_whole_in_any_case_with_loose_spaces():
    rx = re.compile(keyword_pattern(["ran out of memory", "IBV_WC_", "a.b"]), re.I)
    assert rx.search("Allocator (GPU_0_bfc) Ran  out of memory trying").group("keyword") == "Ran  out of memory"
    assert rx.search("status=IBV_WC_RETRY_EXC_ERR").group("keyword") == "IBV_WC_"
    assert not rx.search("foran out of memoryx")
    assert not rx.search("axb")  # a dot in a token is a dot


def test_two_tokens_of_one_keyword_must_share_a_line_in_order():
    rx = re.compile(keyword_pattern(["NVLink ... fatal|inactive", "ECC ... uncorrectable error"]), re.I)
    assert rx.search("NVLink: fatal error detected on link 14").group("keyword") == "NVLink: fatal"
    assert rx.search("all NvLink links are inActive").group("keyword") == "NvLink links are inActive"
    assert (
        rx.search("GPU 3: ECC mode on, uncorrectable error seen").group("keyword") == "ECC mode on, uncorrectable error"
    )
    assert not rx.search("NVLink bandwidth 300 GB/s\nfatal: not a git repository")  # not across lines
    assert not rx.search("fatal: NVLink")  # in order
    assert not rx.search("NVLinks fatalistic")  # each token whole
    assert not rx.search("NVLink" + "x" * 200 + " fatal")  # within a bounded stretch of the line
    alt = re.compile(keyword_pattern(["NotReady|NodeLost"]), re.I)
    assert alt.search("pod lost: NodeLost").group("keyword") == "NodeLost"
    assert not alt.search("NodeLostAndFound")


def test_a_site_appends_a_keyword_to_a_shipped_class(tmp_path):
    site = tmp_path / "site.yaml"
    site.write_text(
        "fault_classes:\n  cuda_oom:\n    override: {keywords: append}\n    keywords: [HIP out of memory]\n"
    )
    compiled = require_rulebook([str(site)])
    m = next(m for m in compiled.matchers if m.id == "weak.cuda_oom")
    assert "HIP" in m.pattern and "ran" in m.pattern  # appended, the shipped tokens kept
    store, result, _ = _replay(compiled, "hipErrorOutOfMemory: HIP out of memory\n")
    (inc,) = result.incidents
    assert store.incident(inc.id).fault_class == "cuda_oom"


def test_bad_keywords_are_an_error_with_file_line_col(tmp_path):
    site = tmp_path / "site.yaml"
    site.write_text("fault_classes:\n  cuda_oom:\n    override: true\n    keywords: [ok, '']\n")
    errors = load_rulebook([str(site)]).errors
    assert errors and any(e.code == "E-TYPE" and "keywords" in e.message for e in errors)
    assert re.search(r"site\.yaml:4:\d+", str(errors[0]))


def test_a_matcher_may_not_take_the_weak_name(tmp_path):
    site = tmp_path / "site.yaml"
    site.write_text("matchers:\n  - {id: weak.cuda_oom, source: [job], pattern: 'x'}\n")
    errors = load_rulebook([str(site)]).errors
    assert any(e.code == "E-DUP-ID" and "weak-evidence" in e.message for e in errors)


def test_the_log_end_carries_the_keyword_only_when_nothing_progressed_after_it():
    compiled = require_rulebook()
    _, _, facts = _replay(compiled, OOM_KILLER)
    (end,) = [f for f in facts if f.kind == "log_end"]
    assert end.get("weak_class") == "host_oom" and end.get("keyword") == "oom-killer"
    text = OOM_KILLER + "iter 100: loss 4.2110, time 561.94ms, mfu 31.20%\n"
    store, result, facts = _replay(compiled, text)
    (end,) = [f for f in facts if f.kind == "log_end"]
    assert end.get("tail") == "progress" and end.get("weak_class") is None
    assert result.incidents == []


def test_a_node_scoped_class_reached_by_keyword_is_recommended_never_acted_on():
    compiled = require_rulebook(overlays=[("grant", GRANT_ACT)])
    acted = decide(compiled, "gpu_unavailable", ("n1",), "no usable GPU on n1")
    assert acted.autonomy == "act"  # the same class from specific evidence acts
    weak = decide(compiled, "gpu_unavailable", ("n1",), "keyword", weak="no CUDA-capable device")
    assert weak.autonomy == "recommend"
    assert "weak evidence" in weak.mode_why and "no CUDA-capable device" in weak.mode_why
    # a class that isolates no node keeps its grant: a keyword may restart a job
    assert decide(compiled, "nccl_network_error", (), "keyword", weak="connection reset").autonomy == "act"


def test_explain_says_the_evidence_was_a_keyword_and_which():
    compiled = require_rulebook()
    store, result, _ = _replay(compiled, OOM_KILLER)
    (inc,) = result.incidents
    report = build(store, inc.id)
    assert report["weak"] == {"keyword": "oom-killer", "fault_class": "host_oom"}
    assert "weak evidence: keyword 'oom-killer' of class host_oom" in render_text(report)
    # specific evidence: no such line
    store, result, _ = _replay(compiled, "RuntimeError: No CUDA GPUs are available\n")
    (inc,) = result.incidents
    report = build(store, inc.id)
    assert report["weak"] is None and "weak evidence" not in render_text(report)


def test_rules_eval_reports_the_share_of_right_answers_the_keywords_gave():
    compiled = require_rulebook()
    cases = [
        Case("w-1", "https://github.com/equinor/ert/issues/7797", "app", OOM_KILLER, "host_oom"),
        Case(
            "s-1",
            "https://github.com/pytorch/pytorch/issues/1",
            "app",
            "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
            "cuda_oom",
        ),
    ]
    report = evaluate(compiled, cases)
    assert [r.weak for r in report.results] == [True, False]
    assert report.right == 2 and report.weak_right == 1
    out = report.to_json()["weak_evidence"]
    assert out == {"right": 1, "of_right": 2, "share": 0.5, "answered": 1}
    json.dumps(out)
    assert evaluate_case(compiled, cases[1], ReteNetwork(compiled)).weak is False


def test_a_flood_of_one_keyword_gives_one_weak_fact_until_progress():
    """Thinning (StreamFacts): of each class, only the first hit since the last progress line is
    a fact, so a job that prints the same unexplained error line 2,000 times costs one fact; a
    progress line re-arms it. Without the thinning there would be 2,000 weak facts."""
    compiled = require_rulebook()
    line = "send to 10.1.2.3:29500 failed: Broken pipe\n"
    progress = (
        " iteration      200/  100000 | consumed samples:        51200 | elapsed time per iteration (ms): 950.1 |\n"
    )
    other = "ERROR rendezvous: network is unreachable (host 10.0.0.5)\n"
    _, _, facts = _replay(compiled, line * 2000 + other + progress + other)
    weak = [f for f in facts if f.kind == "log" and f.get("weak")]
    assert [f.get("keyword") for f in weak] == ["Broken pipe", "network is unreachable"]


def test_a_keyword_on_a_line_a_specific_matcher_explains_is_no_fact():
    compiled = require_rulebook()
    _, _, facts = _replay(compiled, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    logs = [f for f in facts if f.kind == "log"]
    assert logs and not any(f.get("weak") for f in logs)


def test_of_two_classes_keywords_on_one_line_the_longer_decides():
    # constructed: one line holding cuda_oom's "OutOfMemoryError" and host_oom's longer
    # "java.lang.OutOfMemoryError"; and nccl_timeout's "timeout expired" after storage's
    # "Unable to mount volumes": the longer keyword is the line's, wherever it stands (with the
    # specific matchers off, engine/ops/ablate.py: they read both lines in the whole rulebook)
    from engine.ops.ablate import ablated

    compiled = ablated(require_rulebook())
    for text, want in (
        ("java.lang.OutOfMemoryError: Java heap space\n", "host_oom"),
        ("Unable to mount volumes for pod x: timeout expired waiting for volumes to attach\n", "storage_io_error"),
    ):
        _, _, facts = _replay(compiled, text)
        weak = [f for f in facts if f.kind == "log" and f.get("weak")]
        assert [f.get("weak_class") for f in weak] == [want]
