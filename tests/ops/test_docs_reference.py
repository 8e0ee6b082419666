"""docs/commands.md names every `recover` command, and the docs link to files that exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.main import get_command

from engine.cli import app

REPO = Path(__file__).resolve().parents[2]
DOCS = ["docs/commands.md", "docs/deploying.md", "docs/site-rulebook.md", "docs/goodput.md"]


def _commands(group, prefix=()):
    for name, cmd in sorted(getattr(group, "commands", {}).items()):
        path = prefix + (name,)
        if getattr(cmd, "commands", None):
            yield from _commands(cmd, path)
        else:
            yield " ".join(path)


def test_commands_md_covers_every_command():
    text = (REPO / "docs" / "commands.md").read_text()
    commands = list(_commands(get_command(app)))
    assert {"review", "report", "rules schema", "rules show", "rules explain-line", "silence add"} <= set(commands)
    missing = [c for c in commands if f"`recover {c}" not in text]
    assert missing == []


@pytest.mark.parametrize("doc", DOCS)
def test_relative_links_resolve(doc):
    path = REPO / doc
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", path.read_text()):
        if "://" in target:
            continue
        assert (path.parent / target).exists(), f"{doc} links to {target}, which does not exist"
