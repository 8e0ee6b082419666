"""Fixtures for every test."""

from __future__ import annotations

import logging
import textwrap
from pathlib import Path

import pytest

from engine.rulebook import load_rulebook


@pytest.fixture(autouse=True)
def _root_logging_restored():
    """A CLI command run in-process (typer's CliRunner) sets up logging as the service would: the
    root logger's level (``recover demo`` sets ERROR) and handlers. Left in place, a later test's
    ``caplog`` sees nothing below that level, so each test gets the root logger back as it was."""
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    yield
    root.setLevel(level)
    for handler in [h for h in root.handlers if h not in handlers]:
        root.removeHandler(handler)


@pytest.fixture
def write_rules(tmp_path: Path):
    """Write YAML text (dedented) to files and load them without the shipped defaults."""

    def write(*texts: str, defaults: bool = False):
        paths = []
        for i, text in enumerate(texts):
            p = tmp_path / f"{i:02d}-rules.yaml"
            p.write_text(textwrap.dedent(text))
            paths.append(p)
        return load_rulebook(paths, defaults=defaults)

    return write
