import textwrap
from pathlib import Path

import pytest

from engine.rulebook import load_rulebook


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
