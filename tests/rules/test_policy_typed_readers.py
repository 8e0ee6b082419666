"""The engine reads the compiled policy through the typed ``Policy``'s attributes, never through
its mapping view (``policy["plans"]``, ``policy.get("autonomy")``), which is kept for printing the
policy as written and for tests (review M11). The rulebook's own builders work on the layered
policy *document* (``Rulebook.policy``, ``FileModel.policy``) and are left out."""

from __future__ import annotations

import ast
from pathlib import Path

from engine.core.linetime import DEFAULT_ZONE, log_zone
from engine.rulebook import load_rulebook

ENGINE = Path(__file__).resolve().parents[2] / "engine"
#: where ``.policy`` is the layered document a Policy is built from, not a Policy
DOCUMENT_READERS = {"rulebook/compile.py", "rulebook/layer.py", "rulebook/lint.py", "rulebook/__init__.py"}
MAPPING_METHODS = {"get", "items", "keys", "values"}


def _mapping_reads(tree: ast.AST) -> list[int]:
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "policy":
            lines.append(node.lineno)
        elif (
            isinstance(node, ast.Attribute)
            and node.attr in MAPPING_METHODS
            and isinstance(node.value, ast.Attribute)
            and node.value.attr == "policy"
        ):
            lines.append(node.lineno)
        elif isinstance(node, (ast.For, ast.comprehension)) and isinstance(node.iter, ast.Attribute):
            if node.iter.attr == "policy":
                lines.append(getattr(node, "lineno", 0) or node.iter.lineno)
        elif isinstance(node, ast.Call) and any(isinstance(a, ast.Attribute) and a.attr == "policy" for a in node.args):
            lines.append(node.lineno)  # the whole policy handed on, to be read as a mapping there
    return lines


def test_no_module_of_the_engine_reads_the_policy_as_a_mapping():
    found = []
    for path in sorted(ENGINE.rglob("*.py")):
        rel = path.relative_to(ENGINE).as_posix()
        if rel in DOCUMENT_READERS:
            continue
        found += [f"engine/{rel}:{n}" for n in _mapping_reads(ast.parse(path.read_text(), str(path)))]
    assert found == []


def test_the_log_zone_is_a_typed_field_of_the_policy():
    site = load_rulebook(defaults=False, overlays=[("zone.yaml", "policy:\n  log_timezone: Asia/Kolkata\n")])
    assert site.ok, site.errors
    assert site.compiled.policy.log_timezone == "Asia/Kolkata" == log_zone(site.compiled.policy.log_timezone)
    assert log_zone(None) == DEFAULT_ZONE
