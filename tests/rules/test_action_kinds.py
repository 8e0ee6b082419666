"""Actions declare what they are (``kind:``) and are treated by kind, not by name (review M7)."""

from __future__ import annotations

from engine.live import paging, verify
from engine.ops.schema_json import rulebook_schema
from engine.rulebook import load_rulebook
from engine.rulebook.model import ACTION_KINDS

SITE = """\
actions:
  drain_gpu:
    description: a site's own drain, under a name of its own
    kind: drain
    per: node
    argv: [scontrol, update, "NodeName={{ node }}", State=DRAIN, "Reason=recover incident {{ incident }}"]
  pager:
    kind: page
    argv: [logger, "incident {{ incident }}"]
"""


def _load(text: str):
    return load_rulebook(defaults=False, overlays=[("site.yaml", text)])


def test_an_action_is_verified_by_its_kind_whatever_its_name():
    res = _load(SITE)
    assert res.ok, res.errors
    compiled = res.compiled
    assert verify.verify_name(compiled, {"action": "drain_gpu"}) == "node_drained"
    assert paging.is_page(compiled, "pager") and not paging.is_page(compiled, "drain_gpu")
    assert paging.page_action(compiled) == "pager"


def test_an_unknown_kind_is_an_error_at_its_place():
    res = _load("actions:\n  oops:\n    kind: reboot\n    argv: [true]\n")
    assert not res.ok
    [d] = [d for d in res.diagnostics if d.severity == "error"]
    assert (str(d.mark), d.code) == ("site.yaml:3:11", "E-VALUE") and "'reboot'" in d.message


def test_an_action_without_a_kind_takes_its_name_s_with_a_warning():
    res = _load("actions:\n  requeue:\n    argv: [scontrol, requeue, '{{ job }}']\n  mine:\n    argv: [true]\n")
    assert res.ok, res.errors
    warned = {str(d.mark): d.message for d in res.diagnostics if d.code == "W-ACTION-KIND"}
    assert warned == {
        "site.yaml:3:5": "action requeue: no kind; taken as 'requeue' from its name",
        "site.yaml:5:5": "action mine: no kind; taken as 'other' from its name",
    }
    assert verify.verify_name(res.compiled, {"action": "requeue"}) == "job_requeued"
    assert verify.verify_name(res.compiled, {"action": "mine"}) == "none"


def test_the_generated_schema_lists_the_kinds():
    action = rulebook_schema()["$defs"]["action"]["properties"]["kind"]
    assert action["enum"] == list(ACTION_KINDS)


def test_every_shipped_action_declares_its_kind():
    res = load_rulebook()
    assert res.ok
    assert all(a.kind in ACTION_KINDS for a in res.compiled.actions.values())
