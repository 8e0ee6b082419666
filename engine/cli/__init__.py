"""The recover command line: one typer app (common.py), its commands (main.py, rules.py, ops.py) and
one error boundary (main.main). Nothing else in engine imports it."""

from engine.cli.main import app, main

__all__ = ["app", "main"]
