"""JSON Schema (draft 2020-12) of one rulebook file, for editors and CI linters.

Generated from the rulebook's one declarative spec (``engine/rulebook/spec.py``), the same spec
the validator's key and type tables come from, so the two cannot drift apart;
``tests/rules/test_spec_agreement.py`` checks that they agree key by key and type by type, and
``tests/ops/test_schema.py`` checks every shipped rulebook against the schema. The validator stays
the authority: the schema cannot express cross-file rules (layering, references, regex and
template compilation).

Usage::

    schema = rulebook_schema()
    json.dumps(schema, indent=2)      # what `recover rules schema` prints

A YAML file opts in with a modeline that the YAML language server reads::

    # yaml-language-server: $schema=recover-rulebook.schema.json
"""

from __future__ import annotations

from typing import Any

import yaml

from engine.rulebook import fault_class_files, policy_files
from engine.rulebook.spec import GUARDS, json_schema

__all__ = ["rulebook_schema", "SCHEMA_ID"]

SCHEMA_ID = "https://recover.invalid/schemas/rulebook.schema.json"


def _shipped(files: list, section: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for path in files:
        out.update((yaml.safe_load(path.read_text()) or {}).get(section, {}) or {})
    return out


def _shipped_fault_classes() -> list[str]:
    """The shipped class names, as examples: a site may declare more, so they are not an enum."""
    return list(_shipped(fault_class_files(), "fault_classes"))


def rulebook_schema() -> dict[str, Any]:
    """The JSON Schema of one rulebook file; each guard setting's default is the shipped policy's
    (rules/50-policy.yaml, the one place the defaults live)."""
    policy = _shipped(policy_files(), "policy")
    defaults = {g: policy[g] for g in GUARDS if isinstance(policy.get(g), dict)}
    return json_schema(SCHEMA_ID, _shipped_fault_classes(), defaults)
