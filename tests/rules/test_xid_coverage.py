"""The default rulebook covers every Xid of NVIDIA's catalog, and isolates exactly the right ones.

Reads ../shared/reference/xid-catalog.csv (or the copy named by $RECOVER_XID_CATALOG) and the
YAML of rules/ with plain pyyaml, so that it runs without the engine.

What it proves:
- every code 1-173 of the catalog is in exactly one ``xid_*`` list of rules/00-lists.yaml;
- the lists that isolate a node (the ones whose symptom rules are ``fatal`` hardware symptoms)
  hold exactly the codes whose effective immediate action is RESET_GPU or RESTART_BM;
- RESTART_APP and IGNORE codes, and the CONTACT_SUPPORT ("unused, escalate") codes, are only
  ever warnings;
- every xid_* list is used by a symptom rule over ``xid`` facts, with the severity its bucket
  calls for.

"Effective" immediate action: most rows carry RESET_GPU or RESTART_BM literally. A few carry a
workflow or no bucket; for those the catalog text resolves to a reset or a reboot, and
``RESOLVED`` below says why, citing the CSV's own action text (which the test checks).
"""

from __future__ import annotations

import csv
import os
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "rules"


def _catalog_path() -> Path:
    env = os.environ.get("RECOVER_XID_CATALOG")
    if env:
        return Path(env)
    for cand in (
        ROOT.parent / "shared" / "reference" / "xid-catalog.csv",
        ROOT / "shared" / "reference" / "xid-catalog.csv",
        Path("/work/shared/reference/xid-catalog.csv"),
    ):
        if cand.is_file():
            return cand
    pytest.skip("xid-catalog.csv not found (set RECOVER_XID_CATALOG)")


# code -> (resolved action, a phrase that must appear in the CSV's action text to justify it)
RESOLVED = {
    48: ("RESET_GPU", "solo -> RESET_GPU"),  # WORKFLOW_XID_48
    74: ("RESET_GPU", "GPU reset or node reboot needed"),  # WORKFLOW_NVLINK_ERR
    151: ("RESTART_BM", "RESTART_VM"),  # the Slurm node *is* the VM
    167: ("RESTART_BM", "gpud suggests reboot"),  # no bucket published
    168: ("RESTART_BM", "re-attempt boot"),  # no bucket published
    169: ("RESET_GPU", "treat like Xid 62 (reset)"),  # no bucket published
    171: ("RESET_GPU", "follow WORKFLOW_XID_48"),  # companion of 48 (DRAM)
    172: ("RESET_GPU", "follow WORKFLOW_XID_48"),  # companion of 48 (SRAM)
    173: ("RESTART_BM", "node-level fatal"),  # gpud only
}
ISOLATE_ACTIONS = {"RESET_GPU", "RESTART_BM"}
ISOLATE_LISTS = {"xid_fell_off_bus", "xid_memory_fatal", "xid_nvlink_fatal", "xid_hardware_reset"}
HARDWARE_SYMPTOMS = {"gpu_fell_off_bus", "gpu_memory_uncorrectable", "nvlink_error", "gpu_hardware_other"}


def _load_catalog() -> dict[int, dict]:
    with open(_catalog_path(), newline="") as fh:
        rows = list(csv.DictReader(fh))
    out = {}
    for row in rows:
        m = re.match(r"\s*immediate=([^;]*)", row["action"])
        assert m, f"Xid {row['code']}: no immediate= in {row['action']!r}"
        out[int(row["code"])] = dict(row, immediate=m.group(1).strip())
    return out


def _load_rulebook() -> tuple[dict, list]:
    lists: dict = {}
    rules: list = []
    for path in sorted(RULES.glob("*.yaml")):
        doc = yaml.safe_load(path.read_text()) or {}
        for name, value in (doc.get("lists") or {}).items():
            lists[name] = value["items"] if isinstance(value, dict) else value
        rules.extend(doc.get("rules") or [])
    return lists, rules


CATALOG = _load_catalog()
LISTS, RULES_ = _load_rulebook()
XID_LISTS = {name: [int(c) for c in items] for name, items in LISTS.items() if name.startswith("xid_")}


def effective_action(code: int) -> str:
    row = CATALOG[code]
    if code in RESOLVED:
        action, phrase = RESOLVED[code]
        assert phrase in row["action"], f"Xid {code}: the CSV no longer says {phrase!r}; re-check RESOLVED"
        return action
    return row["immediate"]


def test_catalog_is_complete():
    assert sorted(CATALOG) == list(range(1, 174))


def test_every_code_in_exactly_one_list():
    seen: dict[int, list[str]] = {}
    for name, codes in XID_LISTS.items():
        assert len(codes) == len(set(codes)), f"{name} repeats a code"
        for c in codes:
            seen.setdefault(c, []).append(name)
    missing = sorted(set(CATALOG) - set(seen))
    twice = {c: names for c, names in seen.items() if len(names) > 1}
    unknown = sorted(set(seen) - set(CATALOG))
    assert not missing, f"Xids in no list: {missing}"
    assert not twice, f"Xids in several lists: {twice}"
    assert not unknown, f"codes not in the catalog: {unknown}"


def test_isolate_lists_hold_exactly_reset_and_reboot_codes():
    isolating = sorted(c for name in ISOLATE_LISTS for c in XID_LISTS[name])
    expected = sorted(c for c in CATALOG if effective_action(c) in ISOLATE_ACTIONS)
    assert isolating == expected, (
        f"isolate but are not RESET_GPU/RESTART_BM: {sorted(set(isolating) - set(expected))}; "
        f"RESET_GPU/RESTART_BM but do not isolate: {sorted(set(expected) - set(isolating))}"
    )


def test_literal_buckets_map_where_the_brief_says():
    assert XID_LISTS["xid_fell_off_bus"] == [79]
    for c in (48, 64, 95, 140):
        assert c in XID_LISTS["xid_memory_fatal"], c
    for c in (74, 136):
        assert c in XID_LISTS["xid_nvlink_fatal"], c
    assert sorted(XID_LISTS["xid_nvlink5_decoded"]) == list(range(144, 151))
    assert XID_LISTS["xid_recovery_action"] == [154]
    assert XID_LISTS["xid_sympathetic"] == [45]


@pytest.mark.parametrize("bucket", ["RESTART_APP", "IGNORE", "CONTACT_SUPPORT"])
def test_non_isolating_buckets_never_isolate(bucket):
    codes = {c for c, row in CATALOG.items() if row["immediate"] == bucket}
    isolating = {c for name in ISOLATE_LISTS for c in XID_LISTS[name]}
    assert not (codes & isolating), f"{bucket} codes that isolate: {sorted(codes & isolating)}"
    for c in (13, 31, 43, 63, 94):
        assert c not in isolating


def _xid_rules() -> list[tuple[str, str, str, dict]]:
    """(list name, symptom name, severity, the rest of the where-clause) of rules over xid facts."""
    out = []
    for rule in RULES_:
        when = rule.get("when") or []
        if len(when) != 1 or when[0].get("kind") != "xid":
            continue
        where = dict(when[0].get("where") or {})
        code = where.pop("code", None)
        if not isinstance(code, dict) or "in" not in code or not str(code["in"]).startswith("@"):
            continue
        sym = rule["then"]["symptom"]
        out.append((code["in"][1:], sym["name"], sym.get("severity", "error"), where))
    return out


def test_each_xid_list_has_a_symptom_rule_of_the_right_severity():
    by_list: dict[str, list[tuple[str, str, dict]]] = {}
    for lst, name, sev, rest in _xid_rules():
        by_list.setdefault(lst, []).append((name, sev, rest))
    for lst in XID_LISTS:
        assert lst in by_list, f"no symptom rule reads list {lst}"
        for name, sev, rest in by_list[lst]:
            if lst in ISOLATE_LISTS:
                assert (sev, rest) == ("fatal", {}), (lst, name, sev, rest)
                assert name in HARDWARE_SYMPTOMS, (lst, name)
            elif lst in ("xid_nvlink5_decoded", "xid_recovery_action"):
                # decided by the text: the fatal rule must test the decoded word
                if sev == "fatal":
                    assert rest, f"{lst}: a fatal rule must check the decoded text ({name})"
                else:
                    assert sev == "warning", (lst, name, sev)
            else:
                assert sev == "warning", f"{lst} must only warn, rule makes {name}/{sev}"
                assert name not in HARDWARE_SYMPTOMS, (lst, name)


def test_isolate_classes_follow_the_brief():
    by_list = {lst: name for lst, name, sev, rest in _xid_rules() if sev == "fatal" and not rest}
    assert by_list["xid_fell_off_bus"] == "gpu_fell_off_bus"
    assert by_list["xid_memory_fatal"] == "gpu_memory_uncorrectable"
    assert by_list["xid_nvlink_fatal"] == "nvlink_error"
    assert by_list["xid_hardware_reset"] == "gpu_hardware_other"
