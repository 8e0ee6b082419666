"""The policy's defaults live in one place, the shipped rules/50-policy.yaml: a rulebook loaded
with --no-defaults that says nothing of the policy gets the same settle window, isolation and
plans as the shipped rulebook, a site changes one key without restating the rest, and only the
plans a site writes itself must name defined actions."""

from __future__ import annotations

import textwrap

import yaml

from engine.rulebook import load_rulebook, policy_files, require_rulebook

SITE = textwrap.dedent("""\
    matchers:
      - {id: oom, source: [job], pattern: 'CUDA out of memory'}
    rules:
      - id: fault.oom
        description: CUDA out of memory
        when: [{as: l, kind: log, where: {matcher: oom}}]
        then: {fault: {fault_class: cuda_oom}}
    actions:
      requeue: {per: job, argv: [scontrol, requeue, "{{ job }}"]}
    """)


def _shipped_policy() -> dict:
    (path,) = policy_files()
    return yaml.safe_load(path.read_text())["policy"]


def test_a_rulebook_without_a_policy_gets_the_shipped_one(tmp_path):
    site = tmp_path / "site.yaml"
    site.write_text(SITE)
    mine = require_rulebook([str(site)], defaults=False).policy
    shipped = require_rulebook().policy
    raw = _shipped_policy()
    assert set(raw) <= set(mine)
    for key in raw:  # every key the shipped file sets, with the value the shipped rulebook has
        assert mine[key] == shipped[key], key
    assert list(mine["plans"]["stop"]) == raw["plans"]["stop"]
    assert mine["settle"] == shipped["settle"] > 0


def test_a_site_changes_one_key_and_keeps_the_rest(tmp_path):
    site = tmp_path / "site.yaml"
    site.write_text(SITE + "policy:\n  settle: 7m\n  plans: {restart: [requeue]}\n")
    mine = require_rulebook([str(site)], defaults=False).policy
    assert mine["settle"] == 420.0
    assert list(mine["plans"]["restart"]) == ["requeue"]
    assert list(mine["plans"]["stop"]) == _shipped_policy()["plans"]["stop"]  # left as shipped


def test_only_the_sites_own_plans_must_name_defined_actions(tmp_path):
    site = tmp_path / "site.yaml"
    # the shipped stop plan names cancel and notify, which this rulebook does not define: no error
    assert load_rulebook([str(site.parent / "missing")], defaults=False).errors  # the folder is missing
    site.write_text(SITE)
    assert load_rulebook([str(site)], defaults=False).ok
    # a plan the site writes itself is checked
    site.write_text(SITE + "policy:\n  plans: {restart: [requeue, page_oncall]}\n")
    result = load_rulebook([str(site)], defaults=False)
    assert not result.ok
    (err,) = result.errors
    assert err.code == "E-REF" and "page_oncall" in err.message and str(site) in str(err)


def test_the_shared_outage_policy_is_checked_and_layered(tmp_path):
    """policy.shared_outage (issue 21): a site changes one threshold and keeps the rest; a class
    no file declares, in it or in the other guards that name classes, is an error where it is
    written, and so is a threshold that cannot be one."""
    site = tmp_path / "site.yaml"
    site.write_text(SITE + "policy:\n  shared_outage: {min_jobs: 8}\n")
    mine = require_rulebook([str(site)], defaults=False).policy.shared_outage
    shipped = require_rulebook().policy.shared_outage
    assert mine.min_jobs == 8 and (mine.window, mine.min_users, mine.classes) == (
        shipped.window,
        shipped.min_users,
        shipped.classes,
    )
    site.write_text(
        SITE
        + "policy:\n  shared_outage:\n    classes: [storage_io_eror]\n    min_jobs: 1\n"
        + "  suspects: {classes: [nccl_timeuot]}\n  blast_radius: {max_requeues: -1}\n"
    )
    errors = [str(e) for e in load_rulebook([str(site)], defaults=False).errors]
    assert any(
        ":12:5: E-VALUE policy.shared_outage.classes: unknown fault class 'storage_io_eror'" in e for e in errors
    )
    assert any(":13:15: E-VALUE policy.shared_outage.min_jobs must be a whole number >= 2" in e for e in errors)
    assert any("policy.suspects.classes: unknown fault class 'nccl_timeuot'" in e for e in errors)
    assert any("policy.blast_radius.max_requeues must be a whole number >= 0" in e for e in errors)
