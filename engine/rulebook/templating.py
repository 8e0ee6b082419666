"""The one sandboxed Jinja environment of the rulebook's templates.

Its own module so that the compiler (which runs the linter) and the linter (which parses the
templates it checks) share it without importing each other.
"""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:
    from jinja2 import nodes
    from jinja2.sandbox import SandboxedEnvironment

__all__ = ["jinja_env", "parsed", "simple_parts", "render_simple"]

#: ``{{ name }}`` (or ``{{name}}``): a variable printed as it is
_SIMPLE_VAR = re.compile(r"\{\{ ?([A-Za-z_][A-Za-z0-9_]*) ?\}\}")
#: Jinja's delimiters: text that holds one is left to Jinja
_SYNTAX = ("{{", "}}", "{%", "%}", "{#", "#}")
#: names Jinja reads as constants, operators or globals rather than variables
_NOT_VARIABLES = frozenset(
    "true false none True False None and or not in is if else range dict lipsum cycler joiner namespace".split()
)
_MISSING: Any = object()

_ENV: SandboxedEnvironment | None = None


def jinja_env() -> SandboxedEnvironment:
    """The one sandboxed Jinja environment (made on first use: a command that renders nothing,
    with its rulebook read back from the cache, never imports Jinja)."""
    global _ENV
    if _ENV is None:
        import jinja2
        from jinja2.sandbox import SandboxedEnvironment

        _ENV = SandboxedEnvironment(undefined=jinja2.StrictUndefined, autoescape=False, keep_trailing_newline=False)
    return _ENV


@functools.lru_cache(maxsize=4096)
def parsed(source: str) -> nodes.Template:
    """``jinja_env().parse(source)``, kept per source: the linter and the deriver each walk a
    template's tree, and a rulebook repeats its templates. Readers must not change the tree
    (Jinja's code generator folds constants in place: the compiler's check parses its own).
    A source that does not parse raises ``jinja2.TemplateSyntaxError`` each time."""
    return jinja_env().parse(source)


def simple_parts(source: str) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """A template that only prints variables (``NodeName={{ node }}``) as (texts, names), the
    texts around the names, for ``render_simple``; None for anything else (filters, tests,
    blocks, whitespace control, a newline): those are Jinja's alone."""
    if "\n" in source or "\r" in source:  # Jinja's newline handling (the trailing one is dropped)
        return None
    pieces = _SIMPLE_VAR.split(source)
    texts, names = tuple(pieces[0::2]), tuple(pieces[1::2])
    if not names or any(n in _NOT_VARIABLES for n in names) or any(m in t for t in texts for m in _SYNTAX):
        return None
    return texts, names


def render_simple(parts: tuple[tuple[str, ...], tuple[str, ...]], variables: Mapping[str, Any]) -> str | None:
    """What Jinja renders for ``parts`` (``simple_parts``) when every variable is a string or an
    integer (Jinja prints ``str(value)``); None otherwise (missing, None, a bool, a list ...:
    Jinja renders it, or raises as it would)."""
    texts, names = parts
    out = [texts[0]]
    for name, text in zip(names, texts[1:]):
        value = variables.get(name, _MISSING)
        kind = type(value)
        if kind is str:
            out.append(value)
        elif kind is int:
            out.append(str(value))
        else:
            return None
        out.append(text)
    return "".join(out)
