"""Templates that only print variables render without Jinja: the same text as Jinja's, for the
default rulebook's templates and hostile values; anything else is left to Jinja."""

from __future__ import annotations

import itertools

import pytest

from engine.rulebook import require_rulebook
from engine.rulebook.compile import Template
from engine.rulebook.templating import jinja_env, simple_parts

VALUES = [
    "n1",
    "",
    "{{ node }}",
    "a}}b{%c%}{#d#}",
    "line\nbreak\n",
    "  spaced  ",
    "ünï\u00a0code\x00",
    0,
    -7,
    2**70,
    True,
    None,
    1.5,
    ["a", "b"],
]


def _jinja(source, variables):
    try:
        return jinja_env().from_string(source).render(variables)
    except Exception as exc:
        return type(exc)


def _ours(t, variables):
    try:
        return t.render(variables)
    except Exception as exc:
        return type(exc)


def _templates():
    compiled = require_rulebook()
    for action in compiled.actions.values():
        yield from action.argv
    yield from (
        Template(s, jinja_env().from_string(s))
        for s in ("NodeName={{ node }}", "{{job}}", "{{ incident }}:{{ node }}/{{ job }}", "x {{ true }} {{ none }}")
    )


def test_the_default_rulebook_has_simple_templates():
    simple = [t.source for t in _templates() if simple_parts(t.source) is not None]
    assert any("NodeName={{ node }}" in s for s in simple) and any(s == "{{ job }}" for s in simple)


@pytest.mark.parametrize("template", list(_templates()), ids=lambda t: t.source[:40])
def test_simple_rendering_is_jinjas(template):
    names = sorted(set(simple_parts(template.source)[1])) if simple_parts(template.source) else ["node", "job"]
    base = {"incident": "12", "job": "77", "attempt": 0, "node": "n1", "nodes": ["n1"], "excluded": ["n1"]}
    base |= {"fault_class": "xid", "decision": "d", "reason": "r", "fault_reason": "r", "outcome": "o"}
    base |= {"evidence": {"first_line": "l", "count": 1, "nodes": ["n1"]}, "alert": "[]"}
    checked = 0
    for combo in itertools.product(VALUES, repeat=min(2, len(names))):
        variables = dict(base)
        variables.update(zip(names, combo))
        assert _ours(template, variables) == _jinja(template.source, variables), variables
        checked += 1
    variables = {k: v for k, v in base.items() if k != names[0]}  # missing: Jinja's error, not ours
    assert _ours(template, variables) == _jinja(template.source, variables)
    assert checked >= len(VALUES)


@pytest.mark.parametrize(
    "source",
    [
        "{{ node|upper }}",
        "{{- node }}",
        "{{  node  }}",
        "a\n{{ node }}\n",
        "{% if x %}{{ node }}{% endif %}",
        "{{ true }}",
    ],
)
def test_anything_else_is_left_to_jinja(source):
    assert simple_parts(source) is None
