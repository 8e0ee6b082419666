"""docs/rulebook.md and the schema agree: every key the validator accepts is documented, and
every key the doc's YAML examples use is one the validator accepts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from engine.rulebook.conditions import OPS
from engine.rulebook.schema import GUARD_KEYS, ITEM_KEYS, SECTION_KEYS

DOC = Path(__file__).resolve().parents[2] / "docs" / "rulebook.md"
TEXT = DOC.read_text()


def accepted() -> list[tuple[str, str]]:
    out = [("section", k) for k in SECTION_KEYS]
    out += [(item, k) for item, keys in ITEM_KEYS.items() for k in keys]
    out += [(f"policy.{g}", k) for g, keys in GUARD_KEYS.items() for k in keys]
    out += [("where", op) for op in OPS + ("same", "any", "macro")]
    return out


def documented(key: str) -> bool:
    return re.search(rf"`{re.escape(key)}[`:\s]|(^|[\s{{,\[-]){re.escape(key)}:", TEXT, re.M) is not None


@pytest.mark.parametrize("where,key", accepted())
def test_every_accepted_key_is_documented(where, key):
    assert documented(key), f"docs/rulebook.md does not mention {where} key {key!r}"


def test_the_check_can_fail():
    assert not documented("max_drian")


def _yaml_blocks():
    for block in re.findall(r"```yaml\n(.*?)```", TEXT, re.S):
        try:
            doc = yaml.safe_load(block)
        except yaml.YAMLError:
            continue
        if isinstance(doc, dict):
            yield _without_ellipses(doc)


def _without_ellipses(value):
    """`{...}` and `, ...` in the doc's examples stand for "and so on"."""
    if isinstance(value, dict):
        return {k: _without_ellipses(v) for k, v in value.items() if k != "..."}
    if isinstance(value, list):
        return [_without_ellipses(v) for v in value if v != "..."]
    return value


def test_every_key_in_the_docs_examples_is_accepted():
    seen = 0
    for doc in _yaml_blocks():
        assert set(doc) <= set(SECTION_KEYS), set(doc) - set(SECTION_KEYS)
        policy = doc.get("policy")
        for key, value in (policy if isinstance(policy, dict) else {}).items():
            seen += 1
            assert key in ITEM_KEYS["policy"], key
            if key in GUARD_KEYS:
                assert set(value) <= set(GUARD_KEYS[key]), (key, set(value) - set(GUARD_KEYS[key]))
        for fc in (doc.get("fault_classes") or {}).values():
            seen += 1
            assert set(fc) <= set(ITEM_KEYS["fault_class"]), fc
        for section, item in (("matchers", "matcher"), ("rules", "rule"), ("tests", "test")):
            for entry in doc.get(section) or []:
                seen += 1
                assert set(entry) <= set(ITEM_KEYS[item]), (section, set(entry) - set(ITEM_KEYS[item]))
                for e in entry.get("expect") or []:
                    assert set(e) <= set(ITEM_KEYS["expectation"]), e
                for c in entry.get("when") or []:
                    assert set(c) <= set(ITEM_KEYS["condition"]), c
        for action in (doc.get("actions") or {}).values():
            seen += 1
            assert set(action) <= set(ITEM_KEYS["action"]), action
    assert seen > 20
