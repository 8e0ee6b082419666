"""The one sandboxed Jinja environment of the rulebook's templates.

Its own module so that the compiler (which runs the linter) and the linter (which parses the
templates it checks) share it without importing each other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jinja2.sandbox import SandboxedEnvironment

__all__ = ["jinja_env"]

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
